// Run as a process of its own by test/unit/undici.test.ts: loads shared/undici.ts
// alone and prints what it gives and which of undici's files are then loaded.
import { createRequire } from 'node:module';
import { Pool } from '../../shared/undici.js';

const require = createRequire(import.meta.url);
const pool = new Pool('http://127.0.0.1:9');
const loaded = Object.keys(require.cache).filter((file) => file.includes('/node_modules/undici/'));
process.stdout.write(`${JSON.stringify({
  request: typeof pool.request,
  stream: typeof pool.stream,
  indexLoaded: loaded.some((file) => file.endsWith('/node_modules/undici/index.js')),
  fetchLoaded: loaded.some((file) => file.includes('/lib/web/fetch/')),
  files: loaded.length,
})}\n`);
await pool.close();
