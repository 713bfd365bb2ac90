// The audit API: POST /audit, the filtered, paged list, and the PDF export, against
// the real service (embedded ClickHouse).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { promisify } from 'node:util';
import canonicalize from 'canonicalize';
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import t, { type Test } from 'tap';
import { auditRecord, insertRecords } from '../support/audit-records.js';
import { assertError, type Reply } from '../support/checks.js';
import { api, createAgent, signup, startTestService, type Session } from '../support/service.js';

const service = await startTestService();
const base = service.url;
t.teardown(() => service.close());

const owner = await signup(base);
const stranger = await signup(base);
const scout = await createAgent(base, owner, 'Scout Agent');
const ledger = await createAgent(base, owner, 'Ledger Agent');
const foreign = await createAgent(base, stranger, 'Foreign Agent');


const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const ENTRY_KEYS = [
  'action', 'agent_id', 'agent_name', 'approval_id', 'decision', 'entry_hash', 'id', 'latency_ms', 'mcp_method', 'mcp_session_id', 'mcp_tool', 'output', 'output_hash', 'output_truncated', 'reasoning',
  'request_bytes', 'request_id', 'response_bytes', 'rule_matched', 'shadow_decision', 'shadow_rule', 'source', 'status_code', 'task_id', 'timestamp', 'tool_name', 'tool_url',
];

interface Entry {
  id: string;
  timestamp: string;
  agent_id: string;
  tool_name: string;
  decision: string;
  task_id: string;
}

async function write(session: Session, body: Record<string, unknown>): Promise<Entry> {
  const res = await api(base, session, 'POST', '/audit', body);
  if (res.status !== 201) throw new Error(`POST /audit: ${res.status} ${res.text}`);
  return res.json as Entry;
}

async function list(session: Session, query = ''): Promise<{ rows: Entry[]; total: number; res: Reply }> {
  const res = await api(base, session, 'GET', `/audit${query}`);
  if (res.status !== 200) throw new Error(`GET /audit${query}: ${res.status} ${res.text}`);
  return { rows: res.json as Entry[], total: Number(res.headers.get('x-total-count')), res };
}

const ids = (rows: Entry[]) => rows.map((r) => r.id);

// Written in order, each durable before the next: timestamps increase.
const written: Entry[] = [];

t.test('POST /audit answers 201 with the stored entry, every contract field', async (t) => {
  const before = Date.now();
  const body = {
    agent_id: scout.id,
    tool_name: 'api.github.com',
    action: 'GET',
    tool_url: 'https://api.github.com/repos/a/b/issues?state=open',
    decision: 'allowed',
    reasoning: 'list the open issues',
    task_id: 'task-1',
    latency_ms: 120,
    status_code: 200,
  };
  const res = await api(base, owner, 'POST', '/audit', body);
  t.equal(res.status, 201);
  const e = res.json;
  t.same(Object.keys(e).sort(), ENTRY_KEYS);
  t.match(e.id, /^[0-9a-f-]{36}$/);
  t.match(e.timestamp, ISO_MS, 'ISO 8601 UTC with milliseconds');
  t.match(e.entry_hash, /^[0-9a-f]{64}$/, 'entry_hash: lowercase hex SHA-256');
  t.ok(Date.parse(e.timestamp) >= before - 1000 && Date.parse(e.timestamp) <= Date.now() + 1000, 'timestamp is now');
  t.same(
    { ...e, id: undefined, timestamp: undefined, request_id: undefined, entry_hash: undefined },
    {
      ...body,
      id: undefined,
      timestamp: undefined,
      request_id: undefined,
      entry_hash: undefined,
      agent_name: 'Scout Agent',
      rule_matched: '',
      source: 'api',
      request_bytes: 0,
      response_bytes: 0,
      output_hash: null,
      output: null,
      output_truncated: false,
      mcp_session_id: null,
      mcp_method: null,
      mcp_tool: null,
      shadow_rule: null,
      shadow_decision: null,
      approval_id: null,
    },
  );
  written.push(e);

  const listed = await list(owner);
  t.same(listed.rows[0], e, 'listable at once (durable when 201 returns), exactly as answered');
});

