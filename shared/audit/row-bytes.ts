// A batch's encoded rows as UTF-8 bytes in reused chunks, off the V8 heap.
//
// A batch holds its rows for up to a second (the batch interval) and then its
// insert: long enough that every row, held as a string, outlived two scavenges
// and was promoted to the old space, and the batch's insert body (the rows
// joined, a few MB) was a large object there too. Under load that was most of
// what the split proxy promoted (a sampling heap profile of 20 s of `wrk -c64`,
// objects collected by full GCs kept: ~75 % of the sampled bytes, rows and their
// join), and V8 lets the old space grow to a multiple of what it promotes before
// a full GC collects it: the proxy's peak RSS (docs/performance.md, "The split
// proxy's memory"). Written into chunks that are handed back once the batch is
// written, a row's string dies young instead, and the bytes a second of rows
// takes are the same few chunks batch after batch.
//
// A chunk handed to a store's insert must not be written again until that
// insert has settled: the batcher releases a batch's chunks only then.

/** Bytes per chunk: a second of the bench's rows (~4 MB) is about 16 of them. */
const CHUNK_BYTES = 256 * 1024;
/** Spare chunks kept for the next batches (16 MiB); more go back to the allocator. */
const SPARE_CHUNKS = 64;

const spare: Buffer[] = [];

/** UTF-8 takes at most 3 bytes per UTF-16 code unit (a surrogate pair: 4 bytes for 2 units). */
const MAX_UTF8_PER_UNIT = 3;

export class RowBytes {
  readonly #full: Buffer[] = [];
  #chunk: Buffer | null = null;
  #at = 0;
  #released = false;
  /** Rows appended. */
  count = 0;

  /** Appends one encoded row (a line, with its newline); on a throw (no memory) nothing was appended. */
  push(line: string): void {
    let chunk = this.#chunk;
    // The worst case first (no scan of the line); the exact size only when that does not fit.
    if (chunk === null || this.#at + line.length * MAX_UTF8_PER_UNIT > chunk.length) {
      const bytes = Buffer.byteLength(line, 'utf8');
      if (chunk === null || this.#at + bytes > chunk.length) {
        // A row longer than a chunk (a full output can be 64 KiB and more) gets a buffer of its own size, not kept for reuse.
        const next = bytes > CHUNK_BYTES ? Buffer.allocUnsafeSlow(bytes) : (spare.pop() ?? Buffer.allocUnsafeSlow(CHUNK_BYTES));
        if (chunk !== null && this.#at > 0) this.#full.push(chunk.subarray(0, this.#at));
        else if (chunk !== null) giveBack(chunk);
        chunk = this.#chunk = next;
        this.#at = 0;
      }
    }
    this.#at += chunk.write(line, this.#at, 'utf8');
    this.count += 1;
  }

  /** The rows' bytes, in order, as views of the chunks (valid until release()). */
  parts(): Buffer[] {
    if (this.#released) throw new Error('RowBytes: read after release');
    return this.#chunk === null || this.#at === 0 ? this.#full.slice() : [...this.#full, this.#chunk.subarray(0, this.#at)];
  }

  /** The rows as one string (tests). */
  toString(): string {
    return Buffer.concat(this.parts()).toString('utf8');
  }

  /** Hands the chunks back for later batches: nothing may read parts() after this. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    const chunks = this.#chunk === null ? this.#full : [...this.#full, this.#chunk];
    for (const view of chunks) giveBack(view);
    this.#full.length = 0;
    this.#chunk = null;
    this.#at = 0;
  }
}

/** A chunk (or a view from its start) back to the spare list; a row's own oversize buffer is left to the GC. */
function giveBack(view: Buffer): void {
  if (view.byteOffset === 0 && view.buffer.byteLength === CHUNK_BYTES && spare.length < SPARE_CHUNKS) spare.push(Buffer.from(view.buffer, 0, CHUNK_BYTES));
}
