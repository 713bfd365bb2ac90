// The on-disk audit spool: batches that could not be written to ClickHouse wait
// here (fsynced, one file per batch, in audit-codec.ts's spool file format) and
// are replayed oldest first, each with the deduplication token it was first tried with, so a
// replay after a partial failure writes nothing twice. A spool belongs to one
// process at a time (a kernel-held lock, shared/dir-lock.ts); the next start of
// the same process (same SPOOL_DIR) replays what the last one left.
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSpoolFile, encodeSpoolFile, parseSpoolFileName, spoolFileName } from './audit-codec.js';
import { DirLock } from '../dir-lock.js';
import { isProcessAlive } from '../pid.js';

export interface SpooledBatch {
  file: string;
  token: string;
  bytes: number;
}

/** The lock's database file in the spool directory (spool.lock, a pid, before 2026-11-27). */
const LOCK_FILE = 'spool.lockdb';
const LEGACY_LOCK_FILE = 'spool.lock';
/** Where spooled batches that cannot be read are moved (setAside). */
export const UNREADABLE_DIR = 'unreadable';

/**
 * A version before the kernel-held lock names itself in spool.lock and does not
 * see spool.lockdb: while such a process runs on this directory (a rolling
 * upgrade on a shared volume), this one does not start. Its lock left by a
 * process that is gone is removed.
 */
function refuseLegacyHolder(dir: string): void {
  const file = join(dir, LEGACY_LOCK_FILE);
  let holder: number;
  try {
    holder = Number(readFileSync(file, 'utf8'));
  } catch {
    return; // none
  }
  if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isProcessAlive(holder)) {
    throw new Error(`audit spool ${dir} is in use by process ${holder} (an earlier version's ${LEGACY_LOCK_FILE}); give each process its own SPOOL_DIR`);
  }
  rmSync(file, { force: true });
}

/** A spooled file that is gone or damaged: no retry will read it. */
export class SpoolFileUnreadable extends Error {
  constructor(file: string, cause: unknown) {
    super(`spooled batch ${file} cannot be read: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'SpoolFileUnreadable';
  }
}

export class AuditSpool {
  readonly dir: string;
  readonly maxBytes: number;
  #files: SpooledBatch[] = [];
  #bytes = 0;
  #nextSeq = 0;
  readonly #lock: DirLock;

  private constructor(dir: string, maxBytes: number, lock: DirLock) {
    this.dir = dir;
    this.maxBytes = maxBytes;
    this.#lock = lock;
  }

  /** Opens (and locks) the spool directory, finding the batches a previous run left. */
  static open(dir: string, maxBytes: number): AuditSpool {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const spool = new AuditSpool(dir, maxBytes, DirLock.acquire(dir, LOCK_FILE, 'audit spool', '; give each process its own SPOOL_DIR'));
    try {
      refuseLegacyHolder(dir);
    } catch (err) {
      spool.close();
      throw err;
    }
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

  /**
   * Writes a batch durably (fsync of the file and the directory). Throws when the
   * spool is full, unless `bounded` is false: records already on this disk
   * elsewhere (a killed process's journal, forgotten once spooled) take no more
   * room here, and must not wait for a restart because the spool filled.
   */
  async write(lines: readonly (string | Uint8Array)[], token: string, bounded = true): Promise<void> {
    if (bounded && this.full) throw new Error('audit spool is full');
    const payload = await encodeSpoolFile(lines);
    const name = spoolFileName(this.#nextSeq++, token);
    const tmp = join(this.dir, `${name}.tmp`);
    const handle = await open(tmp, 'wx', 0o600);
    try {
      try {
        await handle.writeFile(payload);
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(tmp, join(this.dir, name));
    } catch (err) {
      // A part written to a full or failing disk: gone, or every retry leaves
      // another, holding the space the journal and the next try need.
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
    await syncDir(this.dir);
    this.#files.push({ file: name, token, bytes: payload.length });
    this.#bytes += payload.length;
  }

  /**
   * The batch's encoded rows, concatenated, ready for insertEncoded. A file that
   * is gone or does not decode throws SpoolFileUnreadable; a read that fails
   * otherwise (EMFILE, EIO) throws as it failed: it may work next time.
   */
  async read(batch: SpooledBatch): Promise<string> {
    let payload: Buffer;
    try {
      payload = await readFile(join(this.dir, batch.file));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new SpoolFileUnreadable(batch.file, err);
      throw err;
    }
    try {
      return await decodeSpoolFile(payload);
    } catch (err) {
      throw new SpoolFileUnreadable(batch.file, err);
    }
  }

  /**
   * A batch that cannot be read (a damaged file): moved to UNREADABLE_DIR for an
   * operator, kept, never deleted, so that the batches behind it are replayed.
   */
  async setAside(batch: SpooledBatch): Promise<string> {
    const aside = join(this.dir, UNREADABLE_DIR);
    await mkdir(aside, { recursive: true, mode: 0o700 });
    try {
      await rename(join(this.dir, batch.file), join(aside, batch.file));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      // Removed by hand: nothing to keep.
    }
    await syncDir(this.dir);
    this.#forget(batch);
    return join(aside, batch.file);
  }

  /** The batch was written to the store: forget it. */
  async remove(batch: SpooledBatch): Promise<void> {
    await unlink(join(this.dir, batch.file)).catch(() => undefined);
    this.#forget(batch);
  }

  #forget(batch: SpooledBatch): void {
    const i = this.#files.indexOf(batch);
    if (i === -1) return;
    this.#files.splice(i, 1);
    this.#bytes -= batch.bytes;
  }

  /** Lets the spool's lock go: another process may open it. */
  close(): void {
    this.#lock.release();
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

