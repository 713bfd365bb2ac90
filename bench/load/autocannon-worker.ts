// Runs autocannon in its own process (so the runner's event loop, which samples
// memory and times SSE events, is not the one generating load). Reads a LoadSpec
// as JSON from the file named by argv[2] and prints one `BENCH_JSON {...}` line.
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import type { LoadSpec } from './types.js';

const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as LoadSpec;
const paths = spec.paths;
const body = spec.jsonBody !== undefined ? Buffer.from(spec.jsonBody) : spec.bodyBytes > 0 ? Buffer.alloc(spec.bodyBytes, 'x') : undefined;

const result = await autocannon({
  url: `${spec.origin}${paths[0] ?? '/'}`,
  method: spec.method,
  connections: spec.connections,
  duration: spec.durationSec,
  timeout: 10,
  ...(body !== undefined ? { body, headers: { 'content-type': spec.jsonBody !== undefined ? 'application/json' : 'application/octet-stream' } } : {}),
  ...(paths.length > 1
    ? {
      requests: [{
        setupRequest: (request: Record<string, unknown>) => {
          request.path = paths[Math.floor(Math.random() * paths.length)];
          return request;
        },
      }],
    }
    : {}),
});

process.stdout.write(`BENCH_JSON ${JSON.stringify({
  requests: result.requests.total,
  duration_s: result.duration,
  p50_ms: result.latency.p50,
  p99_ms: result.latency.p99,
  errors: result.errors,
  non2xx: result.non2xx,
})}\n`);
