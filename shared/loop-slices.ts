// Long synchronous loops that share the event loop with the proxy (all-in-one):
// replay deciding groups, verification checking seals and building roots. Each
// gives the loop its turn once a slice of time has passed since the last.

/** How long such a loop holds the event loop before it gives way. */
export const LOOP_SLICE_MS = 10;

export class LoopSlices {
  #started = performance.now();

  /** Resolves at once within the slice; past it, after the event loop's next turn. */
  async turn(): Promise<void> {
    if (performance.now() - this.#started < LOOP_SLICE_MS) return;
    await new Promise((resolve) => setImmediate(resolve));
    this.#started = performance.now();
  }
}
