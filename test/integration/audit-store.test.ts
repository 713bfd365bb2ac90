// The behaviour every AuditStore owes its callers, run against embedded chDB and,
// when CLICKHOUSE_URL is set, against a ClickHouse server.
//
// The stores share one table across runs on a server, so every test writes to an
// org of its own (a fresh UUID) and looks only at that org.
import { createHash, generateKeyPairSync, randomUUID } from 'node:crypto';
import canonicalize from 'canonicalize';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { auditRecord as record } from '../support/audit-records.js';
import { startSilentServer } from '../support/raw-socket.js';
import { quantileExact } from '../support/quantile.js';
import { spawnClickHouseHttpServer } from '../support/clickhouse-http-server.js';
import { createClient } from '@clickhouse/client';
import { loadConfig } from '../../shared/config.js';
import { isStoreUnavailable, StoreUnavailableError } from '../../shared/errors.js';
import type { AuditStore, VerifyGroup } from '../../shared/stores/audit-store.js';
import { merkleRoot, merkleRootOfLeaves, Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { AUDIT_COLUMNS, AUDIT_TABLE, REPORT_COLUMNS, REPORT_TEXT_CHARS } from '../../shared/audit/audit-codec.js';
import { auditJson, entryHash } from '../../shared/audit/entry-json.js';
import { openAuditStoreWhenReachable } from '../../shared/stores/open-stores.js';
import { ClickHouseAuditStore, REPORT_RECENT_DENIED } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import type { AuditFilter, AuditRecord } from '../../shared/types.js';

/** A tap test, the root one or a subtest. */
type TapTest = Parameters<Parameters<typeof t.test>[0]>[0];

const DAY_MS = 86_400_000;
const RETENTION_DAYS = 30;

/** Midnight UTC, `daysAgo` days before today. */
function dayStart(daysAgo: number): number {
  const now = new Date();
  return Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()) - daysAgo * DAY_MS;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}


/** ClickHouse compares UUIDs by their second half first (measured on chDB 26.7:
 *  2,000 random ids sorted this way match ORDER BY id exactly). */
function uuidOrderKey(id: string): string {
  const hex = id.replaceAll('-', '');
  return hex.slice(16) + hex.slice(0, 16);
}

/** The order the store promises: newest first, ties by id descending in ClickHouse's UUID order. */
function newestFirst(rows: readonly AuditRecord[]): AuditRecord[] {
  return [...rows].sort((a, b) => {
    if (a.timestamp !== b.timestamp) return a.timestamp < b.timestamp ? 1 : -1;
    const ka = uuidOrderKey(a.id);
    const kb = uuidOrderKey(b.id);
    return ka < kb ? 1 : ka > kb ? -1 : 0;
  });
}

function ids(rows: readonly AuditRecord[]): string[] {
  return rows.map((r) => r.id);
}

