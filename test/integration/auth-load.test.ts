// Signups and logins under load, against the real all-in-one service: a client
// address may attempt SIGNUP_MAX_PER_ADDRESS signups a window, and password
// hashes (argon2, ~30 ms of a core each on libuv's pool, which the embedded
// ClickHouse's inserts share) run one at a time, so a flood of them neither
// stops the audit's writes nor takes both cores from the proxy beside them.
import t from 'tap';
import { PASSWORD_WAITING_PER_ADDRESS } from '../../admin/auth.js';
import { assertError, requestFrom } from '../support/checks.js';
import { api, createAgent, signup, startTestService } from '../support/service.js';
import { spawnServiceInTempDir } from '../support/spawn-service.js';
import { startUpstream } from '../support/upstream.js';

const PASSWORD = 'correct horse battery';
const upstream = await startUpstream();
// Room for the queue's tests; the bound's own test runs a process with the defaults.
// 41 failed logins (more than a burst of 40): the queue, not the login limit, refuses some of a burst.
const service = await startTestService({ SIGNUP_MAX_PER_ADDRESS: '100', LOGIN_MAX_FAILURES: '41' });
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

t.test('with the defaults, a client address may attempt 20 signups an hour; the next is 429 and creates nothing', async (t) => {
  const own = await spawnServiceInTempDir(t, 'tcg-signups-', 'all-in-one');
  const signupFrom = (addr: string, email: string) => requestFrom(own.url, addr, 'POST', '/auth/signup', { email, password: PASSWORD });
  const loginFrom = (addr: string, email: string) => requestFrom(own.url, addr, 'POST', '/auth/login', { email, password: PASSWORD });
  const addr = '127.0.0.2';
  t.equal((await signupFrom(addr, 'one@example.com')).status, 201);
  t.equal((await signupFrom(addr, 'one@example.com')).status, 409, 'a taken email counts too: else the 409s would tell emails apart at any rate');
  assertError(t, await signupFrom(addr, 'not-an-email'), 400, 'invalid_request', 'email');
  for (let i = 3; i <= 20; i++) {
    const res = await signupFrom(addr, `n${i}@example.com`);
    if (res.status !== 201) t.fail(`signup ${i}: ${res.status} ${res.text}`);
  }
  const refused = await signupFrom(addr, 'refused@example.com');
  assertError(t, refused, 429, 'rate_limited');
  t.equal(refused.json.limit, 'signups', 'the 21st (the malformed one did not count)');
  const wait = Number(refused.headers.get('retry-after'));
  t.ok(wait > 3500 && wait <= 3600, `Retry-After until the hour ends (${wait} s)`);
  t.equal(refused.json.retry_after, wait, 'retry_after in the body says the same');
  t.match(refused.json.message, /20 signups from this client address within 3600 s/);
  t.equal((await loginFrom('127.0.0.1', 'refused@example.com')).status, 401, 'the refused signup created no account');
  t.equal((await signupFrom(addr, 'one@example.com')).status, 429, 'still refused, whatever the email');
  t.equal((await signupFrom('127.0.0.3', 'refused@example.com')).status, 201, 'another client address signs up meanwhile');
  t.equal((await loginFrom(addr, 'one@example.com')).status, 200, "logins from the address are not limited by its signups");
});

