// The fixed-rate generator when wrk2 is not installed: open-loop-worker.ts, in
// a child process (the runner's own event loop samples memory and times SSE).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CA_FILE, benchScript } from '../paths.js';
import { runProcess } from '../processes.js';
import { toResult, type LoadGenerator } from './types.js';

let specCounter = 0;

export function createOpenLoop(): LoadGenerator {
  return {
    name: 'open-loop',
    async run(spec, workDir) {
      const file = join(workDir, `open-loop-spec-${++specCounter}.json`);
      writeFileSync(file, JSON.stringify(spec));
      const env = { ...process.env, NODE_EXTRA_CA_CERTS: CA_FILE };
      const { code, stdout, stderr } = await runProcess('open-loop', process.execPath, [...benchScript('load/open-loop-worker'), file], (spec.durationSec + 30) * 1000, env);
      const line = stdout.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || line === undefined) throw new Error(`the open-loop generator exited with ${code}: ${stderr.slice(-1000)}`);
      const r = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>;
      const n = (key: string): number => r[key] ?? 0;
      return { ...toResult(n('requests'), n('duration_s'), n('p50_ms'), n('p99_ms'), n('errors'), n('non2xx')), p999Ms: n('p999_ms') };
    },
  };
}
