// One feed of metadata changes per store. A commit made through this process's store
// reaches every subscriber at once, after the commit. A process that must also see
// other processes' commits (a proxy in split mode) `follow`s the store's change log:
// it polls the log from where the log stood when following began and, where the
// backend can push (a MongoDB replica set), takes pushes too. A change may so arrive
// twice; subscribers evict, and evicting twice is harmless. A poll that finds it lost
// its place (rows pruned past it) tells subscribers to clear everything.
import type { MetadataChange } from '../types.js';

/** One entry of a store's change log. */
export interface ChangeEntry {
  seq: number;
  change: MetadataChange;
}

/** What a driver offers the feed. SQLite answers synchronously, MongoDB with promises. */
export interface ChangeLog {
  /** The changes committed by any process after `seq`, oldest first, at most `limit`. */
  changesSince(seq: number, limit: number): ChangeEntry[] | Promise<ChangeEntry[]>;
  /** The highest seq ever issued (0 when none): where a follower starts. */
  lastChangeSeq(): number | Promise<number>;
  /**
   * Pushes every entry any process commits from now on, where the backend can; returns
   * a stop function. A failed push stream reports to `onError` and stops for good.
   */
  watchChanges?(onEntry: (entry: ChangeEntry) => void, onError: (err: unknown) => void): () => void;
}

export interface ChangeSubscriber {
  /** Evicts what the change touches. */
  apply(change: MetadataChange): void;
  /** Evicts everything: the feed lost its place in the log. */
  clear(): void;
}

export interface ChangeFeed {
  /** Returns an unsubscribe. */
  subscribe(subscriber: ChangeSubscriber): () => void;
  /**
   * Also delivers other processes' commits, polling every `pollMs`. Resolves once the
   * starting position is read; a poll that fails reports to `onError` and the next one
   * tries again. A second call while following does nothing.
   */
  follow(options: { pollMs: number; onError(err: unknown): void }): Promise<void>;
  /** Stops following; subscriptions stay. */
  stop(): void;
}

/** Entries read per query while catching up. */
const BATCH = 1000;

export class MetadataChangeFeed implements ChangeFeed {
  readonly #log: ChangeLog;
  readonly #subscribers = new Set<ChangeSubscriber>();
  /** Bumped by every follow() and stop(), so that a poll in flight from an earlier run does not schedule another. */
  #run = 0;
  #following = false;
  #timer: NodeJS.Timeout | null = null;
  #unwatch: (() => void) | null = null;

  constructor(log: ChangeLog) {
    this.#log = log;
  }

  subscribe(subscriber: ChangeSubscriber): () => void {
    this.#subscribers.add(subscriber);
    return () => {
      this.#subscribers.delete(subscriber);
    };
  }

  /**
   * Tells every subscriber; the store calls it after its commit. The change has happened
   * whatever a subscriber does, so one that throws neither skips the others nor fails
   * the write; its error is surfaced as a process warning.
   */
  publish(change: MetadataChange): void {
    for (const subscriber of this.#subscribers) {
      try {
        subscriber.apply(change);
      } catch (err) {
        warnSubscriberThrew(`the ${change.kind} change is committed`, err);
      }
    }
  }

  async follow(options: { pollMs: number; onError(err: unknown): void }): Promise<void> {
    if (this.#following) return;
    this.#following = true;
    const run = ++this.#run;
    // Pushes start before the position is read: a commit in between reaches us by push
    // or by the first poll, never by neither.
    this.#unwatch = this.#log.watchChanges?.((entry) => this.publish(entry.change), options.onError) ?? null;
    let position: number;
    try {
      position = await this.#log.lastChangeSeq();
    } catch (err) {
      this.stop();
      throw err;
    }
    const poll = async (): Promise<void> => {
      try {
        for (;;) {
          const entries = await this.#log.changesSince(position, BATCH);
          // Stopped while the read was on its way (shutdown closes the stores next): nothing more to tell.
          if (this.#run !== run || entries.length === 0) break;
          // A seq missing anywhere (pruned, or read past: a writer that died
          // between taking its seq and writing its row) is a change nobody
          // heard: every cache forgets what it holds.
          let expected = position + 1;
          let gap = false;
          for (const entry of entries) {
            if (entry.seq !== expected) gap = true;
            expected = entry.seq + 1;
          }
          if (gap) this.#clear();
          for (const entry of entries) this.publish(entry.change);
          position = entries[entries.length - 1]!.seq;
          if (entries.length < BATCH) break;
        }
      } catch (err) {
        if (this.#run === run) options.onError(err);
      }
      if (this.#run === run) this.#timer = setTimeout(() => void poll(), options.pollMs);
    };
    if (this.#run === run) this.#timer = setTimeout(() => void poll(), options.pollMs);
  }

  stop(): void {
    this.#run++;
    this.#following = false;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#unwatch?.();
    this.#unwatch = null;
  }

  #clear(): void {
    for (const subscriber of this.#subscribers) {
      try {
        subscriber.clear();
      } catch (err) {
        warnSubscriberThrew('clearing after a gap in the change log', err);
      }
    }
  }
}

function warnSubscriberThrew(context: string, err: unknown): void {
  const warning = new Error(
    `A metadata change listener threw (${context}): ${err instanceof Error ? err.message : String(err)}`,
    { cause: err },
  );
  warning.name = 'MetadataChangeListenerWarning';
  process.emitWarning(warning);
}