export function auditStoreContract(t: TapTest, openStore: () => Promise<AuditStore>): void {
  let store: AuditStore;
  t.before(async () => {
    store = await openStore();
  });
  t.teardown(async () => {
    await store.close();
    await store.close();
  });

  t.test('ping answers on an open store', async (t) => {
    await t.resolves(store.ping());
  });

  t.test('a record reads back field for field, null output apart from empty output', async (t) => {
    const org = randomUUID();
    const base = Date.now() - 10_000;
    const hashed = record(org, {
      timestamp: iso(base),
      agentName: 'récolte-bot',
      toolName: 'api.github.com',
      action: 'POST',
      toolUrl: 'https://api.github.com/repos/o/r/issues?state=open&q=a%20b',
      decision: 'denied',
      reasoning: 'Ünïcödé reasoning — 日本語 🚀 with "quotes", \\backslash\\ and\nnewline',
      taskId: 'task-42',
      latencyMs: 4_294_967_295,
      statusCode: 403,
      ruleMatched: 'no-issue-spam',
      source: 'api',
      requestBytes: 5_000_000_000,
      responseBytes: 9_007_199_254_740_991,
      outputHash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
      output: null,
      outputTruncated: false,
    });
    const emptyOutput = record(org, { timestamp: iso(base + 1), output: '', outputHash: null, statusCode: 204 });
    const fullOutput = record(org, {
      timestamp: iso(base + 2),
      output: '{"ok":true,"text":"ß∂ƒ"}',
      outputTruncated: true,
      statusCode: 499,
      latencyMs: 0,
    });
    await store.insert([hashed, emptyOutput, fullOutput]);
    const page = await store.list(org, {}, 10, 0);
    t.strictSame(page, { rows: [fullOutput, emptyOutput, hashed].map((r) => ({ ...r, entryHash: entryHash(r), batchId: null })), total: 3 }, 'with the entry_hash written with each');
    t.equal(page.rows[2]?.output, null, 'output never stored reads back as null');
    t.equal(page.rows[1]?.output, '', 'an empty stored output reads back as the empty string');
    t.equal(page.rows[1]?.outputHash, null, 'no hash reads back as null');
    t.equal(page.rows[2]?.requestBytes, 5_000_000_000, 'UInt64 byte counts come back as exact numbers');
    t.match(page.rows[0]?.timestamp, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, 'ISO 8601 UTC with milliseconds');
  });

  t.test('entry_hash is written with the row and is the hash of the entry as it reads back (RFC 8785, computed independently)', async (t) => {
    const org = randomUUID();
    const base = Date.now() - 20_000;
    const odd = [
      record(org, { timestamp: iso(base), reasoning: 'lone \uD800 surrogate, NUL \u0000, tab \t, CR \r, emoji 🚀, U+2028 \u2028', mcpSessionId: '' }),
      record(org, { timestamp: new Date(base + 1).toISOString().replace('Z', '+00:00'), output: 'line\nnext\\ "q"', outputTruncated: true, shadowRule: 'r', shadowDecision: 'approve', approvalId: randomUUID() }),
      record(org, { timestamp: iso(base + 2), requestBytes: Number.MAX_SAFE_INTEGER, taskId: '\u00e9\u0301 combining', mcpMethod: 'tools/call', mcpTool: 'x' }),
    ];
    await store.insert(odd);
    const rows = (await store.list(org, {}, 10, 0)).rows;
    t.equal(rows.length, 3);
    for (const row of rows) {
      const entry = auditJson(row);
      t.match(entry.entry_hash, /^[0-9a-f]{64}$/, 'stored');
      const { entry_hash: stored, ...rest } = entry;
      t.equal(stored, createHash('sha256').update(canonicalize(rest)!).digest('hex'), `${row.id}: the stored hash is that of the entry as GET /audit returns it`);
    }
  });

  t.test('a timestamp with an offset is stored as the same instant in UTC', async (t) => {
    const org = randomUUID();
    const day = new Date(dayStart(1)).toISOString().slice(0, 10);
    await store.insert([record(org, { timestamp: `${day}T14:30:15.250+02:00` })]);
    const page = await store.list(org, {}, 1, 0);
    t.equal(page.rows[0]?.timestamp, `${day}T12:30:15.250Z`);
  });

  t.test('an empty batch is a no-op', async (t) => {
    const org = randomUUID();
    await store.insert([]);
    await store.insert([], 'token-for-nothing');
    t.equal(await store.count(org), 0);
  });

  t.test('list is newest first, ties broken by id so pages are stable', async (t) => {
    const org = randomUUID();
    const base = dayStart(2);
    const offsets = [5_000, 1, 86_399_999, 0, 3_600_000, 3_600_000, 3_600_000];
    const rows = offsets.map((ms) => record(org, { timestamp: iso(base + ms) }));
    await store.insert(rows);
    const page = await store.list(org, {}, 100, 0);
    t.strictSame(ids(page.rows), ids(newestFirst(rows)));
    t.equal(page.rows[0]?.timestamp, iso(base + 86_399_999));
    t.equal(page.rows.at(-1)?.timestamp, iso(base));
  });

  t.test('each filter alone and combined selects exactly the matching rows', async (t) => {
    const org = randomUUID();
    const agents = [randomUUID(), randomUUID(), randomUUID()];
    const tools = ['api.github.com', 'api.slack.com', 'example.com'];
    const base = dayStart(3);
    const rows: AuditRecord[] = [];
    for (let i = 0; i < 36; i++) {
      rows.push(record(org, {
        timestamp: iso(base + i * 3_600_000),
        agentId: agents[i % 3]!,
        toolName: tools[Math.floor(i / 3) % 3]!,
        decision: i % 4 === 0 ? 'denied' : 'allowed',
        taskId: i % 2 === 0 ? 'task-even' : i % 5 === 0 ? 'task-five' : '',
      }));
    }
    await store.insert(rows);
    const cases: [string, AuditFilter, (r: AuditRecord) => boolean][] = [
      ['agentId', { agentId: agents[1] }, (r) => r.agentId === agents[1]],
      ['decision denied', { decision: 'denied' }, (r) => r.decision === 'denied'],
      ['decision allowed', { decision: 'allowed' }, (r) => r.decision === 'allowed'],
      ['toolName', { toolName: 'api.slack.com' }, (r) => r.toolName === 'api.slack.com'],
      ['taskId', { taskId: 'task-five' }, (r) => r.taskId === 'task-five'],
      ['since', { since: iso(base + 30 * 3_600_000) }, (r) => r.timestamp >= iso(base + 30 * 3_600_000)],
      ['until', { until: iso(base + 5 * 3_600_000) }, (r) => r.timestamp < iso(base + 5 * 3_600_000)],
      ['agentId + decision', { agentId: agents[0], decision: 'denied' }, (r) => r.agentId === agents[0] && r.decision === 'denied'],
      ['toolName + taskId', { toolName: 'api.github.com', taskId: 'task-even' }, (r) => r.toolName === 'api.github.com' && r.taskId === 'task-even'],
      [
        'all six',
        { agentId: agents[0], decision: 'allowed', toolName: 'example.com', taskId: 'task-even', since: iso(base + 6 * 3_600_000), until: iso(base + 34 * 3_600_000) },
        (r) => r.agentId === agents[0] && r.decision === 'allowed' && r.toolName === 'example.com' && r.taskId === 'task-even' &&
          r.timestamp >= iso(base + 6 * 3_600_000) && r.timestamp < iso(base + 34 * 3_600_000),
      ],
      ['no match', { toolName: 'unknown.example' }, () => false],
      ['unknown agent', { agentId: randomUUID() }, () => false],
      ['agentId that is not a UUID', { agentId: "x' OR 1=1 --" }, () => false],
      ['tool name with quotes is data, not SQL', { toolName: "api.github.com' OR '1'='1" }, () => false],
    ];
    for (const [name, filter, keep] of cases) {
      const expected = newestFirst(rows.filter(keep));
      const page = await store.list(org, filter, 1000, 0);
      t.strictSame(ids(page.rows), ids(expected), `${name}: rows`);
      t.equal(page.total, expected.length, `${name}: total`);
    }
    t.ok(rows.filter((r) => r.agentId === agents[0] && r.decision === 'allowed' && r.toolName === 'example.com' && r.taskId === 'task-even').length > 0,
      'the combined case is not vacuous');
  });

  t.test('since is inclusive and until is exclusive', async (t) => {
    const org = randomUUID();
    const at = dayStart(1) + 12 * 3_600_000;
    const rows = [-1, 0, 1].map((d) => record(org, { timestamp: iso(at + d) }));
    await store.insert(rows);
    t.strictSame(ids((await store.list(org, { since: iso(at) }, 10, 0)).rows), [rows[2]!.id, rows[1]!.id]);
    t.strictSame(ids((await store.list(org, { until: iso(at) }, 10, 0)).rows), [rows[0]!.id]);
    t.strictSame(ids((await store.list(org, { since: iso(at), until: iso(at + 1) }, 10, 0)).rows), [rows[1]!.id]);
    t.equal((await store.list(org, { since: iso(at + 5), until: iso(at - 5) }, 10, 0)).total, 0, 'an inverted window is empty');
  });

  t.test('limit and offset page through the match and total counts all of it', async (t) => {
    const org = randomUUID();
    const base = dayStart(4);
    const rows = Array.from({ length: 25 }, (_, i) => record(org, { timestamp: iso(base + i * 1000), decision: i % 2 ? 'allowed' : 'denied' }));
    await store.insert(rows);
    const ordered = ids(newestFirst(rows));
    for (const offset of [0, 10, 20]) {
      const page = await store.list(org, {}, 10, offset);
      t.strictSame(ids(page.rows), ordered.slice(offset, offset + 10), `page at ${offset}`);
      t.equal(page.total, 25, `total at ${offset}`);
    }
    const past = await store.list(org, {}, 10, 1000);
    t.strictSame(past, { rows: [], total: 25 }, 'an offset past the end still reports the total');
    const denied = await store.list(org, { decision: 'denied' }, 5, 5);
    t.strictSame(ids(denied.rows), ids(newestFirst(rows.filter((r) => r.decision === 'denied'))).slice(5, 10));
    t.equal(denied.total, 13, 'total follows the filter');
    t.strictSame((await store.list(org, {}, 0, 0)).rows, [], 'limit 0 returns no rows');
  });

  t.test('one org never sees another org\'s rows', async (t) => {
    const orgA = randomUUID();
    const orgB = randomUUID();
    const agent = randomUUID();
    await store.insert([record(orgA, { agentId: agent }), record(orgA, { agentId: agent, decision: 'denied' })]);
    t.equal((await store.list(orgA, {}, 10, 0)).total, 2);
    t.strictSame(await store.list(orgB, {}, 10, 0), { rows: [], total: 0 });
    t.strictSame(await store.list(orgB, { agentId: agent }, 10, 0), { rows: [], total: 0 }, 'even with the other org\'s agent id');
    t.equal(await store.count(orgB), 0);
    t.equal(await store.count(orgA), 2);
    const report = await store.report(orgB, new Date(dayStart(1)), new Date(Date.now() + DAY_MS), 100, 10);
    t.equal(report.totals.calls, 0);
    t.strictSame(report.entries, []);
    t.strictSame(await store.list('not-a-uuid', {}, 10, 0), { rows: [], total: 0 }, 'an org id that is not a UUID matches nothing');
  });

  t.test('a batch inserted twice with one dedup token is stored once', async (t) => {
    const org = randomUUID();
    const batch = Array.from({ length: 3 }, () => record(org));
    const token = `batch-${randomUUID()}`;
    await store.insert(batch, token);
    await store.insert(batch, token);
    t.equal(await store.count(org), 3, 'the retry was dropped');
    t.strictSame(ids((await store.list(org, {}, 10, 0)).rows), ids(newestFirst(batch)));
  });

  t.test('seal lines after the rows go to the seals table, once per token; verifyGroups sums each batch', async (t) => {
    const org = randomUUID();
    const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
    const batch = randomUUID();
    const rows = Array.from({ length: 5 }, (_, i) => record(org, { timestamp: iso(dayStart(1) + (5 - i) * 1000) }));
    const lines = rows.map((r) => store.encode(r, batch));
    const body = lines.join('') + sealer.sealLines(lines).lines.join('');
    const token = `sealed-${randomUUID()}`;
    await store.insertEncoded(body, token);
    await store.insertEncoded(body, token);
    t.equal(await store.count(org), 5, 'the rows once');
    const seals = await store.listSeals(org);
    t.match(seals, [{ orgId: org, batchId: batch, seq: 1, count: 5, firstAt: iso(dayStart(1) + 1000), lastAt: iso(dayStart(1) + 5000) }], 'the seal once, read back');
    t.strictSame(await store.listSeals(org, { since: new Date(dayStart(0)), until: new Date(dayStart(-1)) }), [], 'a window it does not meet');
    const groups: VerifyGroup[] = [];
    const now = new Date();
    await store.verifyGroups(org, { from: new Date(0), to: now, since: new Date(0), until: now, legacyFrom: new Date(0), legacyBefore: new Date(0), graceFrom: now, graceUntil: now }, (page) => groups.push(...page));
    t.match(groups, [{ batchId: batch, count: 5, inWindow: 5, mismatched: [], legacyInWindow: 0, lateUnhashed: null, oldInWindow: { id: rows[4]!.id } }]);
    const ordered = [...rows].sort((a, b) => (a.timestamp < b.timestamp ? -1 : 1));
    t.equal(merkleRootOfLeaves(groups[0]!.leaves), merkleRoot(ordered.map(entryHash)), 'the leaves, in (timestamp, id) order, give the root');
    t.equal(merkleRootOfLeaves(groups[0]!.leaves), seals[0]!.root);
  });

  t.test('the same rows under two different tokens are stored twice', async (t) => {
    const org = randomUUID();
    const batch = Array.from({ length: 3 }, () => record(org));
    await store.insert(batch, `a-${randomUUID()}`);
    await store.insert(batch, `b-${randomUUID()}`);
    t.equal(await store.count(org), 6);
  });

  t.test('an insert without a token after one with a token is kept', async (t) => {
    // chDB applies settings with SET on a long-lived session: a missing token would
    // inherit the previous one and silently drop the batch.
    const org = randomUUID();
    const token = `t-${randomUUID()}`;
    await store.insert([record(org)], token);
    await store.insert([record(org)]);
    await store.insert([record(org)]);
    t.equal(await store.count(org), 3);
  });

  t.test('concurrent inserts with distinct tokens all land', async (t) => {
    const org = randomUUID();
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.insert([record(org), record(org)], `c-${i}-${randomUUID()}`)));
    t.equal(await store.count(org), 40);
  });

  t.test('report aggregates a known window', async (t) => {
    const org = randomUUID();
    const alpha = randomUUID();
    const beta = randomUUID();
    const rows: AuditRecord[] = [];
    const d2 = dayStart(2);
    const d1 = dayStart(1);
    const d0 = dayStart(0);
    // Day -2: alpha, 60 GitHub calls, latencies 1..60, every 10th denied.
    for (let i = 1; i <= 60; i++) {
      rows.push(record(org, { agentId: alpha, agentName: 'alpha', toolName: 'api.github.com', timestamp: iso(d2 + i * 60_000), latencyMs: i, decision: i % 10 === 0 ? 'denied' : 'allowed' }));
    }
    // Day -1: alpha, 41 Slack calls, latencies 61..101; beta, 25 denied GitHub calls of 1000 ms.
    for (let i = 61; i <= 101; i++) {
      rows.push(record(org, { agentId: alpha, agentName: 'alpha', toolName: 'api.slack.com', timestamp: iso(d1 + i * 60_000), latencyMs: i }));
    }
    for (let i = 0; i < 25; i++) {
      rows.push(record(org, { agentId: beta, agentName: 'beta', toolName: 'api.github.com', timestamp: iso(d1 + 7_200_000 + i * 1000), latencyMs: 1000, decision: 'denied', ruleMatched: 'no-github' }));
    }
    // Today: beta, 5 allowed calls of 5 ms, in the first seconds of the day.
    for (let i = 0; i < 5; i++) {
      rows.push(record(org, { agentId: beta, agentName: 'beta', toolName: 'example.com', timestamp: iso(d0 + i), latencyMs: 5 }));
    }
    // Outside the window: before `since`, and at `until` itself.
    const since = new Date(d2);
    const until = new Date(d0 + DAY_MS);
    rows.push(record(org, { agentId: alpha, timestamp: iso(d2 - 1), decision: 'denied' }));
    rows.push(record(org, { agentId: alpha, timestamp: iso(until.getTime()), decision: 'denied' }));
    await store.insert(rows);

    const report = await store.report(org, since, until, 50, 2);
    // Latencies in the window: 1..101, five 5s, twenty-five 1000s (131 values).
    // quantileExact takes the element at floor(level * n) of the sorted values:
    // p50 is index 65 → 61; p95 is index 124 → 1000.
    t.strictSame(report.totals, { calls: 131, allowed: 100, denied: 31, p50LatencyMs: 61, p95LatencyMs: 1000 });
    t.strictSame(report.perDay, [
      { day: iso(d2).slice(0, 10), allowed: 54, denied: 6 },
      { day: iso(d1).slice(0, 10), allowed: 41, denied: 25 },
      { day: iso(d0).slice(0, 10), allowed: 5, denied: 0 },
    ]);
    t.strictSame(report.perAgent, [
      { agentId: alpha, agentName: 'alpha', calls: 101, allowed: 95, denied: 6, p50LatencyMs: 51 },
      { agentId: beta, agentName: 'beta', calls: 30, allowed: 5, denied: 25, p50LatencyMs: 1000 },
    ]);
    t.strictSame(report.topTools, [
      { toolName: 'api.github.com', mcpTool: null, calls: 85, denied: 31 },
      { toolName: 'api.slack.com', mcpTool: null, calls: 41, denied: 0 },
    ], 'top tools by calls, cut at topN (split by MCP tool where one was read: none here)');
    const inWindow = rows.filter((r) => r.timestamp >= since.toISOString() && r.timestamp < until.toISOString());
    // The report reads only the columns it prints (an output can be 64 KiB or more).
    const printed = (r: AuditRecord) => Object.fromEntries(REPORT_COLUMNS.map((c) => AUDIT_COLUMNS.find((col) => col.name === c)!.field).map((f) => [f, r[f]]));
    t.strictSame(report.recentDenied, newestFirst(inWindow.filter((r) => r.decision === 'denied')).slice(0, REPORT_RECENT_DENIED).map(printed),
      'the most recent denied calls, their printed columns, newest first');
    t.strictSame(report.entries, newestFirst(inWindow).slice(0, 50).map(printed), 'entries newest first, cut at the cap, printed columns only');
    t.notOk('output' in report.entries[0]!, 'no output read');
  });

  t.test('report entries carry reasoning cut to what the PDF prints (REPORT_TEXT_CHARS), not its 64 KiB', async (t) => {
    const org = randomUUID();
    const long = `é${'r'.repeat(65_534)}`;
    await store.insert([record(org, { timestamp: iso(Date.now() - 1000), reasoning: long, decision: 'denied' })]);
    const report = await store.report(org, new Date(Date.now() - DAY_MS), new Date(), 10, 10);
    t.equal(report.entries[0]!.reasoning, long.slice(0, REPORT_TEXT_CHARS), 'its first 2,000 characters (not bytes)');
    t.equal(report.recentDenied[0]!.reasoning, long.slice(0, REPORT_TEXT_CHARS), 'in the recent denied calls too');
  });

  t.test('report on a window without calls is all zeros', async (t) => {
    const report = await store.report(randomUUID(), new Date(dayStart(3)), new Date(), 100, 10);
    t.strictSame(report, {
      totals: { calls: 0, allowed: 0, denied: 0, p50LatencyMs: 0, p95LatencyMs: 0 },
      perDay: [], perAgent: [], topTools: [], recentDenied: [], entries: [],
    });
  });

  t.test('report quantiles are quantileExact\'s on repeated latencies, where floor(level × n) is whole too', async (t) => {
    // Few distinct latencies, many repeats: the histogram the report ranks them by
    // is one pair per latency; each agent's count makes level × n whole or not.
    const org = randomUUID();
    const agents = [randomUUID(), randomUUID(), randomUUID()];
    const counts = [20, 40, 37];
    let seed = 7;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648);
    const rows: AuditRecord[] = [];
    const byAgent = agents.map(() => [] as number[]);
    const base = dayStart(0) - 3_600_000;
    agents.forEach((agentId, a) => {
      for (let i = 0; i < counts[a]!; i++) {
        const latencyMs = [1, 2, 3, 5, 8, 13, 400][next() % 7]!;
        byAgent[a]!.push(latencyMs);
        rows.push(record(org, { agentId, agentName: `a${a}`, timestamp: iso(base + rows.length * 1000), latencyMs, decision: i % (a + 3) === 0 ? 'denied' : 'allowed' }));
      }
    });
    await store.insert(rows);
    const report = await store.report(org, new Date(dayStart(1)), new Date(), 10, 10);
    const sorted = (xs: number[]) => [...xs].sort((x, y) => x - y);
    const all = sorted(byAgent.flat());
    t.strictSame([report.totals.p50LatencyMs, report.totals.p95LatencyMs], [quantileExact(all, 0.5), quantileExact(all, 0.95)], 'totals');
    for (const [a, agentId] of agents.entries()) {
      const row = report.perAgent.find((x) => x.agentId === agentId)!;
      t.strictSame([row.calls, row.p50LatencyMs], [counts[a], quantileExact(sorted(byAgent[a]!), 0.5)], `agent of ${counts[a]} calls`);
    }
    // GET /audit/summary: the same window counted by the store, p95 per agent, most calls first.
    const summary = await store.summary(org, new Date(dayStart(1)), new Date(), 10);
    t.strictSame(summary, {
      calls: counts[0]! + counts[1]! + counts[2]!,
      denied: rows.filter((r) => r.decision === 'denied').length,
      agentsTotal: 3,
      agents: [1, 2, 0].map((a) => ({
        agentId: agents[a]!, agentName: rows.filter((r) => r.agentId === agents[a]).sort((x, y) => x.timestamp.localeCompare(y.timestamp)).at(-1)!.agentName,
        calls: counts[a]!, denied: rows.filter((r) => r.agentId === agents[a] && r.decision === 'denied').length, p95LatencyMs: quantileExact(sorted(byAgent[a]!), 0.95),
      })),
    }, 'the summary: totals and each agent, most calls first');
    t.strictSame((await store.summary(org, new Date(dayStart(1)), new Date(), 2)).agents.map((a) => a.agentId), [agents[1], agents[2]], 'at most the agents asked for, agentsTotal still all');
    t.strictSame(await store.summary(randomUUID(), new Date(dayStart(1)), new Date(), 10), { calls: 0, denied: 0, agentsTotal: 0, agents: [] }, 'another org: nothing');
  });

  t.test('count counts one org, or all of them', async (t) => {
    const org = randomUUID();
    const before = await store.count();
    await store.insert(Array.from({ length: 7 }, () => record(org)));
    t.equal(await store.count(org), 7);
    t.ok((await store.count()) >= before + 7, 'the all-org count grew by at least the batch');
  });

  t.test('a batch of 10,000 rows in one insert', async (t) => {
    const org = randomUUID();
    const agent = randomUUID();
    const base = Date.now() - DAY_MS;
    const rows = Array.from({ length: 10_000 }, (_, i) => record(org, {
      agentId: agent,
      timestamp: iso(base + i),
      reasoning: `call ${i} for a reason long enough to look like a real one`,
      outputHash: 'ab'.repeat(32),
      requestBytes: i * 1000,
    }));
    const started = performance.now();
    await store.insert(rows, `bulk-${randomUUID()}`);
    const insertMs = performance.now() - started;
    t.comment(`insert 10,000 rows in one batch: ${insertMs.toFixed(0)} ms (${Math.round(10_000 / (insertMs / 1000))} rows/s)`);
    t.equal(await store.count(org), 10_000);
    const listStarted = performance.now();
    const page = await store.list(org, { agentId: agent }, 50, 5000);
    t.comment(`list 50 rows at offset 5,000 of 10,000 with total: ${(performance.now() - listStarted).toFixed(1)} ms`);
    t.equal(page.total, 10_000);
    t.equal(page.rows[0]?.requestBytes, 4_999_000, 'the page starts 5,000 rows below the newest');
    const reportStarted = performance.now();
    const report = await store.report(org, new Date(base), new Date(), 1000, 10);
    t.comment(`report over 10,000 rows: ${(performance.now() - reportStarted).toFixed(1)} ms`);
    t.equal(report.totals.calls, 10_000);
    t.equal(report.entries.length, 1000);
  });
}