t.test('POST /audit: only agent_id, tool_name, action and decision are required', async (t) => {
  const res = await api(base, owner, 'POST', '/audit', { agent_id: ledger.id, tool_name: 'billing', action: 'POST', decision: 'denied' });
  t.equal(res.status, 201);
  t.equal(res.json.tool_url, '');
  t.equal(res.json.reasoning, '');
  t.equal(res.json.task_id, '');
  t.equal(res.json.latency_ms, 0);
  t.equal(res.json.status_code, 0);
  t.equal(res.json.agent_name, 'Ledger Agent');
  written.push(res.json);
  written.push(await write(owner, { agent_id: scout.id, tool_name: 'api.github.com', action: 'DELETE', decision: 'denied', task_id: 'task-2', latency_ms: 5, status_code: 403 }));
  written.push(await write(owner, { agent_id: ledger.id, tool_name: 'billing', action: 'GET', decision: 'allowed', task_id: 'task-2', latency_ms: 40, status_code: 200 }));
});

t.test('POST /audit validation', async (t) => {
  const ok = { agent_id: scout.id, tool_name: 't', action: 'GET', decision: 'allowed' };
  for (const field of ['agent_id', 'tool_name', 'action', 'decision'] as const) {
    const { [field]: _dropped, ...rest } = ok;
    assertError(t, await api(base, owner, 'POST', '/audit', rest), 400, 'invalid_request', field);
  }
  for (const decision of ['allow', 'deny', 'ALLOWED', '', 1]) {
    assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, decision }), 400, 'invalid_request', 'decision');
  }
  for (const latency_ms of [-1, 1.5, '5', true]) {
    assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, latency_ms }), 400, 'invalid_request', 'latency_ms');
  }
  for (const status_code of [-1, 200.5, '200']) {
    assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, status_code }), 400, 'invalid_request', 'status_code');
  }
  for (const field of ['tool_url', 'reasoning', 'task_id']) {
    assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, [field]: 5 }), 400, 'invalid_request', field);
  }
  assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, tool_name: '' }), 400, 'invalid_request', 'tool_name');
  assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, agent_id: foreign.id }), 404, 'not_found');
  assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, agent_id: crypto.randomUUID() }), 404, 'not_found');
  assertError(t, await api(base, owner, 'POST', '/audit', { ...ok, agent_id: 'nope' }), 404, 'not_found');
  const after = await list(owner);
  t.equal(after.total, written.length, 'no refused write was stored');
});

t.test('GET /audit lists newest first with X-Total-Count', async (t) => {
  const { rows, total, res } = await list(owner);
  t.match(res.headers.get('content-type') ?? '', /^application\/json/);
  t.equal(total, 4);
  t.same(ids(rows), ids(written).reverse(), 'newest first');
  for (const r of rows) t.same(Object.keys(r).sort(), ENTRY_KEYS);
  for (let i = 1; i < rows.length; i++) t.ok(rows[i - 1]!.timestamp >= rows[i]!.timestamp, 'timestamps descend');
});

t.test('GET /audit filters', async (t) => {
  const [first, second, third, fourth] = written as [Entry, Entry, Entry, Entry];
  const cases: Array<[string, Entry[]]> = [
    [`?agent_id=${scout.id}`, [third, first]],
    [`?agent_id=${ledger.id.toUpperCase()}`, [fourth, second]],
    ['?decision=allowed', [fourth, first]],
    ['?decision=denied', [third, second]],
    ['?tool_name=billing', [fourth, second]],
    ['?tool_name=api.github.com&decision=denied', [third]],
    ['?task_id=task-2', [fourth, third]],
    ['?task_id=task-1', [first]],
    ['?task_id=nope', []],
    [`?since=${encodeURIComponent(second.timestamp)}`, [fourth, third, second]],
    [`?until=${encodeURIComponent(third.timestamp)}`, [second, first]],
    [`?since=${encodeURIComponent(second.timestamp)}&until=${encodeURIComponent(fourth.timestamp)}`, [third, second]],
    // Finer than a millisecond: rounded up, so `until` just after an entry takes it and `since` just after leaves it out.
    [`?until=${encodeURIComponent(third.timestamp.replace('Z', '0009Z'))}`, [third, second, first]],
    [`?since=${encodeURIComponent(third.timestamp.replace('Z', '0009Z'))}`, [fourth]],
    [`?since=${new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)}`, []],
    ['?since=2000-01-01', [fourth, third, second, first]],
    [`?agent_id=${crypto.randomUUID()}`, []],
  ];
  for (const [query, expected] of cases) {
    const { rows, total } = await list(owner, query);
    t.same(ids(rows), ids(expected), query);
    t.equal(total, expected.length, `${query}: X-Total-Count`);
  }
});

