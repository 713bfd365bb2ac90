// Queues audit records and writes them to the audit store in batches bounded by
// rows and by milliseconds. One insert is in flight at a time, so batches land in
// the order they were sealed. Under load batches close at most once per
// minIntervalMs, so rows gather into fewer, larger inserts: each insert costs
// ClickHouse a part to write and then merge, whatever its size (embedded chDB
// does that on the proxy's own cores); a lone row after a quiet spell still
// goes after maxDelayMs. A batch the store refuses goes to the on-disk spool
// (with the deduplication token it was tried with) and is replayed, oldest first,
// once the store answers again; a replay after a partial failure writes nothing
// twice. Nothing accepted is dropped: when neither the store nor the spool can
// take a batch, it stays in memory and is retried, and the batcher reports
// itself saturated so that callers refuse new work.
//
// With a sealer, every row carries its batch's id, and closing a batch seals it:
// one signed seal per org (seal.ts), appended to the batch as lines after its
// rows, so the journal, the spool, a replay and the deduplication token carry the
// seals exactly as they carry the rows.
import { randomUUID } from 'node:crypto';
import type { AuditStore } from '../stores/audit-store.js';
import type { AuditRecord } from '../types.js';
import { countEncodedRows } from './audit-codec.js';
import type { AuditJournal, JournalWaiter } from './audit-journal.js';
import { SpoolFileUnreadable, type AuditSpool, type SpooledBatch } from './audit-spool.js';
import { RowBytes } from './row-bytes.js';
import { SealColumns, sealHeadsOf, sealRows, type Sealer } from './seal.js';

export interface AuditBatcherOptions {
  maxRows: number;
  /** How long a batch stays open after its first row, after a quiet spell (the last batch closed over minIntervalMs - maxDelayMs ago). */
  maxDelayMs: number;
  /** Least time from one batch's close to the next's, maxRows and maxBatchBytes aside (0: none). */
  minIntervalMs?: number;
  /**
   * A batch closes once its rows reach this many UTF-16 code units, whatever
   * the interval: a second of rows with full outputs (64 KiB each) could
   * otherwise outgrow the queue's byte bound, or the longest string V8 makes
   * when a spooled batch is read back for its replay.
   */
  maxBatchBytes?: number;
  /**
   * Records held in memory (queued + in flight) at which the batcher reports
   * itself saturated: callers then refuse new work (the proxy answers 503) while
   * the records of work already admitted are still always accepted.
   */
  maxQueued: number;
  /** The same bound in bytes of encoded rows (a row with a full output can be 64 KiB or more). */
  maxQueuedBytes?: number;
  /** Where refused batches wait; without one they wait in memory. */
  spool?: AuditSpool;
  /** Where each record goes at enqueue, so a killed process loses none (audit-journal.ts). */
  journal?: AuditJournal;
  /** A failed insert (then spooled), spool write (then kept in memory) or replay (then retried). */
  onError?: (err: unknown, batchRows: number, stage: 'encode' | 'seal' | 'journal' | 'insert' | 'spool' | 'replay' | 'unreadable' | 'closed') => void;
  /** Each insert the store took: its rows and how long it took. */
  onBatchWritten?: (rows: number, ms: number) => void;
  /** Seals each closed batch (seal.ts); without one rows are written unsealed. */
  sealer?: Sealer;
  /** A batch is in the store: the chain heads its seal lines carry (all of them, or its whole body) can be recorded. */
  onBodyWritten?: (body: string) => void;
}

/** What waits for a record to be kept: the proxy's call, holding its answer's last bytes. */
export interface AuditWaiter extends JournalWaiter {
  /**
   * The pipeline closed before the record could be kept (a call that ended
   * after shutdown's flush): its answer must not leave, since nothing will
   * record it.
   */
  refused(): void;
}

interface Batch {
  /** Encoded by the store at enqueue (AuditStore.encode), held as bytes (row-bytes.ts). */
  rows: RowBytes;
  /** Its seal lines (seal.ts), made a slice a turn once the batch is closed; written after the rows. */
  seals: string[];
  /** The rows' encoded length (UTF-16 code units, close to bytes; the chunks holding them are 256 KiB each, row-bytes.ts). */
  bytes: number;
  token: string;
  waiters: { resolve: () => void; reject: (err: unknown) => void }[];
  /** Its journal segment, deleted once the batch is written or spooled. */
  segment?: string;
}