const chdbDataDir = mkdtempSync(join(tmpdir(), 'audit-store-test-'));
t.teardown(() => rmSync(chdbDataDir, { recursive: true, force: true }));

t.test('chDB', async (t) => {
  auditStoreContract(t, () => ClickHouseAuditStore.open({ url: null, dataDir: chdbDataDir, retentionDays: RETENTION_DAYS }));
});

// The store hands chDB each batch as a file its reader opens by path, and that
// reader takes `*`, `?` and `{` in a path as a glob: in such a data directory
// batches go inline instead, and the store keeps its whole contract.
const globDataDir = mkdtempSync(join(tmpdir(), 'audit-store-{glob}*?-'));
t.teardown(() => rmSync(globDataDir, { recursive: true, force: true }));

t.test('chDB in a data directory whose path holds glob characters', async (t) => {
  auditStoreContract(t, () => ClickHouseAuditStore.open({ url: null, dataDir: globDataDir, retentionDays: RETENTION_DAYS }));
});

t.test('chDB: reopening keeps the rows and restores the configured retention and settings', async (t) => {
  const chdbDir = join(chdbDataDir, 'chdb');
  // A plain client on the store's directory, used while no store holds it open.
  // The cast bridges chdb's copy of @clickhouse/client-common's types (see the store).
  type ClientConnection = NonNullable<NonNullable<Parameters<typeof createClient>[0]>['connection']>;
  const { createChdbConnection } = await import('chdb/connection');
  const withRawClient = async <T>(fn: (client: ReturnType<typeof createClient>) => Promise<T>): Promise<T> => {
    const client = createClient({ connection: createChdbConnection({ path: chdbDir }) as unknown as ClientConnection });
    try {
      return await fn(client);
    } finally {
      await client.close();
    }
  };
  const engineFull = () => withRawClient(async (client) => {
    const rows = await (await client.query({
      query: 'SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {table:String}',
      query_params: { table: AUDIT_TABLE },
      format: 'JSONEachRow',
    })).json<{ engine_full: string }>();
    return rows[0]?.engine_full ?? '';
  });

  const org = randomUUID();
  const first = await ClickHouseAuditStore.open({ url: null, dataDir: chdbDataDir, retentionDays: RETENTION_DAYS });
  await first.insert([record(org), record(org)]);
  await first.close();
  t.match(await engineFull(), /PARTITION BY toYYYYMM\(timestamp\) ORDER BY \(org_id, timestamp, id\) TTL toDateTime\(timestamp\) \+ toIntervalDay\(30\)/);

  // Someone edits the table by hand; the next open puts it back as configured.
  await withRawClient(async (client) => {
    await client.command({ query: `ALTER TABLE ${AUDIT_TABLE} MODIFY TTL toDateTime(timestamp) + INTERVAL 3 DAY` });
    await client.command({ query: `ALTER TABLE ${AUDIT_TABLE} MODIFY SETTING fsync_after_insert = 0, non_replicated_deduplication_window = 5` });
  });
  t.match(await engineFull(), /fsync_after_insert = 0/, 'the hand edit took');

  const second = await ClickHouseAuditStore.open({ url: null, dataDir: chdbDataDir, retentionDays: 7 });
  t.equal(await second.count(org), 2, 'rows survive a close and reopen');
  await second.close();
  const engine = await engineFull();
  t.match(engine, /TTL toDateTime\(timestamp\) \+ toIntervalDay\(7\)/, 'the configured retention');
  t.match(engine, /non_replicated_deduplication_window = 10000/);
  t.match(engine, /fsync_after_insert = 1/);
  t.match(engine, /fsync_part_directory = 1/);
});

