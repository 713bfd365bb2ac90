// Queues audit records and writes them to the audit store in batches bounded by
// rows and by milliseconds. One insert is in flight at a time, so batches land in
// order; a failed batch keeps its deduplication token and is retried as it was, so
// a retry after a partial failure writes nothing twice.
import { randomUUID } from 'node:crypto';
import type { AuditStore } from '../stores/audit-store.js';
import type { AuditRecord } from '../types.js';

export interface AuditBatcherOptions {
  maxRows: number;
  maxDelayMs: number;
  /**
   * Records held in memory (queued + in flight) at which the batcher reports
   * itself saturated: callers then refuse new work (the proxy answers 503) while
   * the records of work already admitted are still always accepted.
   */
  maxQueued: number;
  onError?: (err: unknown, batchRows: number) => void;
}

interface Batch {
  rows: AuditRecord[];
  token: string;
  waiters: { resolve: () => void; reject: (err: unknown) => void }[];
}

const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5000;

export class AuditBatcher {
  readonly #store: AuditStore;
  readonly #options: AuditBatcherOptions;
  #open: Batch = newBatch();
  readonly #sealed: Batch[] = [];
  #held = 0;
  #timer: NodeJS.Timeout | null = null;
  #writing = false;
  #retryMs = RETRY_MIN_MS;
  #retryTimer: NodeJS.Timeout | null = null;
  #idleWaiters: (() => void)[] = [];
  written = 0;
  failedAttempts = 0;

  constructor(store: AuditStore, options: AuditBatcherOptions) {
    this.#store = store;
    this.#options = options;
  }

  /** Records accepted but not yet written. */
  get pending(): number {
    return this.#held;
  }

  /** True when the batcher is refusing work (memory bound reached). */
  get saturated(): boolean {
    return this.#held >= this.#options.maxQueued;
  }

  /** Queues the record of work already admitted; never refuses and never throws. */
  enqueue(record: AuditRecord): void {
    this.#add(record);
  }

  /** Queues a record and resolves once the batch holding it is written. */
  enqueueDurable(record: AuditRecord): Promise<void> {
    if (this.#held >= this.#options.maxQueued) return Promise.reject(new Error('audit queue is full'));
    return new Promise((resolve, reject) => {
      this.#open.waiters.push({ resolve, reject });
      this.#add(record);
    });
  }

  #add(record: AuditRecord): void {
    this.#open.rows.push(record);
    this.#held += 1;
    if (this.#open.rows.length >= this.#options.maxRows) {
      this.#seal();
    } else if (this.#timer === null) {
      this.#timer = setTimeout(() => this.#seal(), this.#options.maxDelayMs);
    }
  }

  #seal(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (this.#open.rows.length === 0) return;
    this.#sealed.push(this.#open);
    this.#open = newBatch();
    this.#drain();
  }

  #drain(): void {
    if (this.#writing || this.#retryTimer !== null) return;
    const batch = this.#sealed[0];
    if (!batch) {
      for (const wake of this.#idleWaiters.splice(0)) wake();
      return;
    }
    this.#writing = true;
    this.#store.insert(batch.rows, batch.token).then(
      () => {
        this.#writing = false;
        this.#sealed.shift();
        this.#held -= batch.rows.length;
        this.written += batch.rows.length;
        this.#retryMs = RETRY_MIN_MS;
        for (const waiter of batch.waiters) waiter.resolve();
        this.#drain();
      },
      (err: unknown) => {
        this.#writing = false;
        this.failedAttempts += 1;
        this.#options.onError?.(err, batch.rows.length);
        this.#retryTimer = setTimeout(() => {
          this.#retryTimer = null;
          this.#drain();
        }, this.#retryMs);
        this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
      },
    );
  }

  /** Writes everything queued so far; resolves when it is all written. */
  flush(): Promise<void> {
    this.#seal();
    if (!this.#writing && this.#sealed.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /**
   * Flushes, waiting at most `deadlineMs`. Resolves with the number of records
   * still unwritten (0 when everything landed).
   */
  async close(deadlineMs: number): Promise<number> {
    if (this.#retryTimer !== null) {
      // Retry now rather than after the back-off: we are shutting down.
      clearTimeout(this.#retryTimer);
      this.#retryTimer = null;
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.flush(),
      new Promise<void>((resolve) => { timer = setTimeout(resolve, deadlineMs); }),
    ]);
    clearTimeout(timer);
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    return this.#held;
  }
}

function newBatch(): Batch {
  return { rows: [], token: randomUUID(), waiters: [] };
}
