// The audit pipeline's faults in split mode, end to end: ClickHouse down for
// seconds under a steady stream, a proxy killed with SIGKILL while it had
// batches spooled, and a proxy started while ClickHouse is down. In each, every
// call the proxy answered is in ClickHouse exactly once in the end.
//
// "In the end" is the proxy's own account: nothing pending, nothing spooled
// (GET /health). The spool replays one insert at a time, and the ClickHouse
// stand-in here (chDB behind an HTTP server) takes ~100 ms an insert on a busy
// 2-core box where a server takes a few: dozens of spooled batches can take tens
// of seconds, and a guessed wait made these tests fail on a slow run while no
// row was lost.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { auditTotal, createAgent, eventually, signup, TLS_DIR, type Session } from '../support/service.js';
import { spawnService, type SpawnedService } from '../support/spawn-service.js';
import { startSplitDeployment } from '../support/split-mode.js';
import { startUpstream } from '../support/upstream.js';

const root = mkdtempSync(join(tmpdir(), 'tcg-split-faults-'));
const upstream = await startUpstream();
const split = await startSplitDeployment(root, {
  GUARD_ALLOW_TARGETS: '127.0.0.1',
  NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
  AUDIT_BATCH_MS: '50',
  PORT: '0',
});
const { admin, proxyEnv } = split;
let proxyA: SpawnedService = await spawnService('proxy', proxyEnv('a'));
t.teardown(async () => {
  await proxyA.stop();
  await split.close();
  await upstream.close();
  rmSync(root, { recursive: true, force: true });
});

const owner: Session = await signup(proxyA.url);

async function health(proxy: SpawnedService): Promise<{ audit_pending: number; audit_spooled_batches: number }> {
  return (await (await fetch(`${proxy.url}/health`)).json()) as { audit_pending: number; audit_spooled_batches: number };
}

/** The agent's audit rows once `proxy` has nothing left to write (at most two minutes). */
async function auditedOnceDrained(proxy: SpawnedService, agentId: string): Promise<number> {
  await eventually(async () => {
    const h = await health(proxy);
    return h.audit_pending === 0 && h.audit_spooled_batches === 0 ? true : undefined;
  }, 120_000).catch(() => undefined);
  return auditTotal(admin.url, owner, agentId);
}