t.test('a ClickHouse server that cannot be reached fails the open with StoreUnavailableError', async (t) => {
  // Nothing listens on port 1.
  const err = await ClickHouseAuditStore.open({ url: 'http://127.0.0.1:1/audit', dataDir: chdbDataDir, retentionDays: RETENTION_DAYS }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof StoreUnavailableError, String(err));
  t.match((err as Error).cause, { code: 'ECONNREFUSED' }, "the client's error is the cause");
});

t.test('while a ClickHouse server has not answered yet, every audit call fails as unavailable (503)', async (t) => {
  const config = loadConfig({ CLICKHOUSE_URL: 'http://127.0.0.1:1/audit', DATA_DIR: chdbDataDir });
  const waiting: unknown[] = [];
  const store = await openAuditStoreWhenReachable(config, (err) => waiting.push(err));
  t.teardown(() => store.close());
  t.ok(isStoreUnavailable(waiting[0]), 'the failed first open is unavailable');
  // Within a second of the last attempt the store fails fast; later it tries again.
  t.ok(isStoreUnavailable(await store.count().then(() => undefined, (e: unknown) => e)), 'a call that fails fast');
  await new Promise((resolve) => setTimeout(resolve, 1100));
  t.ok(isStoreUnavailable(await store.count().then(() => undefined, (e: unknown) => e)), 'a call that tried to open again');
});

