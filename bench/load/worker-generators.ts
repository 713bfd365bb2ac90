// The load generators written in Node, each run in a child process (so the
// runner's own event loop, which samples memory and times SSE events, is not
// the one generating load): autocannon (autocannon-worker.ts, the default when
// wrk is not installed) and the fixed-rate open-loop one (open-loop-worker.ts,
// when wrk2 is not). A worker reads its LoadSpec from a JSON file and prints one
// `BENCH_JSON {...}` line.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CA_FILE, benchScript } from '../paths.js';
import { runProcess } from '../processes.js';
import { toResult, type LoadGenerator } from './types.js';

let specCounter = 0;

function workerGenerator(name: 'autocannon' | 'open-loop', worker: string): LoadGenerator {
  return {
    name,
    async run(spec, workDir) {
      const file = join(workDir, `${name}-spec-${++specCounter}.json`);
      writeFileSync(file, JSON.stringify(spec));
      // The direct comparator is HTTPS with the test certificate: trust its CA.
      const env = { ...process.env, NODE_EXTRA_CA_CERTS: CA_FILE };
      const { code, stdout, stderr } = await runProcess(name, process.execPath, [...benchScript(worker), file], (spec.durationSec + 30) * 1000, env);
      const line = stdout.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || line === undefined) throw new Error(`${name} exited with ${code}: ${stderr.slice(-1000)}`);
      const r = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>;
      const n = (key: string): number => r[key] ?? 0;
      const result = toResult(n('requests'), n('duration_s'), n('p50_ms'), n('p99_ms'), n('errors'), n('non2xx'));
      return r.p999_ms !== undefined ? { ...result, p999Ms: r.p999_ms } : result;
    },
  };
}

export function createAutocannon(): LoadGenerator {
  return workerGenerator('autocannon', 'load/autocannon-worker');
}

export function createOpenLoop(): LoadGenerator {
  return workerGenerator('open-loop', 'load/open-loop-worker');
}
