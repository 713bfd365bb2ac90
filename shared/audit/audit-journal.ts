// The audit journal: every record's encoded line reaches local disk (the page
// cache; a process kill is not a power cut) before the answer of its call can
// leave, so a SIGKILL loses no answered call. Lines are gathered and written
// together, one write(2) per event-loop turn (on a setImmediate), and a call's
// last bytes wait for that write: the proxy queues the record, then hands its
// last send to afterWrite, which runs it once the line is written. One write a
// call instead cost ~13 µs of a small GET's event loop under load
// (docs/performance.md), a tenth of it; one per turn carries about a dozen lines
// there. Lines go to one segment file per audit batch. When the batcher
// closes a batch, its segment is cut (the lines still gathered written, the next
// segment opened); once the batch's seals are made, they and a marker line naming
// its deduplication token are appended to it, before the batch's insert can
// start; once the batch is in ClickHouse or the spool, its segment is deleted.
// On the next start, segments left behind become spool batches: a sealed one
// with its own token (so rows ClickHouse already took are not written twice), an
// unsealed one with a token of its lines (its insert had not begun). The journal lives
// in the process's spool directory and shares its lock.
import { createHash } from 'node:crypto';
import { closeSync, fstatSync, ftruncateSync, mkdirSync, openSync, readFileSync, readdirSync, truncateSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const SEGMENT = /^(\d{12})\.journal$/;
const SEAL_PREFIX = '#sealed ';

/** What waits for the journal: a call's held last send (the proxy's exchange). */
export interface JournalWaiter {
  journaled(): void;
}

/** A batch found in the journal at start, to be handed to the spool. */
export interface RecoveredBatch {
  segment: string;
  lines: string[];
  token: string;
  /** Sealed: its insert may have begun, so it keeps the token it had. */
  sealed: boolean;
  /** The segment's bytes up to its last complete line (a torn tail after it is not part of the batch). */
  bytes: number;
  /** A kill cut its last line short: bytes after `bytes`. */
  torn: boolean;
}

export class AuditJournal {
  readonly dir: string;
  #fd: number;
  #segment: string;
  /** Bytes of whole lines in the open segment: a failed write is cut back to them. */
  #segmentBytes = 0;
  /** A failed write could not be cut back: nothing more goes into this segment (its torn line stays its last). */
  #segmentBroken = false;
  #nextSeq: number;
  #closed = false;
  /** Lines appended and not yet written, and what waits for them. */
  #pending: string[] = [];
  #waiting: JournalWaiter[] = [];
  #scheduled: NodeJS.Immediate | null = null;
  /** Counters for /metrics and the bench: writes, lines written, failed writes. */
  readonly stats = { writes: 0, lines: 0, failures: 0 };
  /** A write that failed (the lines stay in the batch in memory; the answers waiting still go). */
  onError: ((err: unknown) => void) | null = null;

  private constructor(dir: string, nextSeq: number) {
    this.dir = dir;
    this.#nextSeq = nextSeq;
    this.#segment = '';
    this.#fd = -1;
    this.#openSegment();
  }

  /**
   * Opens the journal in `dir`, returning what an earlier process left (oldest
   * first). Call `forget(batch.segment)` for each once it is safe in the spool.
   */
  static open(dir: string): { journal: AuditJournal; recovered: RecoveredBatch[] } {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const names = readdirSync(dir).filter((name) => SEGMENT.test(name)).sort();
    const recovered: RecoveredBatch[] = [];
    for (const name of names) {
      const batch = readSegment(join(dir, name));
      if (batch.lines.length === 0) unlinkSync(join(dir, name));
      else recovered.push({ segment: name, ...batch });
    }
    const last = names.length > 0 ? Number(SEGMENT.exec(names[names.length - 1]!)![1]) : -1;
    return { journal: new AuditJournal(dir, last + 1), recovered };
  }

  /** Gathers one encoded line (ending in a newline); it is written before the turn ends. */
  append(line: string): void {
    if (this.#closed) return;
    this.#pending.push(line);
    this.stats.lines += 1;
    this.#scheduled ??= setImmediate(this.flush);
  }

  /** Runs `waiter.journaled()` once every line appended so far is written: now, when none waits (or the journal is closed). */
  afterWrite(waiter: JournalWaiter): void {
    if (this.#pending.length === 0 || this.#closed) waiter.journaled();
    else this.#waiting.push(waiter);
  }

  /**
   * Closes the current segment with the batch's token (written now) and starts
   * the next. Returns the closed segment's name, for
   * `forget` once the batch is written or spooled.
   */
  seal(token: string): string {
    if (this.#closed) return '';
    this.#pending.push(`${SEAL_PREFIX}${token}\n`); // written with the gathered lines, in cut's one write
    return this.cut();
  }

  /**
   * Writes what is gathered, closes the current segment without a seal and
   * starts the next; returns the closed one's name ('' after close()). Its
   * batch's seal lines and token follow with `finish` once they are made: a
   * kill in between leaves an unsealed segment, which the next start reads as
   * a batch whose insert had not begun (it cannot begin before `finish`).
   */
  cut(): string {
    if (this.#closed) return ''; // after close(): nothing of the batch was journaled (forget('') does nothing)
    this.#writePending();
    const closed = this.#segment;
    try {
      if (this.#fd >= 0) closeSync(this.#fd);
    } catch (err) {
      this.onError?.(err);
    }
    this.#fd = -1;
    this.#openSegment();
    return closed;
  }

  /** Appends a cut segment's seal lines, then the marker naming its batch's token, in one write. A failure is reported (the batch is in memory). */
  finish(segment: string, sealLines: readonly string[], token: string): void {
    if (segment === '' || this.#closed) return;
    let fd = -1;
    try {
      fd = openSync(join(this.dir, segment), 'a', 0o600);
      writeAll(fd, Buffer.from(`${sealLines.join('')}${SEAL_PREFIX}${token}\n`, 'utf8'));
      this.stats.writes += 1;
    } catch (err) {
      this.stats.failures += 1;
      this.onError?.(err);
    } finally {
      if (fd >= 0) closeSync(fd);
    }
  }

  /**
   * An unsealed segment found at start: its torn tail (if any) cut off, then
   * `finish`, so that a later start reads it sealed with this token.
   */
  sealRecovered(batch: RecoveredBatch, sealLines: readonly string[]): void {
    if (batch.sealed || this.#closed) return;
    try {
      if (batch.torn) truncateSync(join(this.dir, batch.segment), batch.bytes);
    } catch (err) {
      this.stats.failures += 1;
      this.onError?.(err);
      return;
    }
    this.finish(batch.segment, sealLines, batch.token);
  }

  /** The batch of this segment is in ClickHouse or the spool: its journal copy goes. */
  forget(segment: string): void {
    if (segment === '') return;
    try {
      unlinkSync(join(this.dir, segment));
    } catch {
      // already gone
    }
  }

  /** Writes what is gathered and closes; the open segment stays if it holds lines. */
  close(): void {
    if (this.#closed) return;
    this.flush();
    this.#closed = true;
    if (this.#fd >= 0) closeSync(this.#fd);
    this.#fd = -1;
  }

  /** Writes what is gathered and runs what waited for it (the turn's setImmediate does this). */
  readonly flush = (): void => {
    if (this.#scheduled !== null) {
      clearImmediate(this.#scheduled);
      this.#scheduled = null;
    }
    this.#writePending();
    const waiting = this.#waiting;
    if (waiting.length === 0) return;
    this.#waiting = [];
    // One waiter that throws (a bug in its send) must not leave the others' answers held.
    for (const waiter of waiting) {
      try {
        waiter.journaled();
      } catch (err) {
        this.onError?.(err);
      }
    }
  };

  /** One write(2) for every gathered line. A failure is reported, not thrown: the lines are still in their batch in memory. */
  #writePending(): void {
    const pending = this.#pending;
    if (pending.length === 0 || this.#closed) return;
    this.#pending = [];
    try {
      if (this.#fd < 0) throw new Error('the journal has no open segment (its last could not be opened)');
      if (this.#segmentBroken) throw new Error('the journal segment holds a torn line from a failed write; its batch is written from memory');
      const data = Buffer.from(pending.length === 1 ? pending[0]! : pending.join(''), 'utf8');
      writeAll(this.#fd, data);
      this.#segmentBytes += data.length;
      this.stats.writes += 1;
    } catch (err) {
      this.stats.failures += 1;
      this.onError?.(err);
      this.#cutBack();
    }
  }

  /**
   * A write that failed part way (a full disk, EIO) left part of a line: cut back
   * to the whole lines before it, or lines written after it (space freed) would
   * follow the fragment, and the next start would read the two as one line.
   * When the cut fails too, the segment takes no more lines.
   */
  #cutBack(): void {
    if (this.#fd < 0 || this.#segmentBroken) return;
    try {
      if (fstatSync(this.#fd).size !== this.#segmentBytes) ftruncateSync(this.#fd, this.#segmentBytes);
    } catch (err) {
      this.#segmentBroken = true;
      this.onError?.(err);
    }
  }

  /** The next segment; one that cannot be opened is reported, and the writes until the next seal fail (reported) rather than throw. */
  #openSegment(): void {
    this.#segmentBytes = 0;
    this.#segmentBroken = false;
    this.#segment = `${String(this.#nextSeq++).padStart(12, '0')}.journal`;
    try {
      this.#fd = openSync(join(this.dir, this.#segment), 'a', 0o600);
    } catch (err) {
      this.#fd = -1;
      if (this.onError === null) throw err; // at open(): the service does not start without its journal
      this.onError(err);
    }
  }
}

/** write(2) until all of `data` is in the file (a short write is continued, not lost). */
function writeAll(fd: number, data: Buffer): void {
  let written = 0;
  while (written < data.length) written += writeSync(fd, data, written);
}

/** A segment's complete lines and its seal, if any. A torn last line (a kill mid-write) is dropped. */
function readSegment(file: string): Omit<RecoveredBatch, 'segment'> {
  const raw = readFileSync(file);
  const bytes = raw.lastIndexOf(0x0a) + 1;
  const text = raw.toString('utf8', 0, bytes);
  const end = text.lastIndexOf('\n');
  const lines: string[] = [];
  let token: string | null = null;
  if (end !== -1) {
    for (const line of text.slice(0, end).split('\n')) {
      if (line.startsWith(SEAL_PREFIX)) token = line.slice(SEAL_PREFIX.length);
      else if (line.length > 0) lines.push(`${line}\n`);
    }
  }
  return { lines, token: token ?? tokenOfLines(raw.subarray(0, bytes)), sealed: token !== null, bytes, torn: raw.length > bytes };
}

/**
 * An unsealed segment's token, from its complete lines: the same at every start
 * that finds it, so a start killed after spooling it, before forgetting it, is
 * followed by one that sees the spool has it (journal-recovery.ts). Its batch's
 * insert had not begun, so no token of it is in ClickHouse yet. UUID-shaped, as
 * spool file names want.
 */
function tokenOfLines(bytes: Buffer): string {
  const hex = createHash('sha256').update('unsealed journal segment\n').update(bytes).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