t.test('a ClickHouse server that takes the connection and never answers holds the start for the startup wait, not the client\'s timeouts', async (t) => {
  const { port, held } = await startSilentServer(t);
  const config = loadConfig({ CLICKHOUSE_URL: `http://127.0.0.1:${port}/audit`, DATA_DIR: chdbDataDir });
  const waiting: unknown[] = [];
  const started = Date.now();
  const store = await openAuditStoreWhenReachable(config, (err) => waiting.push(err), 500);
  const took = Date.now() - started;
  t.teardown(() => store.close());
  t.ok(took < 2000, `opened (to wait on) after ${took} ms; the client's timeout is 30 s`);
  t.ok(isStoreUnavailable(waiting[0]), 'the wait is told as unavailable');
  t.ok(held.length > 0, 'the first open is still on its way');
  const fast = async (what: string, call: () => Promise<unknown>) => {
    const asked = Date.now();
    const err = await call().then(() => undefined, (e: unknown) => e);
    t.ok(isStoreUnavailable(err) && Date.now() - asked < 1000, `${what}: unavailable at once (${Date.now() - asked} ms), not after the open's 10 s`);
  };
  await fast('a ping while the open is on its way (GET /ready)', () => store.ping());
  await store.close();
  await fast('a call once closed', () => store.count());
});

