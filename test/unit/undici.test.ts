// shared/undici.ts: undici's Pool and its request API without undici's index
// (which loads fetch, WebSocket, caches and mocks too: ~9 MiB of RSS).
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import * as undici from 'undici';
import { Pool } from '../../shared/undici.js';

t.test('the Pool is the class undici exports', async (t) => {
  t.equal(Pool, undici.Pool);
});

t.test('alone, it gives the request API without loading undici\'s index or fetch', async (t) => {
  const probe = fileURLToPath(new URL('../support/undici-probe.ts', import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [...process.execArgv, probe]);
  const seen = JSON.parse(stdout) as { request: string; stream: string; indexLoaded: boolean; fetchLoaded: boolean; files: number };
  t.equal(seen.request, 'function', 'pool.request');
  t.equal(seen.stream, 'function', 'pool.stream');
  t.equal(seen.indexLoaded, false, 'undici/index.js not loaded');
  t.equal(seen.fetchLoaded, false, 'no part of fetch loaded');
  t.ok(seen.files > 10, `undici's files are seen (${seen.files})`);
});