/** A closed batch whose seals are being made (Sealer.sealSteps over its seal columns). */
interface Sealing {
  batch: Batch;
  columns: SealColumns;
  steps: Generator<void, { lines: string[] }>;
}

const RETRY_MIN_MS = 100;
/** Failures in a row after which the replay checks, with the newest spooled batch, whether the oldest is stuck. */
const STUCK_AFTER_FAILURES = 3;
/** A stuck batch is tried again after this, doubling each time up to STUCK_RETRY_MAX_MS. */
const STUCK_RETRY_MIN_MS = 5_000;
const STUCK_RETRY_MAX_MS = 10 * 60_000;
const RETRY_MAX_MS = 5000;

export interface AuditBatcherStats {
  queued: number;
  written: number;
  spooled: number;
  replayed: number;
  failedAttempts: number;
  batches: number;
  /** Refusals of a saturated pipeline answered without a record: the queue was past its headroom (overfull). */
  refusalsUnrecorded: number;
}

export class AuditBatcher {
  readonly #store: AuditStore;
  /** The store's encoder, looked up once: it runs for every record. */
  readonly #encode: AuditStore['encode'];
  readonly #options: AuditBatcherOptions;
  readonly #spool: AuditSpool | undefined;
  readonly #journal: AuditJournal | undefined;
  readonly #sealer: Sealer | undefined;
  #open: Batch = newBatch();
  /** With a sealer: what the open batch's seals need of each row, read from its line as it is encoded (two instances in turn: one filling, one being sealed; each cleared once its seals are made). */
  #sealColumns: SealColumns | null;
  #spareColumns: SealColumns | null = null;
  /** The closed batch whose seals are being made, a slice a turn (at most one: chains advance in batch order). */
  #sealing: Sealing | null = null;
  #stepScheduled: NodeJS.Immediate | null = null;
  readonly #sealed: Batch[] = [];
  #held = 0;
  #heldBytes = 0;
  #timer: NodeJS.Timeout | null = null;
  /** performance.now() when the last batch closed. */
  #lastSealAt = -Infinity;
  #working = false;
  #retryMs = RETRY_MIN_MS;
  #retryTimer: NodeJS.Timeout | null = null;
  #idleWaiters: (() => void)[] = [];
  #closing = false;
  /** close() is over: a record queued now is neither written nor spooled, so its call must not be answered. */
  #closed = false;
  /** Set once close() takes over: the work loop touches nothing after that. */
  #stopped = false;
  /** Failures in a row of the oldest batch the replay tries, and its token (#replay). */
  #headFailures = 0;
  #headToken: string | null = null;
  /** Spooled batches found stuck (#waitingInSpool), by token: when each is tried next. */
  readonly #stuck = new Map<string, { delayMs: number; dueAt: number }>();
  #stuckTimer: NodeJS.Timeout | null = null;
  readonly stats: AuditBatcherStats = { queued: 0, written: 0, spooled: 0, replayed: 0, failedAttempts: 0, batches: 0, refusalsUnrecorded: 0 };

