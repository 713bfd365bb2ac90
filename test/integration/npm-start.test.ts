// Stopping the service as users run it: `npm start` (and start:proxy,
// start:admin) in a process group of its own, under load, stopped with SIGINT or
// SIGTERM sent to the group (a terminal's Ctrl-C, a supervisor) or to npm alone,
// and the harsh supervisor's rule: once npm has exited, the rest of the group is
// SIGKILLed. Every answered call must be in the audit log exactly once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { assertAuditedOnce, auditRequestIds, startLoad } from '../support/load.js';
import { api, createAgent, login, signup, TLS_DIR } from '../support/service.js';
import { spawnNpmStart, spawnService, type SpawnedService } from '../support/spawn-service.js';
import { splitModeEnv } from '../support/split-mode.js';
import { startUpstream } from '../support/upstream.js';

const root = mkdtempSync(join(tmpdir(), 'tcg-npm-start-'));
const upstream = await startUpstream();
t.teardown(async () => {
  await upstream.close();
  rmSync(root, { recursive: true, force: true });
});
const base = { GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'), PORT: '0', AUDIT_BATCH_MS: '200' };

/**
 * Sends `signal` to npm's process group or to npm alone, waits for npm to exit,
 * then SIGKILLs whatever is left of the group, as a supervisor whose main
 * process ended does. Resolves with npm's exit code and whether anything was left.
 */
async function stopLikeSupervisor(npm: SpawnedService, signal: NodeJS.Signals, to: 'group' | 'npm'): Promise<{ code: number | null; leftBehind: boolean }> {
  const pid = npm.child.pid!;
  const exit = new Promise<number | null>((resolve) => npm.child.once('exit', (code) => resolve(code)));
  process.kill(to === 'group' ? -pid : pid, signal);
  const code = await exit;
  let leftBehind = true;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    leftBehind = false; // ESRCH: the group was already empty
  }
  return { code, leftBehind };
}

for (const [signal, to] of [['SIGTERM', 'group'], ['SIGINT', 'group'], ['SIGTERM', 'npm']] as const) {
  t.test(`npm start, ${signal} to ${to === 'group' ? 'the process group' : 'npm alone'} under load: every answered call audited once`, async (t) => {
    const env = { ...base, DATA_DIR: join(root, `all-in-one-${signal}-${to}`) };
    const npm = await spawnNpmStart('all-in-one', env);
    const owner = await signup(npm.url);
    const agent = await createAgent(npm.url, owner, 'npm-start', 'none');
    const load = startLoad(`${npm.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await new Promise((r) => setTimeout(r, 1500));
    const { code, leftBehind } = await stopLikeSupervisor(npm, signal, to);
    await load.stop();
    t.equal(code, 0, 'npm exits 0: the service drained, flushed and exited 0');
    t.notOk(leftBehind, 'npm exited only after the service had');
    t.ok(load.answered.length > 50, `${load.answered.length} calls answered (${load.refused()} of them 503 while shutting down)`);

    const again = await spawnService('all-in-one', env);
    assertAuditedOnce(t, await auditRequestIds(again.url, await login(again.url, owner.email), agent.id), load.answered);
    t.equal(await again.stop(), 0);
  });
}

t.test('split mode through npm run start:admin and start:proxy, each stopped with SIGTERM to its group', async (t) => {
  const common = await splitModeEnv(t, root, base);
  // One after the other: each npm script builds into the same dist/.
  const admin = await spawnNpmStart('admin', { ...common, SPOOL_DIR: join(root, 'spool-admin') });
  const proxy = await spawnNpmStart('proxy', { ...common, ADMIN_URL: admin.url, SPOOL_DIR: join(root, 'spool-proxy') });
  const owner = await signup(proxy.url);
  const agent = await createAgent(proxy.url, owner, 'npm-split', 'none');
  // A policy long enough to be read by each process's policy reader (a worker thread, loaded from dist/ here),
  // for an agent of its own: the load's agent's audit rows must be the load's calls.
  const decided = await createAgent(proxy.url, owner, 'npm-split-policy', 'none');
  const rules = Array.from({ length: 400 }, (_, i) => `  - {name: r${i}, tool: "t${i}.example.com", action: GET, decision: deny}`).join('\n');
  const large = `version: "1"\nrules:\n${rules}\n  - {name: no-admin, tool: "*", action: GET, path: /admin/**, decision: deny}\n`;
  const refused = await api(proxy.url, owner, 'POST', `/agents/${decided.id}/policy`, { rules_yaml: large.replace('decision: deny}\n', 'decision: dny}\n') });
  t.match(refused.json, { error: 'invalid_policy', message: /^rule 1 \(line 3\): 'decision' must be allow, deny or approve, not 'dny'/ }, refused.text.slice(0, 200));
  t.equal((await api(proxy.url, owner, 'POST', `/agents/${decided.id}/policy`, { rules_yaml: large })).status, 200);
  const admin403 = await fetch(`${proxy.url}/proxy/${decided.api_key}/${upstream.authority}/admin/x`);
  t.equal(admin403.status, 403, 'the proxy decides with the large policy');
  await admin403.arrayBuffer();
  const load = startLoad(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
  await new Promise((r) => setTimeout(r, 1500));
  const proxyStop = await stopLikeSupervisor(proxy, 'SIGTERM', 'group');
  await load.stop();
  t.equal(proxyStop.code, 0, 'the proxy drained, flushed and exited 0');
  t.notOk(proxyStop.leftBehind, 'npm exited only after the proxy had');
  t.ok(load.answered.length > 50, `${load.answered.length} calls answered`);
  // In ClickHouse, read through the admin process.
  assertAuditedOnce(t, await auditRequestIds(admin.url, owner, agent.id), load.answered);

  const adminStop = await stopLikeSupervisor(admin, 'SIGTERM', 'group');
  t.equal(adminStop.code, 0, 'the admin process exited 0');
  t.notOk(adminStop.leftBehind, 'npm exited only after the admin process had');
});
