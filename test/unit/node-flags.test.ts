// Every way the product starts a split-mode proxy passes the node flags it
// ships with (server/node-flags.ts): `npm run start:proxy`, docker-compose's
// proxies; the bench and the tests' spawned proxies take them from the list.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse } from 'yaml';
import { PROXY_NODE_FLAGS } from '../../server/node-flags.js';

const ROOT = new URL('../../', import.meta.url);

t.test('npm run start:proxy runs node with the proxy\'s flags', async (t) => {
  const scripts = (JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as { scripts: Record<string, string> }).scripts;
  t.match(scripts['start:proxy'], `exec node ${PROXY_NODE_FLAGS.join(' ')} dist/server/main-proxy.js`);
});

t.test('docker-compose.yml starts each proxy with them', async (t) => {
  const compose = parse(readFileSync(new URL('docker-compose.yml', ROOT), 'utf8')) as { services: Record<string, { command?: string[] }> };
  const proxies = Object.values(compose.services).filter((s) => s.command?.includes('dist/server/main-proxy.js'));
  t.ok(proxies.length >= 1, 'a proxy service');
  for (const proxy of proxies) t.same(proxy.command, ['node', ...PROXY_NODE_FLAGS, 'dist/server/main-proxy.js']);
});
