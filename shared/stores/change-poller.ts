// Cache coherence across processes: a proxy polls the metadata store's monotonic
// change log at a short interval and evicts what each change touches. The same
// mechanism serves SQLite (one file shared on one machine) and MongoDB; a poller
// that finds it lost its place (rows pruned past it) evicts everything.
import type { MetadataChange } from '../types.js';

export interface ChangeLog {
  changesSince(seq: number, limit: number): { seq: number; change: MetadataChange }[] | Promise<{ seq: number; change: MetadataChange }[]>;
  lastChangeSeq(): number | Promise<number>;
}

export interface ChangePoller {
  /** The last change applied. */
  readonly position: number;
  stop(): void;
}

const BATCH = 1000;

export async function startChangePoller(
  log: ChangeLog,
  handlers: { apply(change: MetadataChange): void; clear(): void; onError(err: unknown): void },
  intervalMs: number,
): Promise<ChangePoller> {
  let position = await log.lastChangeSeq();
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;

  async function poll(): Promise<void> {
    try {
      for (;;) {
        const rows = await log.changesSince(position, BATCH);
        if (rows.length === 0) break;
        if (rows[0]!.seq > position + 1) handlers.clear(); // rows we never saw were pruned
        for (const row of rows) handlers.apply(row.change);
        position = rows[rows.length - 1]!.seq;
        if (rows.length < BATCH) break;
      }
    } catch (err) {
      handlers.onError(err);
    }
    if (!stopped) timer = setTimeout(() => void poll(), intervalMs);
  }

  timer = setTimeout(() => void poll(), intervalMs);
  return {
    get position() {
      return position;
    },
    stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
    },
  };
}
