// The audit journal: every record's encoded line reaches local disk (the page
// cache; a process kill is not a power cut) before the append returns, so a
// SIGKILL loses no answered call. The proxy queues a call's record while it ends
// the call's response inside uWS's cork, and uWS sends the corked bytes as the
// cork returns: a line written later in the turn (as it once was, one write(2)
// per turn on a setImmediate) let a client hold an answer whose record a kill
// then lost (seen under load: 5 of 760 calls). So each line is one write(2),
// about 1.8 µs, to one segment file per audit batch. When the batcher
// seals a batch, a marker line naming its deduplication token closes the segment
// (written at once, before the batch's insert can start); once the batch is in
// ClickHouse or the spool, its segment is deleted. On the next start, segments
// left behind become spool batches: a sealed one with its own token (so rows
// ClickHouse already took are not written twice), an unsealed one with a fresh
// token (its insert had not begun). The journal lives in the process's spool
// directory and shares its lock.
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const SEGMENT = /^(\d{12})\.journal$/;
const SEAL_PREFIX = '#sealed ';

/** A batch found in the journal at start, to be handed to the spool. */
export interface RecoveredBatch {
  segment: string;
  lines: string[];
  token: string;
  /** Sealed: its insert may have begun, so it keeps the token it had. */
  sealed: boolean;
}

export class AuditJournal {
  readonly dir: string;
  #fd: number;
  #segment: string;
  #nextSeq: number;
  #closed = false;
  /** Counters for /metrics and the bench: writes and lines written. */
  readonly stats = { writes: 0, lines: 0 };

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

  /** Writes one encoded line (ending in a newline) before returning. */
  append(line: string): void {
    this.#write(line);
    this.stats.lines += 1;
  }

  /**
   * Closes the current segment with the batch's token (written now) and starts
   * the next. Returns the closed segment's name, for
   * `forget` once the batch is written or spooled.
   */
  seal(token: string): string {
    this.#write(`${SEAL_PREFIX}${token}\n`);
    const sealed = this.#segment;
    closeSync(this.#fd);
    this.#openSegment();
    return sealed;
  }

  /** The batch of this segment is in ClickHouse or the spool: its journal copy goes. */
  forget(segment: string): void {
    try {
      unlinkSync(join(this.dir, segment));
    } catch {
      // already gone
    }
  }

  /** Closes; the open segment stays if it holds lines. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeSync(this.#fd);
  }

  #write(text: string): void {
    if (this.#closed) return;
    const data = Buffer.from(text, 'utf8');
    let written = 0;
    while (written < data.length) written += writeSync(this.#fd, data, written);
    this.stats.writes += 1;
  }

  #openSegment(): void {
    this.#segment = `${String(this.#nextSeq++).padStart(12, '0')}.journal`;
    this.#fd = openSync(join(this.dir, this.#segment), 'a', 0o600);
  }
}

/** A segment's complete lines and its seal, if any. A torn last line (a kill mid-write) is dropped. */
function readSegment(file: string): { lines: string[]; token: string; sealed: boolean } {
  const text = readFileSync(file, 'utf8');
  const end = text.lastIndexOf('\n');
  const lines: string[] = [];
  let token: string | null = null;
  if (end !== -1) {
    for (const line of text.slice(0, end).split('\n')) {
      if (line.startsWith(SEAL_PREFIX)) token = line.slice(SEAL_PREFIX.length);
      else if (line.length > 0) lines.push(`${line}\n`);
    }
  }
  return { lines, token: token ?? randomUUID(), sealed: token !== null };
}