t.test('GET /audit: a bad query value is 400 naming the parameter', async (t) => {
  const cases: Array<[string, string]> = [
    ['?limit=0', 'limit'],
    ['?limit=1001', 'limit'],
    ['?limit=abc', 'limit'],
    ['?limit=-1', 'limit'],
    ['?limit=1.5', 'limit'],
    ['?limit=', 'limit'],
    ['?offset=-1', 'offset'],
    ['?offset=1000001', 'offset'],
    ['?offset=x', 'offset'],
    ['?decision=allow', 'decision'],
    ['?decision=', 'decision'],
    ['?agent_id=not-a-uuid', 'agent_id'],
    ['?approval_id=not-a-uuid', 'approval_id'],
    ['?since=yesterday', 'since'],
    ['?since=2024-13-45', 'since'],
    ['?since=2026-02-30', 'since'],
    ['?until=2026-06-31T10:00:00Z', 'until'],
    ['?since=2026-02-29', 'since'],
    ['?until=12345', 'until'],
    // A zone offset that carries the instant out of years 0000-9999 (the stores' form): was a 500.
    ['?until=9999-12-31T23:59:59-01:00', 'until'],
    ['?since=0000-01-01T00:00:00%2B00:01', 'since'],
  ];
  for (const [query, field] of cases) {
    const res = await api(base, owner, 'GET', `/audit${query}`);
    t.test(query, async (t) => assertError(t, res, 400, 'invalid_request', field));
  }
  for (const path of ['/audit/seals', '/audit/verify', '/audit/stream']) {
    const res = await api(base, owner, 'GET', `${path}?until=9999-12-31T23:59:59-01:00`);
    t.test(`${path}: an until past year 9999`, async (t) => assertError(t, res, 400, 'invalid_request', 'until'));
  }
  t.equal((await api(base, owner, 'GET', '/audit?offset=1000000')).status, 200, 'offset 1,000,000 is allowed');
});

t.test('GET /audit paging: limit default 50, at most 1000, offset pages', async (t) => {
  const bulk = await signup(base);
  const agent = await createAgent(base, bulk, 'Bulk Agent');
  const N = 55;
  // Concurrent writes land in the same batches; many share a millisecond, so the
  // order among them is the tie-break (id), which paging must keep stable.
  await Promise.all(Array.from({ length: N }, (_, i) => write(bulk, { agent_id: agent.id, tool_name: `tool-${i}`, action: 'GET', decision: 'allowed' })));
  const byDefault = await list(bulk);
  t.equal(byDefault.rows.length, 50, 'default limit 50');
  t.equal(byDefault.total, N, 'X-Total-Count counts all matches, not the page');
  const all = await list(bulk, '?limit=1000');
  t.equal(all.rows.length, N);
  t.equal(new Set(ids(all.rows)).size, N, 'distinct entries');
  t.same(ids(byDefault.rows), ids(all.rows).slice(0, 50), 'the default page is the newest 50');
  const pages: Entry[] = [];
  for (let offset = 0; offset < N; offset += 20) {
    const page = await list(bulk, `?limit=20&offset=${offset}`);
    t.equal(page.rows.length, Math.min(20, N - offset), `page at ${offset}`);
    t.equal(page.total, N);
    pages.push(...page.rows);
  }
  t.same(ids(pages), ids(all.rows), 'pages concatenate to the whole list, no gaps or repeats');
  const past = await list(bulk, `?offset=${N}`);
  t.same(past.rows, [], 'past the end is empty');
  t.equal(past.total, N);
  const one = await list(bulk, '?limit=1&offset=54');
  t.same(ids(one.rows), [all.rows[54]!.id], 'the oldest entry last');
});