  constructor(store: AuditStore, options: AuditBatcherOptions) {
    this.#store = store;
    this.#encode = store.encode.bind(store);
    this.#options = options;
    this.#spool = options.spool;
    this.#journal = options.journal;
    if (this.#journal !== undefined) this.#journal.onError = (err) => options.onError?.(err, 0, 'journal');
    this.#sealer = options.sealer;
    this.#sealColumns = options.sealer === undefined ? null : new SealColumns();
    // Batches a previous run left in the spool are replayed from the start.
    if (this.#spool !== undefined && this.#spool.batches.length > 0) this.#schedule(0);
  }

  /** Records accepted and held in memory (not yet written or spooled). */
  get pending(): number {
    return this.#held;
  }

  /** Batches waiting in the spool. */
  get spooledBatches(): number {
    return this.#spool?.batches.length ?? 0;
  }

  /** True when the batcher asks callers to refuse new work (memory or spool bound reached). */
  get saturated(): boolean {
    return (
      this.#held >= this.#options.maxQueued ||
      this.#heldBytes >= (this.#options.maxQueuedBytes ?? Infinity) ||
      (this.#spool?.full ?? false)
    );
  }

  /**
   * Saturated, and the records held in memory are a tenth past their bounds:
   * the refusals a saturated pipeline answers are no longer recorded. While the
   * store and the spool take nothing, each refusal's record would stay in memory
   * (and the journal on disk), so agents retrying at any rate would grow both
   * without end; the tenth leaves room for the records of calls admitted before.
   */
  get overfull(): boolean {
    if (!this.saturated) return false;
    const { maxQueued, maxQueuedBytes } = this.#options;
    return this.#held >= maxQueued + Math.ceil(maxQueued / 10) || this.#heldBytes >= (maxQueuedBytes ?? Infinity) * 1.1;
  }

  /** Queues the record of work already admitted; never refuses and never throws. */
  enqueue(record: AuditRecord): void {
    this.#add(record);
  }

  /**
   * Runs `waiter.journaled()` once every record queued so far is in the journal
   * (now, without one): a call's answer leaves only then (audit-journal.ts).
   * After close() it runs `waiter.refused()` instead.
   */
  afterJournaled(waiter: AuditWaiter): void {
    if (this.#closed) waiter.refused();
    else if (this.#journal === undefined) waiter.journaled();
    else this.#journal.afterWrite(waiter);
  }

  /** Queues a record and resolves once the batch holding it is durable (written or spooled). */
  enqueueDurable(record: AuditRecord): Promise<void> {
    if (this.#closing || this.saturated) return Promise.reject(new Error('audit pipeline is saturated or closing'));
    return new Promise((resolve, reject) => {
      this.#open.waiters.push({ resolve, reject });
      this.#add(record);
    });
  }

  #add(record: AuditRecord): void {
    if (this.#closed) {
      // A record that comes after close() (a call shutdown answered while its
      // agent was still being looked up, whose lookup answered late) has no batch
      // that will be written, nor a journal: it is lost, and said so.
      this.#options.onError?.(new Error('the audit pipeline is closed'), 1, 'closed');
      return;
    }
    let line: string;
    try {
      line = this.#encode(record, this.#sealer === undefined ? '' : this.#open.token);
      this.#open.rows.push(line); // a throw here (no memory) appends nothing
    } catch (err) {
      // A record the store cannot encode is a bug upstream of here; it is reported, not thrown into the proxy.
      this.#options.onError?.(err, 1, 'encode');
      return;
    }
    if (this.#sealColumns !== null) {
      try {
        this.#sealColumns.pushFresh(line, record, this.#open.token);
      } catch (err) {
        // The row is still written, outside its batch's seal: verify names it, as it does rows a seal could not be made for.
        this.#options.onError?.(err, 1, 'seal');
      }
    }
    this.#journal?.append(line);
    this.#held += 1;
    this.#heldBytes += line.length;
    this.#open.bytes += line.length;
    this.stats.queued += 1;
    if (this.#open.rows.count >= this.#options.maxRows || this.#open.bytes >= (this.#options.maxBatchBytes ?? Infinity)) {
      this.#seal();
    } else if (this.#timer === null) {
      const sinceLast = performance.now() - this.#lastSealAt;
      this.#timer = setTimeout(() => this.#seal(), Math.max(this.#options.maxDelayMs, (this.#options.minIntervalMs ?? 0) - sinceLast));
    }
  }

  #seal(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (this.#open.rows.count === 0) return;
    this.#lastSealAt = performance.now();
    this.#closeOpen();
    // The insert starts a turn after the seals are made (#sealStep), or after
    // this one without a sealer: handing a second's rows to the store is a few
    // ms of the event loop, and in between the calls whose I/O came in
    // meanwhile go on. flush() and close() finish at once.
    if (this.#sealing === null) setImmediate(() => this.#kick()); // a no-op when the loop already runs
  }

  /**
   * The open batch closes and a new one opens. Its journal segment is cut now;
   * its seals are made a slice a turn (#sealStep), then written to the segment
   * with its token, and only then does it join the batches to insert. Making a
   * second's seals at once held the event loop ~15 ms under the bench's load
   * (~20,000 rows; docs/performance.md).
   */
  #closeOpen(): void {
    this.#finishSealing(); // the batch before is sealed first: the chains advance in batch order
    const batch = this.#open;
    this.#open = newBatch();
    const columns = this.#sealColumns;
    if (this.#sealer === undefined || columns === null) {
      batch.segment = this.#journal?.seal(batch.token);
      this.#sealed.push(batch);
      return;
    }
    batch.segment = this.#journal?.cut();
    this.#sealColumns = this.#spareColumns ?? new SealColumns();
    this.#spareColumns = null;
    this.#sealing = { batch, columns, steps: this.#sealer.sealSteps(columns) };
    this.#stepScheduled ??= setImmediate(this.#sealStep);
  }

  /** One slice of the closing batch's seals; the next turn gets the next. */
  readonly #sealStep = (): void => {
    this.#stepScheduled = null;
    const sealing = this.#sealing;
    if (sealing === null) return; // finished at once meanwhile (flush, close, the next batch)
    if (!this.#runSealSteps(sealing, false)) {
      this.#stepScheduled = setImmediate(this.#sealStep);
      return;
    }
    this.#joinSealed(sealing);
    setImmediate(() => this.#kick());
  };

  /** Makes the rest of the closing batch's seals now (flush, close, a batch closing before the last one's seals are made). */
  #finishSealing(): void {
    const sealing = this.#sealing;
    if (sealing === null) return;
    this.#runSealSteps(sealing, true);
    this.#joinSealed(sealing);
  }

  /** Runs one of the closing batch's seal steps, or all; true once they are over. */
  #runSealSteps(sealing: Sealing, all: boolean): boolean {
    try {
      for (;;) {
        const step = sealing.steps.next();
        if (step.done === true) {
          sealing.batch.seals = step.value.lines;
          return true;
        }
        if (!all) return false;
      }
    } catch (err) {
      // A seal that cannot be made leaves the rows unsealed (verify names them); they are still written.
      this.#options.onError?.(err, sealing.batch.rows.count, 'seal');
      return true;
    }
  }

  /** The closing batch's seals are made (or could not be): into its journal segment with its token, and in line for its insert. */
  #joinSealed(sealing: Sealing): void {
    this.#sealing = null;
    sealing.columns.clear();
    this.#spareColumns = sealing.columns;
    const { batch } = sealing;
    this.#journal?.finish(batch.segment!, batch.seals, batch.token);
    this.#sealed.push(batch);
  }

  /** The batch is written or spooled: out of memory and out of the journal. */
  #settled(batch: Batch): void {
    // By identity: a batch settled twice (the work loop and close() both at it)
    // must not take the one after it out of the queue unwritten.
    const at = this.#sealed.indexOf(batch);
    if (at === -1) return;
    this.#sealed.splice(at, 1);
    this.#held -= batch.rows.count;
    this.#heldBytes -= batch.bytes;
    if (batch.segment !== undefined) this.#journal?.forget(batch.segment);
    for (const waiter of batch.waiters) waiter.resolve();
  }