const clickhouseUrl = process.env.CLICKHOUSE_URL;
if (clickhouseUrl) {
  t.test('ClickHouse server', async (t) => {
    auditStoreContract(t, () => ClickHouseAuditStore.open({ url: clickhouseUrl, dataDir: chdbDataDir, retentionDays: RETENTION_DAYS }));
  });
} else {
  t.comment('ClickHouse server tests skipped: CLICKHOUSE_URL is not set');
}

// The report's latency quantiles must not hold every call's latency: over a
// busy org's window that is gigabytes, in this process when the engine is chDB.
// Through the HTTP stand-in (its settings per query): 15 million calls, a
// 40 MB query cap, which quantileExact went past (MEMORY_LIMIT_EXCEEDED).
t.test('the report ranks latencies in memory bounded by distinct values, not by calls', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'audit-store-report-memory-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const server = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse') });
  t.teardown(() => server.kill('SIGTERM'));
  const plain = await ClickHouseAuditStore.open({ url: `${server.url}/audit`, dataDir: dir, retentionDays: RETENTION_DAYS });
  await plain.close();
  const org = randomUUID();
  const calls = 15_000_000;
  const loader = createClient({ url: `${server.url}/audit`, request_timeout: 120_000 });
  t.teardown(() => loader.close());
  await loader.command({
    query: `INSERT INTO ${AUDIT_TABLE} (org_id, timestamp, agent_id, agent_name, latency_ms, decision)
            SELECT '${org}', now64(3) - number / 1000, '${randomUUID()}', 'bulk', number % 97, 'allowed' FROM numbers(${calls})`,
  });
  const capped = await ClickHouseAuditStore.open({ url: `${server.url}/audit?ch_max_memory_usage=40000000`, dataDir: dir, retentionDays: RETENTION_DAYS });
  t.teardown(() => capped.close());
  const report = await capped.report(org, new Date(Date.now() - 2 * DAY_MS), new Date(Date.now() + 60_000), 10, 10);
  // number % 97 over 15,000,000: each of 0..96 about 154,639 times, ranks as quantileExact's floor(level × n).
  t.strictSame(report.totals, { calls, allowed: calls, denied: 0, p50LatencyMs: 48, p95LatencyMs: 92 });
  t.equal(report.perAgent[0]?.p50LatencyMs, 48);
});