t.test('GET /audit: a page of large entries is read and written in slices, the same page as pages of 50 give, the event loop free between them', async (t) => {
  const big = await signup(base);
  const orgId = (await service.store.findUserByEmail(big.email))!.orgId;
  const agent = await createAgent(base, big, 'Big Agent', 'full');
  // Entries at their bounds: 64 KiB of output and of reasoning, an 8 KiB URL, an 8 KiB MCP tool name (~150 KB each).
  const N = 400;
  const started = Date.now() - 60_000;
  await insertRecords(service.auditStore, N, 100, `big-page-${agent.id}`, (i) => auditRecord(orgId, {
    agentId: agent.id, agentName: 'Big Agent', toolName: 'api.example.com', action: 'POST', timestamp: new Date(started + i).toISOString(),
    toolUrl: `https://api.example.com/${'p'.repeat(8_000)}`, reasoning: `r${i}${'y'.repeat(65_530)}`, output: `o${i}${'x'.repeat(65_530)}`, outputTruncated: true,
    mcpMethod: 'tools/call', mcpTool: `t${i}_${'a'.repeat(8_000)}`,
  }));
  const slices: number[] = [];
  const total = await service.auditStore.listInSlices(orgId, { agentId: agent.id }, N, 0, (rows) => slices.push(rows.length));
  t.equal(total, N);
  t.ok(slices.length >= 10 && Math.max(...slices) <= 30, `the store reads ${N} entries of ~150 KB in ${slices.length} slices of ${Math.min(...slices)}–${Math.max(...slices)}`);

  // Fetched by another process, so that the event loop measured is the service's alone.
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const fetched = await fetchElsewhere(`${base}/audit?agent_id=${agent.id}&limit=${N}`, big.auth.authorization!);
  delay.disable();
  t.match(fetched, { status: 200, count: N });
  t.ok(fetched.bytes > 55e6, `${(fetched.bytes / 1e6).toFixed(0)} MB`);
  const longest = delay.max / 1e6;
  // Read and written whole it held the loop 1.0–1.4 s for 1,000 such entries (~0.5 s for 400).
  t.ok(longest < 300, `the event loop waited at most ${longest.toFixed(0)} ms while it was answered`);

  // The same page as pages of 50 (sliced otherwise) give.
  const whole = await list(big, `?agent_id=${agent.id}&limit=${N}`);
  const pages: Entry[] = [];
  for (let offset = 0; offset < N; offset += 50) pages.push(...(await list(big, `?agent_id=${agent.id}&limit=50&offset=${offset}`)).rows);
  t.equal(whole.total, N);
  t.same(ids(whole.rows), ids(pages), 'in the same order');
  t.ok(whole.rows.every((row, i) => JSON.stringify(row) === JSON.stringify(pages[i])), 'entry for entry');
  const newest = (whole.rows[0] as Entry & { output: string }).output;
  t.ok(newest.startsWith(`o${N - 1}x`) && newest.length === 65_534, 'newest first, whole');
});

t.test('GET /audit: an entry stored twice is listed twice, whichever slices its copies fall in, and the rest of the page stays', async (t) => {
  const twice = await signup(base);
  const orgId = (await service.store.findUserByEmail(twice.email))!.orgId;
  const agent = await createAgent(base, twice, 'Twice Agent');
  // Copies of ~3 MB (an MCP name recorded before its bound): a slice holds one, so the page [copy, copy, older] is read as [copy], [copy, older].
  const copy = service.auditStore.encode(auditRecord(orgId, { agentId: agent.id, agentName: 'Twice Agent', timestamp: new Date(Date.now() - 1_000).toISOString(), mcpMethod: 'tools/call', mcpTool: 'x'.repeat(3_000_000) }));
  const older = auditRecord(orgId, { agentId: agent.id, agentName: 'Twice Agent', timestamp: new Date(Date.now() - 2_000).toISOString() });
  await service.auditStore.insertEncoded(copy, `twice-1-${agent.id}`);
  await service.auditStore.insertEncoded(copy, `twice-2-${agent.id}`); // another insert token: stored again
  await service.auditStore.insertEncoded(service.auditStore.encode(older), `twice-3-${agent.id}`);
  const page = await list(twice, `?agent_id=${agent.id}`);
  t.equal(page.total, 3);
  const [first, second, third] = page.rows;
  t.ok(first!.id === second!.id && first!.id !== older.id, 'both copies');
  t.equal(third?.id, older.id, 'and the older entry after them (a slice that found both copies kept it)');
});

