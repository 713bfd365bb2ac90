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
import Database from 'better-sqlite3';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';

export class DirLock {
  readonly #db: Database.Database;
  readonly #holderFile: string;

  private constructor(db: Database.Database, holderFile: string) {
    this.#db = db;
    this.#holderFile = holderFile;
  }

  /** Takes `dir`'s lock `name`, or throws (`what` names the directory in the error) while another process, or this one, holds it. */
  static acquire(dir: string, name: string, what: string): DirLock {
    const holderFile = join(dir, `${name}.holder`);
    const db = new Database(join(dir, name), { timeout: 0 });
    try {
      db.pragma('locking_mode = EXCLUSIVE');
      // The first write takes the exclusive lock; EXCLUSIVE mode keeps it after the commit.
      db.exec('BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS held (n INTEGER); COMMIT');
    } catch (err) {
      db.close();
      if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
      let holder = 'another process';
      try {
        holder = readFileSync(holderFile, 'utf8').trim() || holder;
      } catch {
        // written just after the lock is taken: not there yet
      }
      throw new Error(`${what} ${dir} is in use by ${holder}; give each process its own`);
    }
    writeFileSync(holderFile, `process ${process.pid} on host ${hostname()}\n`, { mode: 0o600 });
    return new DirLock(db, holderFile);
  }

  /** Lets the lock go (the process's exit does too). */
  release(): void {
    if (!this.#db.open) return;
    rmSync(this.#holderFile, { force: true });
    this.#db.close();
  }
}
