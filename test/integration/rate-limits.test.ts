// Rate limits in one all-in-one process, against a real HTTPS upstream: exact
// counts, burst, the stricter of two limits, a limit on one tool leaving
// another free, calls the rules deny counting nothing, an honest Retry-After,
// the IETF RateLimit fields, the audit entry of a refused call, /metrics, and
// POST /policy/check reporting the limits. The window arithmetic itself (the
// sliding window's promise, the split-mode share) is unit-tested with a clock
// the test moves: test/unit/rate-limiter.test.ts.
import t from 'tap';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService({ AUDIT_BATCH_MS: '20', GUARD_ALLOW_TARGETS: '127.0.0.1,localhost' });
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner: Session = await signup(service.url);

async function agentWithPolicy(name: string, yaml: string) {
  const agent = await createAgent(service.url, owner, name);
  const set = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: yaml });
  if (set.status !== 200) throw new Error(`policy: ${set.status} ${set.text}`);
  return agent;
}

function call(key: string, init: { method?: string; host?: string; path?: string } = {}) {
  const host = init.host ?? upstream.authority;
  return fetch(`${service.url}/proxy/${key}/${host}${init.path ?? '/echo'}`, { method: init.method ?? 'GET' }).then(async (res) => ({
    status: res.status,
    headers: res.headers,
    json: res.headers.get('content-type')?.includes('json') ? ((await res.json()) as any) : (await res.arrayBuffer(), null),
  }));
}