/** GET `url` from a child process: its status, bytes and how many entries its JSON array holds. */
async function fetchElsewhere(url: string, authorization: string): Promise<{ status: number; bytes: number; count: number }> {
  const script = 'const r = await fetch(process.argv[1], { headers: { authorization: process.argv[2] } }); const b = Buffer.from(await r.arrayBuffer()); ' +
    'process.stdout.write(JSON.stringify({ status: r.status, bytes: b.length, count: r.status === 200 ? JSON.parse(b.toString()).length : -1 }));';
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, url, authorization], { maxBuffer: 1024 * 1024 });
  return JSON.parse(stdout) as { status: number; bytes: number; count: number };
}

t.test('organization isolation', async (t) => {
  const theirs = await list(stranger);
  t.same(theirs.rows, [], "another org's list is empty");
  t.equal(theirs.total, 0);
  const byMyAgent = await list(stranger, `?agent_id=${scout.id}`);
  t.same(byMyAgent.rows, [], "filtering by another org's agent id finds nothing");
  t.equal(byMyAgent.total, 0);
  const mine = await write(stranger, { agent_id: foreign.id, tool_name: 'x', action: 'GET', decision: 'allowed' });
  t.same(ids((await list(stranger)).rows), [mine.id], 'each org sees its own entries');
  t.notOk(ids((await list(owner, '?limit=1000')).rows).includes(mine.id), 'and not the other org\'s');
});

t.test('GET /audit/summary: the window counted by the store, in all and per agent with its p95, most calls first', async (t) => {
  const since = new Date(Date.now() - 1000).toISOString();
  const summing = await signup(base); // an org of its own: the other tests' entries are not in its counts
  const summed = await createAgent(base, summing, 'Summed Agent');
  for (let i = 1; i <= 20; i++) {
    const res = await api(base, summing, 'POST', '/audit', { agent_id: summed.id, tool_name: 'sums', action: 'GET', decision: i % 4 === 0 ? 'denied' : 'allowed', latency_ms: i });
    t.equal(res.status, 201);
  }
  const other = await api(base, stranger, 'POST', '/audit', { agent_id: foreign.id, tool_name: 'sums', action: 'GET', decision: 'denied', latency_ms: 5 });
  t.equal(other.status, 201);
  const res = await api(base, summing, 'GET', `/audit/summary?since=${since}`);
  t.equal(res.status, 200, res.text.slice(0, 200));
  t.match(res.json, { since, until: ISO_MS, calls: 20, denied: 5, agents_total: 1 }, 'the 20 calls of the window, the other org\'s not');
  t.strictSame(res.json.agents, [{ agent_id: summed.id, agent_name: 'Summed Agent', calls: 20, denied: 5, p95_latency_ms: 20 }], 'per agent: p95 of 1..20 is 20 (quantileExact)');
  const theirs = await api(base, stranger, 'GET', `/audit/summary?since=${since}`);
  t.ok(theirs.json.agents.some((a: { agent_id: string; p95_latency_ms: number }) => a.agent_id === foreign.id) && !theirs.json.agents.some((a: { agent_id: string }) => a.agent_id === summed.id), 'the other org sees its own agents only');
  const day = await api(base, summing, 'GET', '/audit/summary');
  t.ok(day.json.calls >= 20 && Date.parse(day.json.until) - Date.parse(day.json.since) === 86_400_000, 'by default the last 24 hours');
  assertError(t, await api(base, owner, 'GET', `/audit/summary?since=${since}&until=${since}`), 400, 'invalid_request', 'since');
  assertError(t, await api(base, owner, 'GET', '/audit/summary?until=yesterday'), 400, 'invalid_request', 'until');
  assertError(t, await api(base, null, 'GET', '/audit/summary'), 401, 'unauthorized');
});

