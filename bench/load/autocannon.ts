// autocannon as the load generator (the default when wrk is not installed),
// run in a child process (autocannon-worker.ts).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CA_FILE, benchScript } from '../paths.js';
import { runProcess } from '../processes.js';
import { toResult, type LoadGenerator } from './types.js';

let specCounter = 0;

export function createAutocannon(): LoadGenerator {
  return {
    name: 'autocannon',
    async run(spec, workDir) {
      const file = join(workDir, `autocannon-spec-${++specCounter}.json`);
      writeFileSync(file, JSON.stringify(spec));
      // The direct comparator is HTTPS with the test certificate: trust its CA.
      const env = { ...process.env, NODE_EXTRA_CA_CERTS: CA_FILE };
      const { code, stdout, stderr } = await runProcess('autocannon', process.execPath, [...benchScript('load/autocannon-worker'), file], (spec.durationSec + 30) * 1000, env);
      const line = stdout.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || line === undefined) throw new Error(`autocannon exited with ${code}: ${stderr.slice(-1000)}`);
      const r = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>;
      const n = (key: string): number => r[key] ?? 0;
      return toResult(n('requests'), n('duration_s'), n('p50_ms'), n('p99_ms'), n('errors'), n('non2xx'));
    },
  };
}