t.test('5/minute lets 5 quick calls through and refuses the 6th with the contract answer', async (t) => {
  const agent = await agentWithPolicy('five', `version: "1"
rules: []
limits:
  - name: per-minute
    tool: "*"
    rate: 5/minute
`);
  const seenBefore = upstream.seen.length;
  const remaining: string[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await call(agent.api_key);
    t.equal(res.status, 200, `call ${i + 1} passes`);
    t.equal(res.headers.get('ratelimit-policy'), '"per-minute";q=5;w=60');
    remaining.push(res.headers.get('ratelimit') ?? '');
  }
  t.strictSame(remaining.map((v) => /;r=(\d+);t=(\d+)$/.exec(v)?.[1]), ['4', '3', '2', '1', '0'], 'RateLimit counts the remaining calls down');
  for (const v of remaining) {
    const reset = Number(/;t=(\d+)$/.exec(v)?.[1]);
    t.ok(reset >= 1 && reset <= 64, `t=${reset}: the whole quota is back within the window (and one slot)`);
  }

  const refused = await call(agent.api_key);
  t.equal(refused.status, 429);
  t.equal(refused.json.error, 'rate_limited');
  t.equal(refused.json.limit, 'per-minute');
  t.match(refused.json.message, /per-minute/);
  const retryAfter = Number(refused.headers.get('retry-after'));
  t.equal(refused.json.retry_after, retryAfter, 'retry_after equals Retry-After');
  t.ok(retryAfter >= 55 && retryAfter <= 64, `Retry-After ${retryAfter}: when the first call leaves the minute`);
  t.equal(refused.headers.get('ratelimit-policy'), '"per-minute";q=5;w=60');
  t.equal(refused.headers.get('ratelimit'), `"per-minute";r=0;t=${retryAfter}`);
  t.equal(upstream.seen.length - seenBefore, 5, 'the refused call never reached the upstream');

  const rows = await eventually(async () => {
    const res = await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}`);
    return (res.json as any[]).length === 6 ? (res.json as any[]) : undefined;
  }, 5000);
  const denied = rows.filter((r) => r.decision === 'denied');
  t.equal(denied.length, 1, 'one audited denial');
  t.equal(denied[0].rule_matched, 'limit:per-minute');
  t.equal(denied[0].status_code, 429);
  t.equal(rows.filter((r) => r.decision === 'allowed').length, 5);
});

t.test('burst: N + burst at once from rest, then refused', async (t) => {
  const agent = await agentWithPolicy('burst', `version: "1"
rules: []
limits:
  - name: bursty
    tool: "*"
    rate: 2/hour
    burst: 3
`);
  const statuses = [];
  for (let i = 0; i < 7; i++) statuses.push((await call(agent.api_key)).status);
  t.strictSame(statuses, [200, 200, 200, 200, 200, 429, 429]);
  const res = await call(agent.api_key);
  t.equal(res.headers.get('ratelimit-policy'), '"bursty";q=5;w=3600');
});

t.test('two limits: every matching one must have room, and the one whose room comes back last is named', async (t) => {
  const agent = await agentWithPolicy('two', `version: "1"
rules: []
limits:
  - name: loose
    tool: "*"
    rate: 10/minute
  - name: strict-posts
    tool: "*"
    action: POST
    rate: 2/minute
  - name: hourly
    tool: "*"
    rate: 3/hour
`);
  t.equal((await call(agent.api_key, { method: 'POST' })).status, 200);
  const second = await call(agent.api_key, { method: 'POST' });
  t.equal(second.status, 200);
  t.match(second.headers.get('ratelimit') ?? '', /^"loose";r=8;t=\d+, "strict-posts";r=0;t=\d+, "hourly";r=1;t=\d+$/, 'an allowed call carries every matched limit');
  const third = await call(agent.api_key, { method: 'POST' });
  t.equal(third.status, 429);
  t.equal(third.json.limit, 'strict-posts', 'the stricter limit decides');
  t.equal((await call(agent.api_key)).status, 200, 'a GET is not counted by the POST limit; 3 of 3 hourly now');
  const full = await call(agent.api_key, { method: 'POST' });
  t.equal(full.status, 429);
  t.equal(full.json.limit, 'hourly', 'both full: the hourly one comes back last');
  t.ok(full.json.retry_after > 60, `and its Retry-After (${full.json.retry_after} s) is the hour's`);
});

t.test('a limit on one tool leaves another free', async (t) => {
  const agent = await agentWithPolicy('tools', `version: "1"
rules: []
limits:
  - name: loopback-ip
    tool: "127.0.0.1"
    rate: 1/minute
`);
  t.equal((await call(agent.api_key)).status, 200);
  t.equal((await call(agent.api_key)).status, 429, 'the limited tool is refused');
  const other = await call(agent.api_key, { host: `localhost:${upstream.port}` });
  t.equal(other.status, 200, 'another tool passes');
  t.equal(other.headers.get('ratelimit'), null, 'and carries no RateLimit field: no limit matched it');
  for (let i = 0; i < 3; i++) t.equal((await call(agent.api_key, { host: `localhost:${upstream.port}` })).status, 200);
});

t.test('calls the rules deny count against no limit', async (t) => {
  const agent = await agentWithPolicy('denied', `version: "1"
rules:
  - name: no-deletes
    tool: "*"
    action: DELETE
    decision: deny
limits:
  - name: all
    tool: "*"
    rate: 2/minute
`);
  for (let i = 0; i < 5; i++) {
    const res = await call(agent.api_key, { method: 'DELETE' });
    t.equal(res.status, 403);
    t.equal(res.headers.get('ratelimit'), null, 'a denied call carries no RateLimit field');
  }
  t.equal((await call(agent.api_key)).status, 200);
  t.equal((await call(agent.api_key)).status, 200, 'both allowed calls still had room');
  t.equal((await call(agent.api_key)).status, 429);
});

t.test('Retry-After is honest: a retry after it passes', async (t) => {
  const agent = await agentWithPolicy('honest', `version: "1"
rules: []
limits:
  - name: one-per-second
    tool: "*"
    rate: 1/second
`);
  t.equal((await call(agent.api_key)).status, 200);
  const refused = await call(agent.api_key);
  t.equal(refused.status, 429);
  const wait = Number(refused.headers.get('retry-after'));
  // The window plus at most one slot (1/16 of it), rounded up to whole seconds.
  t.ok(wait >= 1 && wait <= 2, `Retry-After ${wait}: a second and a slot at most, rounded up`);
  await new Promise((r) => setTimeout(r, wait * 1000));
  t.equal((await call(agent.api_key)).status, 200, 'the retry after Retry-After passes');
});

t.test('a policy without limits sends no RateLimit field', async (t) => {
  const agent = await agentWithPolicy('none', 'version: "1"\nrules: []\n');
  const res = await call(agent.api_key);
  t.equal(res.status, 200);
  t.equal(res.headers.get('ratelimit'), null);
  t.equal(res.headers.get('ratelimit-policy'), null);
});

t.test('POST /policy/check reports the limits that would apply, and counts nothing', async (t) => {
  const agent = await agentWithPolicy('check', `version: "1"
rules:
  - tool: "*"
    action: DELETE
    decision: deny
limits:
  - name: gets
    tool: "127.0.0.1"
    action: GET
    rate: 1/hour
    burst: 1
  - name: repos
    tool: "*"
    path: /repos/**
    rate: 5/day
`);
  for (let i = 0; i < 3; i++) {
    const check = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: '127.0.0.1', action: 'GET', reasoning: 'r' });
    t.equal(check.status, 200);
    t.strictSame(check.json.limits, [{ name: 'gets', rate: '1/hour', burst: 1, quota: 2, window_seconds: 3600 }]);
  }
  const withPath = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: '127.0.0.1', action: 'get', reasoning: 'r', path: '/repos/a/b' });
  t.strictSame(withPath.json.limits.map((l: any) => l.name), ['gets', 'repos']);
  const denied = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: '127.0.0.1', action: 'DELETE', reasoning: 'r' });
  t.strictSame(denied.json.limits, [], 'a denied call would be counted by no limit');
  t.equal((await call(agent.api_key)).status, 200, 'the checks consumed nothing');
  t.equal((await call(agent.api_key)).status, 200);
  t.equal((await call(agent.api_key)).status, 429);
});

