// The live audit stream's poller against the real audit store (ClickHouse over
// the HTTP stand-in): each poll reads back 15 s before its cursor, and it must
// read the ids of only the inserts that hold rows it has not sent, not every row
// of those 15 s four times a second (~4 µs a row of the event loop each time).
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { AuditStreamHub } from '../../admin/audit-stream.js';
import { GuardError } from '../../shared/errors.js';
import type { StreamSink } from '../../admin/http.js';
import { createLogger } from '../../shared/log.js';
import type { AuditStore } from '../../shared/stores/audit-store.js';
import { auditRecord } from '../support/audit-records.js';
import { openAuditStoreOnDemand } from '../support/audit-store-on-demand.js';
import { eventually } from '../support/eventually.js';

const audit = await openAuditStoreOnDemand();
t.teardown(() => audit.close());

/** The real store, counting the ids its writtenSince hands the poller and the whole entries it fetches. */
let idsRead = 0;
let entriesRead = 0;
const store: AuditStore = {
  ...audit.store,
  writtenSince: async (orgIds, sinceMs, floorMs) => {
    const ids = await audit.store.writtenSince(orgIds, sinceMs, floorMs);
    idsRead += ids.length;
    return ids;
  },
  writtenEntries: async (orgIds, ids, sinceMs) => {
    const entries = await audit.store.writtenEntries(orgIds, ids, sinceMs);
    entriesRead += entries.length;
    return entries;
  },
};

/** A stream's sink that collects the ids of the events it is sent. */
function idsInto(ids: string[]): StreamSink {
  return {
    write: (chunk) => {
      for (const m of String(chunk).matchAll(/^id: (.+)$/gm)) ids.push(m[1]!);
      return true;
    },
    end: () => {},
  };
}

async function insert(orgId: string, rows: number): Promise<string[]> {
  const records = Array.from({ length: rows }, () => auditRecord(orgId, { timestamp: new Date().toISOString() }));
  await store.insertEncoded(records.map((r) => store.encode(r)).join(''), randomUUID());
  return records.map((r) => r.id);
}

t.test('a poll reads the ids of new inserts only, and every entry is sent once', async (t) => {
  const orgId = randomUUID();
  const hub = new AuditStreamHub({ store, pollMs: 50, keepaliveMs: 60_000, log: createLogger('warn', (l) => console.error(l)) });
  t.teardown(() => hub.close());
  const sent: string[] = [];
  (await hub.subscribe(orgId, {}))(idsInto(sent));

  const first = await insert(orgId, 2000);
  await eventually(async () => (sent.length >= 2000 ? true : undefined), 10_000);
  t.same(new Set(sent), new Set(first), 'the 2,000 entries of one insert, each once');

  idsRead = 0;
  await new Promise((r) => setTimeout(r, 600)); // ~12 polls with nothing new in a window that holds 2,000 rows
  t.equal(idsRead, 0, 'polls with nothing new read no id (each read the 2,000 before)');

  const second = await insert(orgId, 3);
  await eventually(async () => (sent.length >= 2003 ? true : undefined), 10_000);
  t.ok(idsRead < 100, `a new insert of 3 rows: ${idsRead} ids read, not the window's 2,003 each poll`);
  await new Promise((r) => setTimeout(r, 300));
  t.same(new Set(sent.slice(2000)), new Set(second), 'its entries, after the first ones');
  t.equal(sent.length, 2003, 'nothing sent twice');
});

t.test('an org that subscribes later gets its entries, the first only its own', async (t) => {
  const [a, b] = [randomUUID(), randomUUID()];
  const hub = new AuditStreamHub({ store, pollMs: 50, keepaliveMs: 60_000, log: createLogger('error', () => {}) });
  t.teardown(() => hub.close());
  const sentTo = new Map<string, string[]>([[a, []], [b, []]]);
  const sinkOf = (org: string) => idsInto(sentTo.get(org)!);
  (await hub.subscribe(a, {}))(sinkOf(a));
  await insert(a, 5);
  await eventually(async () => (sentTo.get(a)!.length >= 5 ? true : undefined), 10_000);
  (await hub.subscribe(b, {}))(sinkOf(b));
  const later = await insert(b, 4);
  await eventually(async () => (sentTo.get(b)!.length >= 4 ? true : undefined), 10_000);
  t.same(new Set(sentTo.get(b)), new Set(later), 'the later org gets its entries');
  t.equal(sentTo.get(a)!.length, 5, 'the first org gets only its own');
});

