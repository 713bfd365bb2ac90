// A fixed-rate, open-loop load generator (the bench's fallback when wrk2 is not
// installed), in its own process. Requests are scheduled at exact instants
// (`rate` a second, spread evenly) whatever the answers do, and each latency is
// counted from the instant its request was due, not from when it was sent: a
// stall of the target shows in every request that waited behind it
// (coordinated omission corrected, as wrk2 does). The schedule is kept by a
// 1 ms interval timer, so a request may leave up to ~1 ms after its instant;
// that lag is in every comparator's latencies alike. Requests go to the
// connections in turn, as wrk2 spreads its rate over its connections: each
// connection carries rate/connections requests a second, so none sits idle long
// enough for a server's idle timeout (uWS closes after 10 s) to close it and
// the schedule to pay new TLS handshakes in a burst mid-run. Reads a LoadSpec
// as JSON from the file named by argv[2] and prints one `BENCH_JSON {...}` line.
import { readFileSync } from 'node:fs';
import { Client } from 'undici';
import type { LoadSpec } from './types.js';

const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as LoadSpec;
const rate = spec.rate ?? 1000;
const intervalMs = 1000 / rate;
const body = spec.jsonBody !== undefined ? Buffer.from(spec.jsonBody) : spec.bodyBytes > 0 ? Buffer.alloc(spec.bodyBytes, 'x') : undefined;
const headers = body === undefined ? {} : { 'content-type': spec.jsonBody !== undefined ? 'application/json' : 'application/octet-stream' };
// NODE_EXTRA_CA_CERTS (set by the runner) makes the direct comparator's test certificate trusted.
const clients = Array.from({ length: spec.connections }, () => new Client(spec.origin, { pipelining: 1, keepAliveTimeout: 30_000 }));
let turn = 0;

const latencies: number[] = [];
let errors = 0;
let non2xx = 0;
let inFlight = 0;

async function send(dueAt: number): Promise<void> {
  inFlight++;
  const client = clients[turn]!;
  turn = (turn + 1) % clients.length;
  try {
    const path = spec.paths.length > 1 ? spec.paths[Math.floor(Math.random() * spec.paths.length)]! : spec.paths[0]!;
    // A connection still busy with its last request queues this one (as a wrk2 connection waits): the wait is in its latency.
    const res = await client.request({ path, method: spec.method, headers, ...(body !== undefined ? { body } : {}) });
    await res.body.dump();
    latencies.push(performance.now() - dueAt);
    if (res.statusCode < 200 || res.statusCode > 299) non2xx++;
  } catch {
    errors++;
  } finally {
    inFlight--;
  }
}

// Every connection is opened (and its TLS handshake done) before the schedule
// starts: a connection opened mid-run would put its handshake in some latencies.
const path0 = spec.paths[0]!;
await Promise.all(clients.map(async (client) => {
  try {
    const res = await client.request({ path: path0, method: spec.method, headers, ...(body !== undefined ? { body } : {}) });
    await res.body.dump();
  } catch {
    // counted in the run, if it persists
  }
}));

const startedAt = performance.now();
const endAt = startedAt + spec.durationSec * 1000;
let next = startedAt;
await new Promise<void>((resolve) => {
  const timer = setInterval(() => {
    const now = performance.now();
    for (; next <= now && next < endAt; next += intervalMs) void send(next);
    if (next >= endAt) {
      clearInterval(timer);
      resolve();
    }
  }, 1);
});
// What is still in flight gets 10 s, then counts as an error.
const drainUntil = performance.now() + 10_000;
while (inFlight > 0 && performance.now() < drainUntil) await new Promise((r) => setTimeout(r, 5));
errors += inFlight;
const durationS = (performance.now() - startedAt) / 1000;
await Promise.all(clients.map((client) => client.destroy()));

latencies.sort((a, b) => a - b);
const at = (q: number): number => (latencies.length === 0 ? 0 : latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!);
process.stdout.write(`BENCH_JSON ${JSON.stringify({
  requests: latencies.length,
  duration_s: durationS,
  p50_ms: at(0.5),
  p99_ms: at(0.99),
  p999_ms: at(0.999),
  errors,
  non2xx,
})}\n`);
process.exit(0);