t.test('GET /audit/export/pdf', async (t) => {
  const res = await fetch(`${base}/audit/export/pdf`, { headers: owner.auth });
  t.equal(res.status, 200);
  t.equal(res.headers.get('content-type'), 'application/pdf');
  const day = new Date().toISOString().slice(0, 10);
  const disposition = res.headers.get('content-disposition') ?? '';
  t.match(disposition, /^attachment; filename="audit-\d{4}-\d{2}-\d{2}\.pdf"$/);
  t.ok(disposition.includes(`audit-${day}.pdf`) || disposition.includes(`audit-${new Date(Date.now() - 60_000).toISOString().slice(0, 10)}.pdf`), 'named for today (UTC)');
  const bytes = Buffer.from(await res.arrayBuffer());
  t.equal(bytes.subarray(0, 5).toString('latin1'), '%PDF-', 'a PDF file');
  const pdf = await pdfParse(bytes);
  t.ok(pdf.numpages >= 1, `${pdf.numpages} page(s)`);
  const text = pdf.text.replace(/\s+/g, ' ');
  t.match(text, 'Scout Agent', 'names the first agent');
  t.match(text, 'Ledger Agent', 'names the second agent');
  t.match(text, /\b7 days\b/, 'the window is 7 days by default');
  t.notMatch(text, 'Foreign Agent', "not the other org's agent");

  const month = await fetch(`${base}/audit/export/pdf?days=30`, { headers: owner.auth });
  t.equal(month.status, 200);
  t.match((await pdfParse(Buffer.from(await month.arrayBuffer()))).text.replace(/\s+/g, ' '), /\b30 days\b/, 'days=30 is a 30-day window');
  for (const days of ['1', '365']) {
    t.equal((await fetch(`${base}/audit/export/pdf?days=${days}`, { headers: owner.auth })).status, 200, `days=${days} is allowed`);
  }

  // Asked at once: built one at a time, each its own org's.
  const [ours, theirs, again] = await Promise.all([owner, stranger, owner].map((who) => fetch(`${base}/audit/export/pdf`, { headers: who.auth })));
  t.same([ours!.status, theirs!.status, again!.status], [200, 200, 200], 'three asked at once: each answered');
  const texts = await Promise.all([ours!, theirs!, again!].map(async (r) => (await pdfParse(Buffer.from(await r.arrayBuffer()))).text));
  t.ok(texts[0]!.includes('Scout Agent') && !texts[1]!.includes('Scout Agent') && texts[1]!.includes('Foreign Agent') && texts[2]!.includes('Scout Agent'), 'each with its own org');

  const other = await fetch(`${base}/audit/export/pdf`, { headers: stranger.auth });
  t.equal(other.status, 200);
  const otherText = (await pdfParse(Buffer.from(await other.arrayBuffer()))).text;
  t.match(otherText, 'Foreign Agent', "the other org's PDF has its own agent");
  t.notMatch(otherText, 'Scout Agent', 'and none of ours');
  t.notMatch(otherText, 'Ledger Agent');

  for (const days of ['0', '366', 'abc', '-1', '1.5', '']) {
    const bad = await api(base, owner, 'GET', `/audit/export/pdf?days=${days}`);
    t.test(`days=${days}`, async (t) => assertError(t, bad, 400, 'invalid_request', 'days'));
  }
});

t.test('entry_hash: the answer of POST /audit and the listed entry carry one hash, that of the entry as returned (RFC 8785), lone surrogates included', async (t) => {
  const res = await api(base, owner, 'POST', '/audit', { agent_id: scout.id, tool_name: 'bad\ud800tool', action: 'GET', decision: 'allowed', reasoning: 'x\udc00y' });
  t.equal(res.status, 201);
  t.equal(res.json.tool_name, 'bad\ufffdtool', 'a lone surrogate is answered as the store keeps it');
  const { entry_hash: hashed, ...rest } = res.json;
  t.equal(hashed, createHash('sha256').update(canonicalize(rest)!).digest('hex'), 'the answer verifies with a general RFC 8785 implementation');
  const listed = ((await api(base, owner, 'GET', `/audit?agent_id=${scout.id}&limit=1000`)).json as { id: string; entry_hash: string }[]).find((e) => e.id === res.json.id);
  t.equal(listed?.entry_hash, hashed, 'GET returns the same hash');
});
