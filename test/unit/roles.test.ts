// What a process refuses to start without, per role (server/roles.ts): a pure
// function over the loaded configuration, tested on address strings.
import { generateKeyPairSync } from 'node:crypto';
import t from 'tap';
import { loadConfig } from '../../shared/config.js';
import { isLoopbackHost, startProblems } from '../../server/roles.js';

const split = { JWT_SECRET: 'x'.repeat(32), SECRET_KEY: 'a'.repeat(64), AUDIT_SIGNING_KEY: generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), CLICKHOUSE_URL: 'http://127.0.0.1:8123/audit', ADMIN_URL: 'http://127.0.0.1:8081' };

t.test('loopback listener addresses', async (t) => {
  for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', '0:0:0:0:0:0:0:1', 'localhost', 'LOCALHOST', '::ffff:127.0.0.1']) {
    t.ok(isLoopbackHost(host), host);
  }
  for (const host of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.1', '::ffff:10.0.0.1', 'example.com', '128.0.0.1', '::2']) {
    t.notOk(isLoopbackHost(host), host);
  }
});

t.test('an open /metrics only on a loopback HOST, unless METRICS_PUBLIC=true says so', async (t) => {
  t.strictSame(startProblems(loadConfig({}), 'all-in-one'), [], 'the default (127.0.0.1) starts');
  t.strictSame(startProblems(loadConfig({ HOST: '::1' }), 'all-in-one'), []);
  const open = startProblems(loadConfig({ HOST: '0.0.0.0' }), 'all-in-one');
  t.equal(open.length, 1);
  t.match(open[0], /METRICS_TOKEN/);
  t.strictSame(startProblems(loadConfig({ HOST: '0.0.0.0', METRICS_TOKEN: 'm'.repeat(16) }), 'all-in-one'), [], 'a token closes it');
  t.strictSame(startProblems(loadConfig({ HOST: '0.0.0.0', METRICS_PUBLIC: 'true' }), 'all-in-one'), [], 'open on purpose');
  t.strictSame(startProblems(loadConfig({ HOST: '0.0.0.0', METRICS_ENABLED: 'false' }), 'all-in-one'), [], 'no /metrics at all');
  t.equal(startProblems(loadConfig({ ...split, HOST: '0.0.0.0' }), 'proxy').length, 1, 'the same rule in split mode');
});

t.test('split mode needs the shared secrets, CLICKHOUSE_URL and, for a proxy, ADMIN_URL', async (t) => {
  t.strictSame(startProblems(loadConfig(split), 'proxy'), []);
  t.strictSame(startProblems(loadConfig(split), 'admin'), []);
  for (const name of ['JWT_SECRET', 'SECRET_KEY', 'AUDIT_SIGNING_KEY', 'CLICKHOUSE_URL'] as const) {
    const { [name]: _, ...without } = split;
    for (const role of ['proxy', 'admin'] as const) t.match(startProblems(loadConfig(without), role), [new RegExp(name)], `${role} without ${name}`);
  }
  const { ADMIN_URL: _, ...noAdmin } = split;
  t.match(startProblems(loadConfig(noAdmin), 'proxy'), [/ADMIN_URL/]);
  t.strictSame(startProblems(loadConfig(noAdmin), 'admin'), [], 'the admin process needs no ADMIN_URL');
});