t.test('ClickHouse down for seconds under a steady stream: every call is audited once', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'steady');
  let calls = 0;
  let failures = 0;
  let running = true;
  const stream = (async () => {
    while (running) {
      const res = await fetch(`${proxyA.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
      await res.arrayBuffer();
      if (res.status === 200) calls++;
      else failures++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  await new Promise((r) => setTimeout(r, 1000));
  await split.stopClickHouse();
  await new Promise((r) => setTimeout(r, 3000));
  const spooled = (await health(proxyA)).audit_spooled_batches;
  t.ok(spooled > 0, `batches were spooled while ClickHouse was down (${spooled})`);
  await split.startClickHouse();
  await new Promise((r) => setTimeout(r, 1000));
  running = false;
  await stream;
  t.equal(failures, 0, 'the proxy kept answering');
  t.ok(calls > 50, `${calls} calls made`);
  t.equal(await auditedOnceDrained(proxyA, agent.id), calls, 'audit rows equal calls: none lost, none twice');
});

t.test('GET /ready is 503 within about 2 s while ClickHouse takes connections and answers nothing, and 200 once it answers again', async (t) => {
  t.equal((await fetch(`${proxyA.url}/ready`)).status, 200);
  split.pauseClickHouse(true);
  t.teardown(() => split.pauseClickHouse(false));
  const started = Date.now();
  const res = await fetch(`${proxyA.url}/ready`);
  const ms = Date.now() - started;
  t.equal(res.status, 503);
  t.match(await res.text(), /the audit store does not answer/);
  // A probe times out at 1 to 5 s; the ClickHouse client's own timeout is 10 s.
  t.ok(ms >= 1500 && ms < 4000, `answered after ${ms} ms`);
  split.pauseClickHouse(false);
  await eventually(async () => ((await fetch(`${proxyA.url}/ready`)).status === 200 ? true : undefined), 20_000);
});

t.test('a proxy killed with SIGKILL replays what it had spooled on its next start', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'killed');
  await split.stopClickHouse();
  let calls = 0;
  for (let i = 0; i < 30; i++) {
    const res = await fetch(`${proxyA.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await res.arrayBuffer();
    if (res.status === 200) calls++;
  }
  await eventually(async () => {
    const h = await health(proxyA);
    return h.audit_pending === 0 && h.audit_spooled_batches > 0 ? true : undefined;
  }, 10_000);
  await proxyA.kill9();
  await split.startClickHouse();
  proxyA = await spawnService('proxy', proxyEnv('a'));
  t.equal(await auditedOnceDrained(proxyA, agent.id), calls, `all ${calls} spooled records replayed by the restarted proxy`);
});

t.test('a proxy started while ClickHouse is down serves calls, spools, and the rows land once it is back', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'early');
  await split.stopClickHouse();
  const proxyC = await spawnService('proxy', proxyEnv('c'));
  t.teardown(() => proxyC.stop());
  let calls = 0;
  for (let i = 0; i < 20; i++) {
    const res = await fetch(`${proxyC.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await res.arrayBuffer();
    if (res.status === 200) calls++;
  }
  t.equal(calls, 20, 'the proxy answered while ClickHouse was down');
  await eventually(async () => ((await health(proxyC)).audit_spooled_batches > 0 ? true : undefined), 10_000);
  await split.startClickHouse();
  t.equal(await auditedOnceDrained(proxyC, agent.id), calls, 'every spooled row landed');
});

t.test('a saturated pipeline whose store and spool take nothing holds at most a tenth past its bound, however many refusals', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'overfull');
  await split.stopClickHouse();
  // One spooled batch fills a 1 KiB spool: saturated with next to nothing held.
  const proxyD = await spawnService('proxy', { ...proxyEnv('d'), AUDIT_QUEUE_MAX: '100', SPOOL_MAX_BYTES: '1024' });
  t.teardown(() => proxyD.stop());
  const statuses: number[] = [];
  const call = async (): Promise<void> => {
    const res = await fetch(`${proxyD.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await res.arrayBuffer();
    statuses.push(res.status);
  };
  await call();
  await eventually(async () => ((await health(proxyD)).audit_spooled_batches > 0 ? true : undefined), 10_000);
  for (let i = 0; i < 40; i++) await Promise.all(Array.from({ length: 10 }, call));
  const refused = statuses.filter((s) => s === 503).length;
  t.ok(refused >= 250, `refused 503 while saturated (${refused} of ${statuses.length})`);
  const held = (await health(proxyD)).audit_pending;
  t.ok(held >= 100 && held <= 110 + 10, `records held: the bound and its tenth, plus at most the calls in flight (${held}), not one a refusal`);
  const metrics = await (await fetch(`${proxyD.url}/metrics`)).text();
  const unrecorded = Number(/^tcg_audit_refusals_unrecorded_total (\d+)$/m.exec(metrics)?.[1]);
  // How many refusals came before saturation varies from run to run (CI saw 279 against a fixed 280): at most the headroom's are recorded.
  t.ok(unrecorded >= refused - 120 && unrecorded > 0, `the refusals past the headroom are counted (${unrecorded} of ${refused})`);
  await split.startClickHouse();
  const audited = await auditedOnceDrained(proxyD, agent.id);
  t.equal(audited + unrecorded, statuses.length, `every answer is a row or a counted refusal (${audited} rows)`);
});

t.test('a proxy stops in seconds while an admin request it passes through gets no answer', async (t) => {
  // An admin process that accepts and never answers (stalled, or a slow report).
  const held: Socket[] = [];
  const stalled = createServer((socket) => {
    held.push(socket);
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of held) socket.destroy();
    stalled.close();
  });
  const proxyD = await spawnService('proxy', { ...proxyEnv('d'), ADMIN_URL: `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`, SHUTDOWN_DRAIN_MS: '200' });
  const waiting = fetch(`${proxyD.url}/agents`, { headers: owner.auth }).then((r) => r.status, () => 'closed');
  await eventually(async () => (held.length > 0 ? true : undefined), 5000);
  const started = performance.now();
  t.equal(await proxyD.stop(), 0, 'exit 0');
  const took = performance.now() - started;
  // undici's pool close waited for the request: up to its 60 s headers timeout.
  t.ok(took < 5000, `stopped ${took.toFixed(0)} ms after SIGTERM`);
  t.not(await waiting, 200, 'the passed-through request was not answered as if the admin had');
});
