// Every micro-benchmark of `npm run bench:micro` (bench/micro/hot-path.ts) still
// runs: its fixtures are built from the code they measure (a 10,000-rule policy
// once outgrew a limit the policy compiler gained, and the whole run threw). Each
// case is measured for a few ms only: the numbers are not read here.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import t from 'tap';
import { PROJECT_ROOT } from '../support/test-file-in-child.js';

t.test('npm run bench:micro runs every file and prints one table', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, join(PROJECT_ROOT, 'bench/micro/hot-path.ts')], { cwd: PROJECT_ROOT, env: { ...process.env, MICRO_MS: '5' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (out += c));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.equal(code, 0, out.slice(-2000));
  for (const file of ['header-copy.ts', 'evaluate-policy.ts', 'seal.ts', 'audit-journal.ts']) t.match(out, `| **bench/micro/${file}** | |`, file);
  t.match(out, /\| evaluatePolicy \(10,000 rules, the last matches\) \| \d+ \|/);
});
