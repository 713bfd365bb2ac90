// The exchanges started and not yet done, for shutdown to end (pipeline.ts).
//
// Not a Set: when V8 grows or compacts a Set's hash table it keeps the old
// table, entries and all, linked to the new one. Once one table has reached the
// old space, that link keeps each next table, and the exchanges in it, alive
// through every scavenge until the next full GC: under load nearly every
// exchange was promoted with everything it points to (~1 KB a call of the 2.3
// promoted, a scavenge ~3.7 against ~2.1 µs a call: docs/performance.md,
// garbage collection). Slots of an array, cleared when an exchange leaves,
// hold nothing stale.
import type { ProxyExchange } from './exchange.js';

export class InFlight {
  readonly #slots: (ProxyExchange | undefined)[] = [];
  /** Cleared slots, reused first (numbers: nothing for the GC to follow). */
  readonly #free: number[] = [];
  #size = 0;

  get size(): number {
    return this.#size;
  }

  add(ex: ProxyExchange): void {
    if (ex.inFlightSlot >= 0) return;
    const slot = this.#free.pop() ?? this.#slots.length;
    this.#slots[slot] = ex;
    ex.inFlightSlot = slot;
    this.#size++;
  }

  delete(ex: ProxyExchange): void {
    const slot = ex.inFlightSlot;
    if (slot < 0 || this.#slots[slot] !== ex) return;
    this.#slots[slot] = undefined;
    this.#free.push(slot);
    ex.inFlightSlot = -1;
    this.#size--;
  }

  /** A copy: ending an exchange removes it while the caller goes through them. */
  list(): ProxyExchange[] {
    return this.#slots.filter((ex): ex is ProxyExchange => ex !== undefined);
  }
}
