// Every way the product starts a split-mode proxy passes the node flags and the
// environment it ships with (server/node-flags.ts): `npm run start:proxy`,
// docker-compose's proxies; the bench and the tests' spawned proxies take them
// from there.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse } from 'yaml';
import { PROXY_ENV, PROXY_NODE_FLAGS } from '../../server/node-flags.js';

const ROOT = new URL('../../', import.meta.url);

const envWords = Object.entries(PROXY_ENV).map(([name, value]) => `${name}=${value}`);

t.test('npm run start:proxy runs node with the proxy\'s flags and environment', async (t) => {
  const scripts = (JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as { scripts: Record<string, string> }).scripts;
  t.ok(envWords.length >= 1, 'an environment to check');
  t.match(scripts['start:proxy'], `exec env ${envWords.join(' ')} node ${PROXY_NODE_FLAGS.join(' ')} dist/server/main-proxy.js`);
});

t.test('docker-compose.yml starts each proxy with them', async (t) => {
  const compose = parse(readFileSync(new URL('docker-compose.yml', ROOT), 'utf8'), { merge: true }) as { services: Record<string, { command?: string[]; environment?: Record<string, string> }> };
  const proxies = Object.values(compose.services).filter((s) => s.command?.includes('dist/server/main-proxy.js'));
  t.ok(proxies.length >= 1, 'a proxy service');
  for (const proxy of proxies) {
    t.same(proxy.command, ['node', ...PROXY_NODE_FLAGS, 'dist/server/main-proxy.js']);
    for (const [name, value] of Object.entries(PROXY_ENV)) t.equal(proxy.environment?.[name], value, `${name} in its environment`);
  }
});

t.test('docker-compose.yml gives each guard process time to drain, end its streams and flush its audit before SIGKILL', async (t) => {
  const compose = parse(readFileSync(new URL('docker-compose.yml', ROOT), 'utf8'), { merge: true }) as { services: Record<string, { command?: string[]; stop_grace_period?: string }> };
  const guards = Object.values(compose.services).filter((s) => s.command?.some((part) => part.startsWith('dist/server/')));
  t.ok(guards.length >= 2, 'the admin and the proxies');
  for (const guard of guards) {
    // Docker's default is 10 s: SHUTDOWN_DRAIN_MS (10 s) alone, so open streams were killed unaudited.
    const seconds = Number(/^(\d+)s$/.exec(guard.stop_grace_period ?? '')?.[1] ?? 10);
    t.ok(seconds >= 10 + 1 + 12, `${guard.command?.at(-1)}: stop_grace_period ${guard.stop_grace_period ?? 'unset (10s)'} covers the 10 s drain, 1 s and the flush`);
  }
});