t.test('invalid limits are 400 invalid_policy naming the limit and line', async (t) => {
  const agent = await createAgent(service.url, owner, 'invalid');
  const cases: [string, RegExp][] = [
    ['  - name: a\n    tool: "*"\n    rate: 5/fortnight\n', /limit 1 \(line 6\): 'rate' must be N\/second/],
    ['  - name: a\n    tool: "*"\n    rate: 0/minute\n', /'rate' must be/],
    ['  - name: a\n    tool: "*"\n    rate: 5/minute\n    burst: -1\n', /limit 1 \(line 7\): 'burst' must be a whole number/],
    ['  - name: a\n    tool: "*"\n    rate: 5/minute\n  - name: a\n    tool: "*"\n    rate: 1/second\n', /limit 2 \(line 7\): duplicate limit name 'a'/],
    ['  - tool: "*"\n    rate: 5/minute\n', /limit 1 \(line 4\): missing key 'name'/],
    ['  - name: a\n    rate: 5/minute\n', /missing key 'tool'/],
    ['  - name: a\n    tool: "*"\n', /missing key 'rate'/],
    ['  - name: a\n    tool: "*"\n    rate: 5/minute\n    rte: 1\n', /limit 1 \(line 7\): unknown key 'rte' \(did you mean 'rate'\?\)/],
    ['  - name: "caf\u00e9"\n    tool: "*"\n    rate: 5/minute\n', /printable ASCII/],
  ];
  for (const [limits, message] of cases) {
    const res = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: `version: "1"\nrules: []\nlimits:\n${limits}` });
    t.equal(res.status, 400, limits);
    t.equal(res.json.error, 'invalid_policy');
    t.match(res.json.message, message);
  }
  const kept = await api(service.url, owner, 'GET', `/agents/${agent.id}/policy`);
  t.equal(kept.json.rules_yaml, null, 'nothing was stored');
});

t.test('/metrics counts limited calls per limit name', async (t) => {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  t.match(text, /tcg_rate_limited_total\{limit="per-minute"\} 1\b/);
  t.match(text, /tcg_rate_limited_total\{limit="strict-posts"\} 1\b/);
  t.notMatch(text, /tcg_rate_limited_total\{[^}]*agent_id/, 'no per-agent series without METRICS_AGENT_LABEL');
  t.match(text, /tcg_rate_limit_counters \d+/);
  t.match(text, /tcg_rate_limit_store_reachable 1/);
});