t.test('rows dated up to a day before the window (a spool replayed after a long outage) are streamed', async (t) => {
  const orgId = randomUUID();
  const hub = new AuditStreamHub({ store, pollMs: 50, keepaliveMs: 60_000, log: createLogger('error', () => {}) });
  t.teardown(() => hub.close());
  const sent: string[] = [];
  (await hub.subscribe(orgId, {}))(idsInto(sent));
  await new Promise((r) => setTimeout(r, 200)); // a few polls: the window now starts before the insert
  // Dated a day and 5 s ago: within a day of the poll's window (15 s back), not within a day of the insert itself.
  const records = Array.from({ length: 3 }, () => auditRecord(orgId, { timestamp: new Date(Date.now() - 86_400_000 - 5_000).toISOString() }));
  await store.insertEncoded(records.map((r) => store.encode(r)).join(''), randomUUID());
  await eventually(async () => (sent.length >= 3 ? true : undefined), 5_000).catch(() => undefined);
  t.same(new Set(sent), new Set(records.map((r) => r.id)), 'the three old-dated entries arrive');
});

t.test('a stream opening on an org that writes fetches none of the entries written before it, and gets those after', async (t) => {
  const orgId = randomUUID();
  await insert(orgId, 2000); // in the 15 s each poll reads back
  const hub = new AuditStreamHub({ store, pollMs: 50, keepaliveMs: 60_000, log: createLogger('warn', (l) => console.error(l)) });
  t.teardown(() => hub.close());
  const sent: string[] = [];
  entriesRead = 0;
  (await hub.subscribe(orgId, {}))(idsInto(sent));
  await new Promise((r) => setTimeout(r, 400)); // several polls
  t.equal(entriesRead, 0, 'the 2,000 entries before it are not fetched (they were fetched whole, then dropped)');
  t.equal(sent.length, 0, 'nor sent');
  const after = await insert(orgId, 5);
  await eventually(async () => (sent.length >= 5 ? true : undefined), 10_000);
  t.same(new Set(sent), new Set(after), 'the 5 written after it, each once');
  t.equal(entriesRead, 5, 'and only those fetched');
});

t.test('streams are bounded: 32 of one org (429), 256 in all (503), counted while they open', async (t) => {
  const hub = new AuditStreamHub({ store, pollMs: 60_000, keepaliveMs: 60_000, log: createLogger('error', () => {}) });
  t.teardown(() => hub.close());
  const sink = { write: () => true, end: () => {} };
  const first = randomUUID();
  // Asked for at once: all pass a check of the open ones alone.
  const asked = await Promise.allSettled(Array.from({ length: 40 }, () => hub.subscribe(first, {})));
  const opened = asked.filter((r) => r.status === 'fulfilled');
  t.equal(opened.length, 32, '40 asked at once: 32 open');
  t.ok(asked.every((r) => r.status === 'fulfilled' || (r.reason instanceof GuardError && r.reason.status === 429 && r.reason.headers?.['retry-after'] === '5' && r.reason.extra?.limit === 'audit_streams')), 'the others: 429 with Retry-After, naming the limit');
  const closers = opened.map((r) => (r as PromiseFulfilledResult<(s: typeof sink) => () => void>).value(sink));
  closers.pop()!();
  t.ok(await hub.subscribe(first, {}), 'one closed: one more opens');
  for (let org = 0; org < 7; org++) {
    const id = randomUUID();
    for (let i = 0; i < 32; i++) (await hub.subscribe(id, {}))(sink);
  }
  t.equal(hub.subscribers, 31 + 7 * 32, 'open streams');
  const last = randomUUID();
  (await hub.subscribe(last, {}))(sink);
  const refused = await hub.subscribe(randomUUID(), {}).then(() => null, (err: unknown) => err);
  t.ok(refused instanceof GuardError && refused.status === 503, `the 257th: 503 (${(refused as Error)?.message})`);
});