// A ClickHouse user whose profile sets another date format (`iso`): the store
// reads its instants as it wrote them. The URL's ch_ setting stands in for the
// profile, and is harder to beat (the client sends it with every query).
t.test('over HTTP, a date_time_output_format other than simple does not change the instants read back', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'audit-store-date-format-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const server = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse') });
  t.teardown(() => server.kill('SIGTERM'));
  const store = await ClickHouseAuditStore.open({ url: `${server.url}/audit?ch_date_time_output_format=iso`, dataDir: dir, retentionDays: RETENTION_DAYS });
  t.teardown(() => store.close());
  const org = randomUUID();
  const written = record(org, { timestamp: '2026-11-20T10:11:12.345Z' });
  await store.insertEncoded(store.encode(written), `date-format-${org}`);
  const { rows } = await store.list(org, {}, 10, 0);
  t.equal(rows[0]?.timestamp, '2026-11-20T10:11:12.345Z', 'the instant as written');
});

// /ready asks the audit store's ping: ClickHouse answers /ping without checking
// the user, so it must be a query that does.
t.test('over HTTP, ping fails once the server no longer accepts the store\'s password', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'audit-store-ping-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse'), user: 'guard', password: 'old-password' });
  const port = Number(new URL(first.url).port);
  const store = await ClickHouseAuditStore.open({ url: `http://guard:old-password@127.0.0.1:${port}/audit`, dataDir: dir, retentionDays: RETENTION_DAYS });
  t.teardown(() => store.close());
  await store.ping();
  t.pass('answers with its password');
  first.kill('SIGTERM');
  await first.exited;
  // The password rotated (the same server, same port).
  const rotated = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse'), port, user: 'guard', password: 'new-password' });
  t.teardown(() => rotated.kill('SIGTERM'));
  const err = await store.ping().then(() => null, (e: unknown) => e as Error);
  t.ok(err !== null, `ping fails: ${err?.message.slice(0, 80)}`);
});
