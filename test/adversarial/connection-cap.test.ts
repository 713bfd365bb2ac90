// One cap on upstream calls in flight, so connections in use, across every origin
// (UPSTREAM_CONNECTIONS_TOTAL):
// per-origin pools alone would let many origins open pools × connections sockets
// and exhaust the process's file descriptors. A call beyond the cap waits for
// a call to end, up to the connect timeout, then is 502.
import t from 'tap';
import { eventually } from '../support/eventually.js';
import { api, createAgent, signup, startTestService } from '../support/service.js';
import { startUpstream, type Upstream } from '../support/upstream.js';

// Calls in flight at the upstreams (each holds a connection in use).
let running = 0;
let peak = 0;
const slow = {
  '/slow': (_req: unknown, res: { end(body: string): void }) => {
    running++;
    peak = Math.max(peak, running);
    setTimeout(() => {
      running--;
      res.end('slow');
    }, 300);
  },
};
const counted = (): Promise<Upstream> => startUpstream(slow as never);
const one = await counted();
const two = await counted();
const service = await startTestService({ UPSTREAM_CONNECTIONS_TOTAL: '2', UPSTREAM_CONNECT_TIMEOUT_MS: '1000' });
t.teardown(async () => {
  await service.close();
  await one.close();
  await two.close();
});
const owner = await signup(service.url);
const agent = await createAgent(service.url, owner, 'capped');

t.test('calls to two origins share the cap: at most 2 upstream calls (connections in use) at once, every call answered', async (t) => {
  const calls = [one, two, one, two].map((u) => api(service.url, null, 'GET', `/proxy/${agent.api_key}/${u.authority}/slow`));
  const answers = await Promise.all(calls);
  t.strictSame(answers.map((a) => a.status), [200, 200, 200, 200], 'the calls beyond the cap waited for a connection');
  t.equal(peak, 2, `at most 2 calls in flight upstream across both origins (peak ${peak})`);
});

t.test('a connect that waits past the connect timeout is 502 upstream_unreachable', async (t) => {
  // Two calls hold both connections (the upstream never answers them).
  const held = [one, two].map((u) => fetch(`${service.url}/proxy/${agent.api_key}/${u.authority}/stall-headers`).catch(() => null));
  // Both reached their upstreams (a fixed wait was not always enough on a loaded machine).
  await eventually(async () => ([one, two].every((u) => u.seen.some((r) => r.url === '/stall-headers')) ? true : undefined));
  // A third origin needs a new connection.
  const third = await startUpstream();
  t.teardown(() => third.close());
  const started = performance.now();
  const res = await api(service.url, null, 'GET', `/proxy/${agent.api_key}/${third.authority}/json`);
  t.equal(res.status, 502);
  t.equal(res.json.error, 'upstream_unreachable');
  t.ok(performance.now() - started >= 900, 'after waiting about the connect timeout');
  t.equal(third.seen.length, 0, 'the third origin was never reached');
  await one.close();
  await two.close();
  await Promise.all(held);
});
