// GET /audit/stream (CONTRACT.md "Operator console"): server-sent events of the
// caller's org's new audit entries, with the filters of GET /audit.
//
// Where new entries come from: one poller per process, running only while a
// stream is open, asks the audit store every AUDIT_STREAM_POLL_MS for the rows of
// the subscribed orgs inserted since its cursor. It follows `written_at` (the
// store's insert time, a server-side DEFAULT), not `timestamp` (the call's time:
// a held or streamed call, or a batch replayed from the spool, is written long
// after its timestamp). An insert's written_at is taken when the insert starts
// and the rows show once it commits, so each poll reads back WRITTEN_OVERLAP_MS
// before its cursor and skips the ids it already sent. It reads that window's
// row counts per org and insert (one written_at millisecond each), not its ids:
// ids only from the first insert that holds rows not sent yet, mostly the newest;
// and whole entries only of rows written after a stream of their org opened.
// Reading every id of the window cost ~4 µs a row each poll, 15 s of rows four
// times a second: a fifth to a third of the event loop at 1,000 rows/s. The limit: a row whose
// insert takes longer than the overlap to commit is not streamed (it is in GET
// /audit as always). Works the same in all-in-one and split mode, where the
// proxies write straight to ClickHouse and the admin process sees only the table.
//
// The proxy pays nothing per call for subscribers: the poller reads what the
// batcher wrote, builds each entry's event once, and each subscriber's filter is
// a few comparisons in memory (bench/micro/audit-stream.ts measures it).
import { auditJson } from '../shared/audit/entry-json.js';
import { GuardError } from '../shared/errors.js';
import type { Logger } from '../shared/log.js';
import type { AuditStore, WrittenCount, WrittenId } from '../shared/stores/audit-store.js';
import type { AuditFilter, AuditRecord } from '../shared/types.js';
import { auditFilterFromQuery, matchesAuditFilter } from './audit-filter.js';
import type { Handler } from './context.js';
import type { StreamSink } from './http.js';

/** How far back each poll reads before its cursor: longer than an insert takes to commit (ms on chDB; the HTTP client gives up after 10 s). */
export const WRITTEN_OVERLAP_MS = 15_000;
/** Rows dated more than this before a poll's window are not read (the store's WRITTEN_WINDOW: the table is ordered by date). */
const DATED_WITHIN_MS = 86_400_000;
/** Entries fetched per query once their ids are known (ids travel as a query parameter). */
const FETCH_CHUNK = 1000;
/** A subscriber's events are written in pieces of about this size (far under the adapter's 8 MiB bound for a slow reader, STREAM_MAX_BUFFERED_BYTES). */
const WRITE_BYTES = 64 * 1024;

/** Events waiting for one write to a subscriber. */
interface Pending {
  events: string[];
  length: number;
}

export interface AuditStreamOptions {
  store: AuditStore;
  pollMs: number;
  /** Streams at once of one organization (429 past it; AUDIT_STREAMS_PER_ORG, 32) and in all (503; AUDIT_STREAMS_MAX, 256, the bound a split proxy passes through). */
  maxPerOrg?: number;
  maxStreams?: number;
  keepaliveMs: number;
  log: Logger;
}

interface Subscriber {
  orgId: string;
  filter: AuditFilter;
  sink: StreamSink;
  /** Store clock when it subscribed: rows written before are not its news. */
  sinceMs: number;
}

export class AuditStreamHub {
  readonly #opts: AuditStreamOptions;
  readonly #byOrg = new Map<string, Set<Subscriber>>();
  /** Ids sent in the overlap window, with their written_at. */
  readonly #seen = new Map<string, number>();
  /** The dates (ms) of those, by written_at and org: an insert whose count the store exceeds holds news. */
  readonly #seenAt = new Map<number, Map<string, number[]>>();
  /** Streams asked for whose subscription is not counted yet, by org and in all. */
  readonly #opening = new Map<string, number>();
  #openingTotal = 0;
  #cursorMs = 0;
  #pollTimer: NodeJS.Timeout | null = null;
  #keepaliveTimer: NodeJS.Timeout | null = null;
  #polling = false;
  #failing = false;
  #closed = false;
  #count = 0;

  constructor(opts: AuditStreamOptions) {
    this.#opts = opts;
  }

  get subscribers(): number {
    return this.#count;
  }

