// An exclusive lock on a directory that the kernel holds for the process: it is
// let go when the process exits, however it ends, and no other process, in this
// container or another on the same host and volume, can take it meanwhile.
//
// A lock file naming a pid could not promise that: two containers sharing a
// volume may both run their node as pid 1 (each took the other's lock as its
// own, left by its last run), a pid of another PID namespace reads as dead, and
// the file is empty between its creation and the pid's write, when a second
// start took it over. Node has no flock(2), so the lock is SQLite's: a database
// file in the directory held in EXCLUSIVE locking mode (fcntl(2) locks, which
// SQLite also keeps between two connections of one process). better-sqlite3 is
// the metadata store's driver already. `<name>.holder` beside it says who holds
// it, for the error a second process gets.
//
// Nothing else may open the lock file: closing any descriptor of it drops every
// fcntl lock this process holds on it (POSIX). And the lock is as good as the
// filesystem's: local disks and overlayfs, and NFS with its lock manager; not an
// NFS mount with `nolock`, SMB with `nobrl`, or an object-store FUSE mount, where
// two hosts would both get it.
import Database from 'better-sqlite3';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';

/** How long a start waits for a lock that another process is taking or holds (ms). */
const BUSY_WAIT_MS = 500;

/**
 * The databases of the locks held, until release(): a lock is the process's
 * until it lets it go, even when nothing else refers to it. better-sqlite3
 * closes a database the garbage collector takes, and the lock went with it.
 */
const held = new Set<Database.Database>();

export class DirLock {
  readonly #db: Database.Database;
  readonly #holderFile: string;

  private constructor(db: Database.Database, holderFile: string) {
    this.#db = db;
    this.#holderFile = holderFile;
  }

  /** Takes `dir`'s lock `name`, or throws (`what` names the directory in the error, `hint` ends it) while another process, or this one, holds it. */
  static acquire(dir: string, name: string, what: string, hint = ''): DirLock {
    const holderFile = join(dir, `${name}.holder`);
    // A short busy wait: two processes starting at once may each hold a shared
    // lock on the way to the exclusive one; SQLite refuses one of them at once
    // (it would deadlock), which closes, and the other then gets it.
    let db: Database.Database;
    try {
      db = new Database(join(dir, name), { timeout: BUSY_WAIT_MS });
    } catch (err) {
      // A directory this process cannot write: "unable to open database file" named neither.
      throw new Error(`${what} ${dir}: cannot open its lock file ${name} (${(err as Error).message}): the directory must exist and be writable by this process`, { cause: err });
    }
    try {
      db.pragma('locking_mode = EXCLUSIVE');
      // The first write takes the exclusive lock; EXCLUSIVE mode keeps it after the commit.
      db.exec('BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS held (n INTEGER); COMMIT');
    } catch (err) {
      db.close();
      const code = (err as { code?: string }).code;
      if (code === 'SQLITE_NOTADB') throw new Error(`${what} ${dir}: its lock file ${name} is not one this service wrote; remove it and start again`, { cause: err });
      if (code !== 'SQLITE_BUSY') throw err;
      let holder = 'another process';
      try {
        holder = readFileSync(holderFile, 'utf8').trim() || holder;
      } catch {
        // written just after the lock is taken: not there yet
      }
      throw new Error(`${what} ${dir} is in use by ${holder}${hint}`);
    }
    try {
      // Only for the error a second process gets: a holder file that cannot be
      // replaced (a dead holder's, left read-only) stops no start.
      rmSync(holderFile, { force: true });
      writeFileSync(holderFile, `process ${process.pid} on host ${hostname()}\n`, { mode: 0o600 });
    } catch {
      // the next process is told "another process"
    }
    held.add(db);
    return new DirLock(db, holderFile);
  }

  /** Lets the lock go (the process's exit does too). */
  release(): void {
    if (!this.#db.open) return;
    try {
      rmSync(this.#holderFile, { force: true });
    } catch {
      // not a file it could remove: it named no one
    }
    held.delete(this.#db);
    this.#db.close();
  }
}