  #schedule(ms: number): void {
    if (this.#retryTimer !== null) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      this.#kick();
    }, ms);
  }

  /** Starts the work loop unless it runs already (or waits for a retry). */
  #kick(): void {
    if (this.#working || this.#retryTimer !== null || this.#stopped) return;
    this.#working = true;
    void this.#work().finally(() => {
      this.#working = false;
      if (this.#idle()) {
        for (const wake of this.#idleWaiters.splice(0)) wake();
      } else if (this.#sealed.length > 0 && this.#retryTimer === null) {
        this.#kick();
      }
    });
  }

  /** Writes sealed batches, spooling those the store refuses, then replays the spool. */
  async #work(): Promise<void> {
    let batch: Batch | undefined;
    /** The store failed a batch in this loop: the rest go straight to the spool, and the back-off's retry tries the store again. */
    let storeFailed = false;
    /** The spool refused a fresh batch in this loop: the rest go to the store. */
    let spoolRefused = false;
    while ((batch = this.#sealed[0]) !== undefined) {
      // Batches spooled before it land first: a seal chain in ClickHouse with a
      // later seal and not an earlier one (still in the spool) reads as a seal
      // removed to verify, for as long as the drain takes. So while the spool
      // holds batches a fresh one joins them, behind (or, the spool full, waits
      // in memory while the replay drains it). Shutdown writes what it can at once.
      if (!storeFailed && !spoolRefused && !this.#closing && this.#spool !== undefined && this.#waitingInSpool(this.#spool)) {
        if (this.#stopped || this.#spool.full) break;
        if (await this.#trySpool(batch)) {
          this.#settled(batch);
          batch.rows.release();
          continue;
        }
        // The spool cannot take it (a full disk under SPOOL_MAX_BYTES): waiting
        // would hold it, and every batch after it, until the replay made room,
        // which it may never; it goes to the store, out of order, this once.
        spoolRefused = true;
      }
      if (storeFailed) {
        // A store that hangs fails each insert only at its timeout (10 s over
        // HTTP): tried batch by batch, all but one of each 10 s of batches stayed
        // in memory until the queue's bound refused every call, the spool empty.
        if (this.#stopped) return;
        if (!(await this.#trySpool(batch))) return; // the back-off is running: kept in memory, retried
        this.#settled(batch);
        batch.rows.release();
        continue;
      }
      try {
        const started = performance.now();
        // Rows and seals go apart: a batch of megabytes joined into one body would only be split again.
        await this.#store.insertEncoded({ rows: batch.rows.parts(), seals: sealRows(batch.seals) }, batch.token);
        if (this.#stopped) return; // close() spooled it meanwhile; its token makes the second copy a no-op
        this.#options.onBatchWritten?.(batch.rows.count, performance.now() - started);
        if (batch.seals.length > 0) this.#options.onBodyWritten?.(batch.seals.join(''));
        this.stats.written += batch.rows.count;
        this.stats.batches += 1;
        this.#retryMs = RETRY_MIN_MS;
      } catch (err) {
        this.stats.failedAttempts += 1;
        this.#options.onError?.(err, batch.rows.count, 'insert');
        if (this.#stopped) return; // close() spooled it meanwhile (test: "an insert that fails after close()")
        storeFailed = true;
        const spooled = await this.#trySpool(batch);
        if (!this.#stopped) this.#backOff();
        if (!spooled) return; // kept in memory; retried after the back-off
      }
      this.#settled(batch);
      batch.rows.release(); // its insert (or spool write) is over: nothing reads its bytes now
    }
    await this.#replay();
  }

  async #trySpool(batch: Batch): Promise<boolean> {
    if (this.#spool === undefined) return false;
    try {
      await this.#spool.write([...batch.rows.parts(), ...batch.seals], batch.token);
      this.stats.spooled += batch.rows.count;
      return true;
    } catch (err) {
      this.#options.onError?.(err, batch.rows.count, 'spool');
      return false;
    }
  }

  async #replay(): Promise<void> {
    const spool = this.#spool;
    if (spool === undefined || this.#retryTimer !== null) return;
    let spooled: SpooledBatch | undefined;
    while ((spooled = this.#nextToReplay(spool)) !== undefined) {
      // Fresh batches join the spool, behind it (#work), then the loop comes back;
      // a full spool takes none, so the replay goes on and makes room.
      if (this.#sealed.length > 0 && !this.#closing && !spool.full) return;
      // close() is over: the spool is let go, and the next start (another
      // process, perhaps already running) replays what is left, its files too.
      if (this.#stopped) return;
      const outcome = await this.#replayOne(spool, spooled);
      if (outcome === 'stop') return;
      if (outcome === 'done') continue; // #forgetSpooled cleared its failures
      const stuck = this.#stuck.get(spooled.token);
      if (stuck !== undefined) {
        // Tried again when it was due: the next try waits twice as long, and the rest go on.
        stuck.delayMs = Math.min(stuck.delayMs * 2, STUCK_RETRY_MAX_MS);
        stuck.dueAt = Date.now() + stuck.delayMs;
        continue;
      }
      this.#headFailures = spooled.token === this.#headToken ? this.#headFailures + 1 : 1;
      this.#headToken = spooled.token;
      if (this.#headFailures >= STUCK_AFTER_FAILURES) {
        // Failed again and again: the store out of reach, or this batch refused for
        // its content? The newest spooled batch tells: if the store takes it, this
        // one is stuck, and no longer holds the others (and fresh ones) behind it.
        const probe = this.#newestOtherThan(spool, spooled);
        if (probe !== undefined && (await this.#replayOne(spool, probe)) === 'done') {
          this.#stuck.set(spooled.token, { delayMs: STUCK_RETRY_MIN_MS, dueAt: Date.now() + STUCK_RETRY_MIN_MS });
          this.#armStuckTimer();
          continue;
        }
        if (this.#stopped) return;
      }
      this.#backOff();
      return;
    }
    this.#armStuckTimer();
  }

  /** Reads, inserts and removes one spooled batch: 'done', 'failed' (reported), or 'stop' (close() is over, or the back-off is set). */
  async #replayOne(spool: AuditSpool, spooled: SpooledBatch): Promise<'done' | 'failed' | 'stop'> {
    let body: string;
    try {
      body = await spool.read(spooled);
    } catch (err) {
      if (!(err instanceof SpoolFileUnreadable)) {
        // A read that may work next time (EMFILE, EIO): tried again after the back-off.
        this.stats.failedAttempts += 1;
        this.#options.onError?.(err, 0, 'replay');
        this.#backOff();
        return 'stop';
      }
      // Damaged (or gone): waiting on it would hold every batch behind it in the
      // spool for good. It is set aside for an operator, and the replay goes on.
      this.#options.onError?.(err, 0, 'unreadable');
      if (this.#stopped) return 'stop';
      try {
        await spool.setAside(spooled);
        this.#forgetSpooled(spooled.token);
      } catch (moveErr) {
        this.#options.onError?.(moveErr, 0, 'replay');
        this.#backOff();
        return 'stop';
      }
      return 'done';
    }
    try {
      if (this.#stopped) return 'stop';
      // Its seals stored: the batch landed before (an acknowledgement lost, a
      // kill after the insert). ClickHouse drops a repeated token only within
      // its last 10,000 inserts, which many proxies pass in minutes: a later
      // replay would write every row twice, and verify would call it tampering.
      // Counted as written, as it is, once. (One seal, read by the table's key.)
      const seal = sealHeadsOf(body)[0];
      const landed = seal !== undefined && (await this.#store.sealStored(seal.org_id, seal.writer, seal.seq, seal.seal_hash));
      if (!landed) await this.#store.insertEncoded(body, spooled.token);
      if (this.#stopped) return 'stop'; // written; its file stays for the next start, whose copy the token makes a no-op
      this.#options.onBodyWritten?.(body);
      const rows = countEncodedRows(body);
      await spool.remove(spooled);
      this.#forgetSpooled(spooled.token);
      this.stats.written += rows;
      this.stats.replayed += rows;
      this.stats.batches += 1;
      this.#retryMs = RETRY_MIN_MS;
      return 'done';
    } catch (err) {
      this.stats.failedAttempts += 1;
      this.#options.onError?.(err, 0, 'replay');
      return 'failed';
    }
  }

  /**
   * A spooled batch that failed again and again while the store took a newer
   * one is stuck: it may never be taken (its content), and batches waiting
   * behind it would fill the spool and close the proxy. The replay passes it by,
   * trying it again when due (after 5 s, doubling to 10 min), and fresh batches
   * wait only behind batches that are not stuck.
   */
  #waitingInSpool(spool: AuditSpool): boolean {
    return this.#stuck.size === 0 ? spool.batches.length > 0 : spool.batches.some((b) => !this.#stuck.has(b.token));
  }

  /** The next batch to replay: the oldest not stuck, else the oldest stuck one that is due. */
  #nextToReplay(spool: AuditSpool): SpooledBatch | undefined {
    if (this.#stuck.size === 0) return spool.batches[0];
    const now = Date.now();
    return spool.batches.find((b) => !this.#stuck.has(b.token)) ?? spool.batches.find((b) => this.#stuck.get(b.token)!.dueAt <= now);
  }

  /** The newest spooled batch, neither `other` nor stuck. */
  #newestOtherThan(spool: AuditSpool, other: SpooledBatch): SpooledBatch | undefined {
    for (let i = spool.batches.length - 1; i >= 0; i--) {
      const b = spool.batches[i]!;
      if (b !== other && !this.#stuck.has(b.token)) return b;
    }
    return undefined;
  }

  /** Wakes the work loop when the next stuck batch is due (its own timer: the back-off's would hold fresh batches). */
  #armStuckTimer(): void {
    if (this.#stuckTimer !== null || this.#stuck.size === 0 || this.#stopped) return;
    let due = Infinity;
    for (const entry of this.#stuck.values()) due = Math.min(due, entry.dueAt);
    this.#stuckTimer = setTimeout(() => {
      this.#stuckTimer = null;
      this.#kick();
    }, Math.max(0, due - Date.now()));
    this.#stuckTimer.unref();
  }

  /** A spooled batch is gone (replayed or set aside): it is forgotten here too. */
  #forgetSpooled(token: string): void {
    this.#stuck.delete(token);
    if (token === this.#headToken) {
      this.#headToken = null;
      this.#headFailures = 0;
    }
  }

  #backOff(): void {
    this.#schedule(this.#retryMs);
    this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
  }

  /**
   * Nothing left to write: nothing in memory, and the spool replayed, or, once
   * close() began, the store failing (the spool is durable, and the next start
   * replays it: shutdown need not wait out its deadline for a store that is down).
   */
  #idle(): boolean {
    // Stuck batches (#waitingInSpool) stay in the spool, tried when due: nothing to wait for.
    const spool = this.#spool;
    return this.#sealed.length === 0 && (spool === undefined || !this.#waitingInSpool(spool) || (this.#closing && this.#retryTimer !== null));
  }

  /** Writes (or spools) everything queued so far; resolves when nothing is left in memory or the spool (close(): or the store fails). */
  flush(): Promise<void> {
    this.#seal();
    this.#finishSealing();
    if (!this.#working && this.#sealed.length === 0 && this.spooledBatches === 0) return Promise.resolve();
    const done = new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    if (this.#retryTimer !== null) {
      clearTimeout(this.#retryTimer);
      this.#retryTimer = null;
    }
    this.#kick();
    return done;
  }

  /**
   * Shutdown: seals what is queued and tries to write it, waiting at most
   * `deadlineMs`; what the store does not take by then is spooled for the next
   * start. Resolves with the number of records neither written nor spooled.
   */
  async close(deadlineMs: number): Promise<number> {
    this.#closing = true;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.flush(),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, deadlineMs);
      }),
    ]);
    clearTimeout(timer);
    // An insert still in flight gets a moment; past that its batch is spooled too
    // (the same token makes whichever copy lands second a no-op).
    const insertDeadline = Date.now() + 2000;
    while (this.#working && Date.now() < insertDeadline) await new Promise((r) => setTimeout(r, 10));
    this.#stopped = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    if (this.#stuckTimer !== null) clearTimeout(this.#stuckTimer);
    this.#timer = null;
    this.#retryTimer = null;
    this.#stuckTimer = null;
    // Whatever is still in memory goes to the spool, including records of calls
    // that finished while we were closing (the loop runs until none is left).
    for (;;) {
      if (this.#open.rows.count > 0) this.#closeOpen(); // it finishes the seals before its own first
      this.#finishSealing();
      const batch = this.#sealed[0];
      if (batch === undefined || !(await this.#trySpool(batch))) break;
      this.#settled(batch);
    }
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#journal?.close();
    this.#spool?.close();
    this.#closed = true;
    return this.#held;
  }
}

function newBatch(): Batch {
  return { rows: new RowBytes(), seals: [], bytes: 0, token: randomUUID(), waiters: [] };
}
