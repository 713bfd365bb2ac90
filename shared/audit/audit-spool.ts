// The on-disk audit spool: batches that could not be written to ClickHouse wait
// here (fsynced, one file per batch, in audit-codec.ts's spool file format) and
// are replayed oldest first, each with the deduplication token it was first tried with, so a
// replay after a partial failure writes nothing twice. A spool belongs to one
// process at a time (a lock file holds its pid); the next start of the same
// process (same SPOOL_DIR) replays what the last one left.
import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, statSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSpoolFile, encodeSpoolFile, parseSpoolFileName, spoolFileName } from './audit-codec.js';
import { isProcessAlive } from '../pid.js';

export interface SpooledBatch {
  file: string;
  token: string;
  bytes: number;
}

export class AuditSpool {
  readonly dir: string;
  readonly maxBytes: number;
  #files: SpooledBatch[] = [];
  #bytes = 0;
  #nextSeq = 0;
  #lockFile: string;

  private constructor(dir: string, maxBytes: number) {
    this.dir = dir;
    this.maxBytes = maxBytes;
    this.#lockFile = join(dir, 'spool.lock');
  }

  /** Opens (and locks) the spool directory, finding the batches a previous run left. */
  static open(dir: string, maxBytes: number): AuditSpool {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const spool = new AuditSpool(dir, maxBytes);
    spool.#lock();
    for (const name of readdirSync(dir).sort()) {
      if (name.endsWith('.tmp')) {
        unlinkSync(join(dir, name)); // a write that never completed was never acknowledged
        continue;
      }
      const parsed = parseSpoolFileName(name);
      if (parsed === null) continue;
      const bytes = statSync(join(dir, name)).size;
      spool.#files.push({ file: name, token: parsed.token, bytes });
      spool.#bytes += bytes;
      spool.#nextSeq = Math.max(spool.#nextSeq, parsed.seq + 1);
    }
    return spool;
  }

  #lock(): void {
    try {
      const fd = openSync(this.#lockFile, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = Number(readFileSync(this.#lockFile, 'utf8'));
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isProcessAlive(holder)) {
      throw new Error(`audit spool ${this.dir} is in use by process ${holder}; give each process its own SPOOL_DIR`);
    }
    writeFileSync(this.#lockFile, String(process.pid), { mode: 0o600 }); // a stale lock of a dead process
  }

  /** Batches waiting, oldest first. */
  get batches(): readonly SpooledBatch[] {
    return this.#files;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get full(): boolean {
    return this.#bytes >= this.maxBytes;
  }

  /** Writes a batch durably (fsync of the file and the directory). Throws when the spool is full. */
  async write(lines: readonly (string | Uint8Array)[], token: string): Promise<void> {
    if (this.full) throw new Error('audit spool is full');
    const payload = await encodeSpoolFile(lines);
    const name = spoolFileName(this.#nextSeq++, token);
    const tmp = join(this.dir, `${name}.tmp`);
    const handle = await open(tmp, 'wx', 0o600);
    try {
      await handle.writeFile(payload);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, join(this.dir, name));
    await syncDir(this.dir);
    this.#files.push({ file: name, token, bytes: payload.length });
    this.#bytes += payload.length;
  }

  /** The batch's encoded rows, concatenated, ready for insertEncoded. */
  async read(batch: SpooledBatch): Promise<string> {
    return decodeSpoolFile(await readFile(join(this.dir, batch.file)));
  }

  /** The batch was written to the store: forget it. */
  async remove(batch: SpooledBatch): Promise<void> {
    await unlink(join(this.dir, batch.file)).catch(() => undefined);
    const i = this.#files.indexOf(batch);
    if (i >= 0) this.#files.splice(i, 1);
    this.#bytes -= batch.bytes;
  }

  close(): void {
    try {
      if (readFileSync(this.#lockFile, 'utf8') === String(process.pid)) unlinkSync(this.#lockFile);
    } catch {
      // already gone
    }
  }
}

/** fsync of the directory (the rename is durable), on the libuv pool, not the event loop. */
async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

