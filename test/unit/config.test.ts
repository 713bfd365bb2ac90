// Reading the configuration (shared/config.ts): what is refused, what a refusal
// shows of the value, and what counts as unset.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../shared/config.js';

const base = () => ({ DATA_DIR: mkdtempSync(join(tmpdir(), 'tcg-config-')), PORT: '0' });

function refusal(env: Record<string, string>): string {
  try {
    loadConfig({ ...base(), ...env });
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('accepted');
}

t.test('a blank value is unset: the default, not an empty host or directory', async (t) => {
  const config = loadConfig({ ...base(), HOST: '  ', SPOOL_DIR: ' ', PUBLIC_URL: '\t' });
  t.equal(config.host, '127.0.0.1', 'HOST=" " keeps the loopback default (uWS binds every interface on "")');
  t.match(config.spoolDir, /spool$/, 'SPOOL_DIR=" " is the data directory\'s spool');
});

t.test('HOST: an address as a URL writes it is taken bare; one with a port, a path or spaces is refused', async (t) => {
  t.equal(loadConfig({ ...base(), HOST: '[::1]' }).host, '::1', 'the listener could not bind [::1]');
  for (const host of ['not a host', '127.0.0.1/8', '[::1']) t.match(refusal({ HOST: host }), /HOST/, `${host}: refused`);
});

t.test('a refused value never shows a secret: tokens and keys as ***, a URL as its scheme and host', async (t) => {
  const token = refusal({ METRICS_TOKEN: 'hunter2-short' });
  t.match(token, /METRICS_TOKEN="?\*\*\*"?/);
  t.notMatch(token, /hunter2/);
  const url = refusal({ CLICKHOUSE_URL: 'http://guard:pa#ss@clickhouse:8123/audit' });
  t.match(url, /CLICKHOUSE_URL=/);
  t.notMatch(url, /pa#ss|guard:/, `no user or password: ${url}`);
  const hook = refusal({ APPROVAL_WEBHOOK_URL: 'ftp://hooks.example/secret-path-token' });
  t.notMatch(hook, /secret-path-token/, `no path: ${hook}`);
});

t.test('GUARD_DNS_SERVER is an IP address with an optional port 1-65535', async (t) => {
  for (const ok of ['1.1.1.1', '1.1.1.1:5353', '[::1]:53', '::1']) t.equal(loadConfig({ ...base(), GUARD_DNS_SERVER: ok }).dnsServer, ok, ok);
  // Port 0 made c-ares abort the process (SIGABRT) after the stores were open; 99999 was wrapped to 34463.
  for (const bad of ['1.1.1.1:0', '1.1.1.1:99999', 'dns.example', '1.1.1.1:x', '[::1]:0']) {
    t.match(refusal({ GUARD_DNS_SERVER: bad }), /GUARD_DNS_SERVER=.*must be an IP address/, bad);
  }
});

t.test("the live tail's keepalive default leaves room under the contract's 15 s: a timer never fires early, only late", async (t) => {
  const config = loadConfig(base());
  t.ok(config.auditStreamKeepaliveMs <= 10_000, `${config.auditStreamKeepaliveMs} ms`);
});