t.test('password checks run one at a time: a client address asking for many at once waits its share (429, limit password_checks)', async (t) => {
  const addr = '127.0.0.4';
  const asked = 40;
  const answers = await Promise.all(Array.from({ length: asked }, (_, i) => requestFrom(service.url, addr, 'POST', '/auth/signup', { email: `queue-${i}@example.com`, password: PASSWORD })));
  const statuses = answers.map((res) => res.status);
  const ok = statuses.filter((s) => s === 201).length;
  t.ok(ok >= PASSWORD_WAITING_PER_ADDRESS && ok < asked, `${ok} signups of ${asked} asked at once were hashed (at least the ${PASSWORD_WAITING_PER_ADDRESS} that may wait)`);
  const refused = answers.filter((res) => res.status !== 201);
  t.ok(refused.length > 0 && refused.every((res) => res.status === 429 && res.json.limit === 'password_checks' && res.headers.get('retry-after') === '5'), `the rest are 429 with limit password_checks and Retry-After 5 (${[...new Set(statuses)].join(', ')})`);
  t.match(refused[0]?.json.message ?? '', /password checks of this client address are waiting to run/);
  const again = answers.findIndex((res) => res.status !== 201);
  t.equal((await requestFrom(service.url, '127.0.0.1', 'POST', '/auth/login', { email: `queue-${again}@example.com`, password: PASSWORD })).status, 401, 'a refused one created no account');
  t.equal((await requestFrom(service.url, addr, 'POST', '/auth/signup', { email: 'queue-after@example.com', password: PASSWORD })).status, 201, 'the address is served again once its hashes ran');
});

t.test('a login the queue refuses is no failed login: it was never checked', async (t) => {
  const addr = '127.0.0.6';
  await requestFrom(service.url, '127.0.0.7', 'POST', '/auth/signup', { email: 'counted@example.com', password: PASSWORD });
  const login = (password: string) => requestFrom(service.url, addr, 'POST', '/auth/login', { email: 'counted@example.com', password });
  const burst = await Promise.all(Array.from({ length: 40 }, (_, i) => login(`wrong password ${i}`)));
  const checked = burst.filter((res) => res.status === 401).length;
  const queued = burst.filter((res) => res.status === 429 && res.json.limit === 'password_checks').length;
  t.equal(checked + queued, 40, `${checked} checked (401), ${queued} refused by the queue (429 password_checks)`);
  t.ok(queued > 0, 'the queue refused some');
  // Only the ones checked count: 41 - checked more wrong guesses are checked, then the login limit refuses.
  for (let i = checked; i < 41; i++) t.equal((await login('still wrong')).status, 401, `failure ${i + 1} of 41 is checked`);
  const limited = await login(PASSWORD);
  assertError(t, limited, 429, 'rate_limited');
  t.equal(limited.json.limit, undefined, 'the login limit (no limit field), even with the right password');
});

t.test("a flood of signups from many addresses leaves the proxied calls' audit written within 2 s", async (t) => {
  // Unbounded, the hashes queued ahead of chDB's inserts: a call's entry waited 6 s.
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'flooded', 'none');
  const call = async () => {
    const res = await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await res.arrayBuffer();
    return res.status;
  };
  const health = async () => (await api(service.url, null, 'GET', '/health')).json as { proxied_total: number; audit_written_total: number };
  // 100 signups a second for 3 s, from 60 addresses (three each).
  const statuses = new Map<number, number>();
  const attempts: Promise<void>[] = [];
  let sent = 0;
  const flood = setInterval(() => {
    for (let i = 0; i < 5 && sent < 300; i++) {
      const n = sent++;
      attempts.push(
        requestFrom(service.url, `127.0.1.${(n % 60) + 1}`, 'POST', '/auth/signup', { email: `flood-${n}@example.com`, password: PASSWORD }).then((res) => {
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        }),
      );
    }
  }, 50);
  // Meanwhile, calls one after another; after each, how long until the audit has it.
  const lags: number[] = [];
  const end = performance.now() + 3000;
  while (performance.now() < end) {
    t.equal(await call(), 200);
    const answered = (await health()).proxied_total;
    const since = performance.now();
    while ((await health()).audit_written_total < answered) await new Promise((r) => setTimeout(r, 5));
    lags.push(performance.now() - since);
  }
  clearInterval(flood);
  await Promise.all(attempts);
  const longest = Math.max(...lags);
  t.ok(longest < 2000, `the longest wait for a call's audit entry while signups flooded in: ${longest.toFixed(0)} ms over ${lags.length} calls (signups answered: ${[...statuses].map(([s, n]) => `${n}× ${s}`).join(', ')})`);
  t.ok((statuses.get(201) ?? 0) > 0, 'signups were served meanwhile');
});