  /**
   * Adds a subscriber as of now (store clock); resolves once it is counted in.
   * Throws what the store throws (503 when unreachable), and 429 or 503 past
   * the bounds on streams (each costs every poll a filter and a write per entry).
   */
  async subscribe(orgId: string, filter: AuditFilter): Promise<(sink: StreamSink) => () => void> {
    // Those whose head is on its way count too: many opened at once all pass a check of the open ones.
    const perOrg = this.#opts.maxPerOrg ?? 32;
    if ((this.#byOrg.get(orgId)?.size ?? 0) + (this.#opening.get(orgId) ?? 0) >= perOrg) {
      throw new GuardError('rate_limited', `At most ${perOrg} live audit streams of one organization are open at once; close one.`, { limit: 'audit_streams', retry_after: 5 }, { 'retry-after': '5' });
    }
    if (this.#count + this.#openingTotal >= (this.#opts.maxStreams ?? 256)) {
      throw new GuardError('unavailable', 'Too many live audit streams are open; retry later.', undefined, { 'retry-after': '5' });
    }
    this.#opening.set(orgId, (this.#opening.get(orgId) ?? 0) + 1);
    this.#openingTotal++;
    let sinceMs: number;
    try {
      sinceMs = await this.#opts.store.clockMs();
    } finally {
      // The stream opens in the same run of microtasks as this returns (admin-adapter.ts): no other request checks in between.
      const left = this.#opening.get(orgId)! - 1;
      if (left === 0) this.#opening.delete(orgId);
      else this.#opening.set(orgId, left);
      this.#openingTotal--;
    }
    return (sink) => {
      if (this.#closed) {
        sink.end();
        return () => {};
      }
      const sub: Subscriber = { orgId, filter, sink, sinceMs };
      let subs = this.#byOrg.get(orgId);
      if (subs === undefined) this.#byOrg.set(orgId, (subs = new Set()));
      subs.add(sub);
      if (this.#count++ === 0) this.#start(sinceMs);
      return () => this.#remove(sub);
    };
  }

  /** Ends every stream (shutdown) and refuses new ones. */
  close(): void {
    this.#closed = true;
    for (const subs of [...this.#byOrg.values()]) for (const sub of [...subs]) sub.sink.end();
    this.#stop();
  }

  #remove(sub: Subscriber): void {
    const subs = this.#byOrg.get(sub.orgId);
    if (subs === undefined || !subs.delete(sub)) return;
    if (subs.size === 0) this.#byOrg.delete(sub.orgId);
    if (--this.#count === 0) this.#stop();
  }

  #start(cursorMs: number): void {
    this.#cursorMs = cursorMs;
    this.#seen.clear();
    this.#seenAt.clear();
    this.#pollTimer = setInterval(() => void this.#poll(), this.#opts.pollMs);
    this.#keepaliveTimer = setInterval(() => this.#keepalive(), this.#opts.keepaliveMs);
  }

  #stop(): void {
    if (this.#pollTimer !== null) clearInterval(this.#pollTimer);
    if (this.#keepaliveTimer !== null) clearInterval(this.#keepaliveTimer);
    this.#pollTimer = this.#keepaliveTimer = null;
  }

  #keepalive(): void {
    for (const subs of [...this.#byOrg.values()]) for (const sub of [...subs]) sub.sink.write(': keepalive\n\n');
  }

  async #poll(): Promise<void> {
    if (this.#polling) return; // a slow store: the next tick waits for this one
    this.#polling = true;
    try {
      const orgs = [...this.#byOrg.keys()];
      if (orgs.length === 0) return;
      const { store } = this.#opts;
      const nowMs = await store.clockMs();
      const windowMs = Math.max(0, this.#cursorMs - WRITTEN_OVERLAP_MS);
      const fromMs = this.#firstNews(await store.writtenCounts(orgs, windowMs), windowMs - DATED_WITHIN_MS);
      // The floor of the rows' dates the counts had (windowMs), not fromMs's: rows between the two were counted and would never be listed.
      const listed = fromMs === null ? [] : (await store.writtenSince(orgs, fromMs, windowMs)).filter((w) => !this.#seen.has(w.id));
      // Rows written before every stream of their org opened are no one's news:
      // counted as sent, never fetched. A stream opening on an org that writes
      // 1,000 rows a second fetched the 15,000 whole entries before it, outputs
      // and all, to drop them.
      const firstSince = this.#firstSinceByOrg();
      const fresh: WrittenId[] = [];
      for (const w of listed) {
        if (w.writtenMs < (firstSince.get(w.orgId) ?? Infinity)) this.#markSent(w);
        else fresh.push(w);
      }
      for (let i = 0; i < fresh.length; i += FETCH_CHUNK) {
        const chunk = fresh.slice(i, i + FETCH_CHUNK);
        const written = new Map<string, WrittenId>(chunk.map((w) => [w.id, w]));
        // A subscriber's events of this chunk go out in few writes (one per
        // WRITE_BYTES), not one per event: measured with 100 subscribers
        // (npm run bench:audit-stream), 6.1 µs per delivered event with a corked
        // write each, 1.8 µs batched.
        const pending = new Map<Subscriber, Pending>();
        for (const record of await store.writtenEntries(orgs, [...written.keys()], windowMs)) {
          const w = written.get(record.id)!;
          if (this.#seen.has(record.id)) continue;
          this.#markSent(w);
          this.#collect(record, w.writtenMs, pending);
        }
        for (const [sub, batch] of pending) if (batch.events.length > 0) sub.sink.write(batch.events.join(''));
      }
      this.#cursorMs = nowMs;
      const forgetBefore = nowMs - WRITTEN_OVERLAP_MS;
      for (const [id, writtenMs] of this.#seen) if (writtenMs < forgetBefore) this.#seen.delete(id);
      for (const writtenMs of this.#seenAt.keys()) if (writtenMs < forgetBefore) this.#seenAt.delete(writtenMs);
      if (this.#failing) this.#opts.log.info('the live audit stream reads the audit store again');
      this.#failing = false;
    } catch (err) {
      // Told once per outage; the streams stay open and catch up when the store answers.
      if (!this.#failing) this.#opts.log.warn('the live audit stream cannot read the audit store; retrying', { err });
      this.#failing = true;
    } finally {
      this.#polling = false;
    }
  }

  /** Records a row as sent: its id, and its date among its insert's (#firstNews counts them). */
  #markSent(w: WrittenId): void {
    this.#seen.set(w.id, w.writtenMs);
    let sentOf = this.#seenAt.get(w.writtenMs);
    if (sentOf === undefined) this.#seenAt.set(w.writtenMs, (sentOf = new Map()));
    const dates = sentOf.get(w.orgId);
    if (dates === undefined) sentOf.set(w.orgId, [w.dateMs]);
    else dates.push(w.dateMs);
  }

  /** When the first open stream of each subscribed org opened (store clock). */
  #firstSinceByOrg(): Map<string, number> {
    const first = new Map<string, number>();
    for (const [orgId, subs] of this.#byOrg) {
      let since = Infinity;
      for (const sub of subs) since = Math.min(since, sub.sinceMs);
      first.set(orgId, since);
    }
    return first;
  }

  /**
   * The written_at of the oldest insert (counts oldest first) with more rows than
   * were sent of it, or null when every row was sent. Counted as the store counts:
   * rows dated from `floorMs` on (one sent when the floor was lower is not in the store's count).
   */
  #firstNews(counts: readonly WrittenCount[], floorMs: number): number | null {
    for (const c of counts) {
      const dates = this.#seenAt.get(c.writtenMs)?.get(c.orgId);
      let sent = 0;
      if (dates !== undefined) for (const date of dates) if (date >= floorMs) sent++;
      if (c.rows > sent) return c.writtenMs;
    }
    return null;
  }

  /** Adds the record's event to the events of each subscriber it is for. */
  #collect(record: AuditRecord, writtenMs: number, pending: Map<Subscriber, Pending>): void {
    const subs = this.#byOrg.get(record.orgId);
    if (subs === undefined) return;
    let event: string | null = null; // built once, for the first subscriber that wants it
    for (const sub of subs) {
      if (writtenMs < sub.sinceMs || !matchesAuditFilter(record, sub.filter)) continue;
      // JSON.stringify escapes line breaks, so the entry is one `data:` line.
      event ??= `event: audit\nid: ${record.id}\ndata: ${JSON.stringify(auditJson(record))}\n\n`;
      let batch = pending.get(sub);
      if (batch === undefined) pending.set(sub, (batch = { events: [], length: 0 }));
      batch.events.push(event);
      batch.length += event.length;
      if (batch.length >= WRITE_BYTES) {
        sub.sink.write(batch.events.join(''));
        batch.events = [];
        batch.length = 0;
      }
    }
  }
}

/** Response headers of an event stream: never cached or transformed on the way (RFC 9110, and proxies that buffer). */
const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store, no-transform',
  'x-accel-buffering': 'no',
};

/** The last event of a stream whose token expired (the console logs in again). */
const EXPIRED_EVENT = 'event: expired\ndata: {"reason":"the token expired"}\n\n';

/** GET /audit/stream: the filters checked (400) before the head is sent; the stream starts as of this moment. */
export function auditStreamHandler(hub: AuditStreamHub): Handler {
  return async (req, caller) => {
    const filter = auditFilterFromQuery(req.query);
    const open = await hub.subscribe(caller.orgId, filter);
    if (req.method === 'HEAD') return { status: 200, headers: STREAM_HEADERS, body: '' };
    // A stream ends when its token does, with an `expired` event first, so that
    // a client tells it from a shutdown by the service's clock, not its own:
    // the console then goes back to its login page.
    const lifetimeMs = Math.min(Math.max(0, (caller.expiresAt ?? Infinity) - Date.now()), 2 ** 31 - 1);
    return {
      status: 200,
      headers: STREAM_HEADERS,
      body: '',
      stream: (sink) => {
        const close = open(sink);
        const timer = setTimeout(() => {
          sink.write(EXPIRED_EVENT);
          sink.end();
        }, lifetimeMs);
        return () => {
          clearTimeout(timer);
          close();
        };
      },
    };
  };
}
