// Where things are, whether the bench runs compiled (dist/bench/*.js, `npm run
// bench`) or from source under a TypeScript loader (a tap test importing
// bench/run.ts): child processes are started from the same kind of file as this
// module, with the loader flags this process was started with.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const FROM_SOURCE = import.meta.url.endsWith('.ts');

function findRoot(start: string): string {
  let dir = start;
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    dir = dirname(dir);
  }
  throw new Error(`bench: no package.json above ${start}`);
}

export const REPO_ROOT = findRoot(HERE);
export const TLS_DIR = join(REPO_ROOT, 'test', 'fixtures', 'tls');
export const CA_FILE = join(TLS_DIR, 'ca.crt');
export const SERVER_CERT = join(TLS_DIR, 'server.crt');
export const SERVER_KEY = join(TLS_DIR, 'server.key');
export const DEFAULT_RESULTS_DIR = join(REPO_ROOT, 'bench', 'results');

/** `node` arguments that run a module of the bench (`name` without extension, relative to bench/). */
export function benchScript(name: string): string[] {
  const file = join(HERE, `${name}${FROM_SOURCE ? '.ts' : '.js'}`);
  return [...(FROM_SOURCE ? process.execArgv : []), file];
}

/** `node` arguments that run the all-in-one guard (`node dist/server/main.js`). */
export function guardScript(): string[] {
  return serviceScript('server/main');
}

/**
 * `node` arguments that run a module of the service or its test support, by its
 * path from the package root without extension (`server/main-proxy`,
 * `test/support/clickhouse-http-server-main`): from dist/ when compiled.
 */
export function serviceScript(module: string): string[] {
  if (FROM_SOURCE) return [...process.execArgv, join(REPO_ROOT, `${module}.ts`)];
  const file = join(REPO_ROOT, 'dist', `${module}.js`);
  if (!existsSync(file)) throw new Error(`bench: dist/${module}.js is missing; run \`npm run build\` first`);
  return [file];
}
