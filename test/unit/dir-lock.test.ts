// shared/dir-lock.ts: one holder at a time, whoever starts at the same moment.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { DirLock } from '../../shared/dir-lock.js';

const MODULE = new URL('../../shared/dir-lock.ts', import.meta.url).href;

function lockDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-dir-lock-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A child that tries the lock once, says whether it got it, and keeps it until
 * `release` ends its stdin: every contender of a round reports while the
 * others still hold what they got. (A fixed hold let a child that a loaded
 * machine started late find the lock free and take it: two "held" in a round.)
 */
function contender(dir: string): { outcome: Promise<'held' | 'refused' | string>; release(): Promise<void> } {
  const child = spawn(process.execPath, [...process.execArgv, '--input-type=module', '-e',
    `const { DirLock } = await import(${JSON.stringify(MODULE)});
     try { DirLock.acquire(${JSON.stringify(dir)}, 'test.lockdb', 'test dir'); console.log('held'); }
     catch (err) { console.log(/in use by/.test(err.message) ? 'refused' : 'error: ' + err.message); }
     process.stdin.resume(); process.stdin.on('end', () => process.exit(0));`], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const outcome = new Promise<string>((resolve) => {
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      if (out.includes('\n')) resolve(out.trim());
    });
    void exited.then(() => resolve(out.trim() || 'exited without an answer'));
  });
  return {
    outcome,
    release() {
      child.stdin!.end();
      return exited;
    },
  };
}

t.test('processes that start at the same moment: exactly one holds the lock', async (t) => {
  for (let round = 0; round < 8; round++) {
    const dir = lockDir(t);
    const contenders = Array.from({ length: 4 }, () => contender(dir));
    const outcomes = await Promise.all(contenders.map((c) => c.outcome));
    await Promise.all(contenders.map((c) => c.release()));
    t.equal(outcomes.filter((o) => o === 'held').length, 1, `round ${round}: one holder (${outcomes.join(', ')})`);
    t.equal(outcomes.filter((o) => o === 'refused').length, 3, `round ${round}: the others refused`);
  }
});

t.test('a lock file that is not a database: an error that says what to do', async (t) => {
  const dir = lockDir(t);
  writeFileSync(join(dir, 'test.lockdb'), Buffer.alloc(4096));
  t.throws(() => DirLock.acquire(dir, 'test.lockdb', 'test dir'), /is not one this service wrote; remove it/);
});

t.test('release lets the next holder in; releasing twice is harmless', async (t) => {
  const dir = lockDir(t);
  const first = DirLock.acquire(dir, 'test.lockdb', 'test dir');
  first.release();
  first.release();
  const second = DirLock.acquire(dir, 'test.lockdb', 'test dir');
  t.teardown(() => second.release());
  t.pass('taken again');
});

t.test('a holder file that cannot be replaced (a dead holder\'s, or anything else in its place) stops no start', async (t) => {
  const dir = lockDir(t);
  mkdirSync(join(dir, 'test.lockdb.holder')); // neither removable as a file nor writable
  const lock = DirLock.acquire(dir, 'test.lockdb', 'test dir');
  t.teardown(() => lock.release());
  t.pass('taken');
});

t.test('a lock nothing refers to any more is still held: the garbage collector does not let it go', async (t) => {
  const dir = lockDir(t);
  // The holder keeps no reference to its lock, and collects its garbage, twice.
  const holder = spawn(process.execPath, [...process.execArgv, '--expose-gc', '--input-type=module', '-e',
    `const { DirLock } = await import(${JSON.stringify(MODULE)});
     DirLock.acquire(${JSON.stringify(dir)}, 'test.lockdb', 'test dir');
     await new Promise((resolve) => setTimeout(resolve, 50)); globalThis.gc(); globalThis.gc();
     console.log('collected'); setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => holder.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    holder.stdout!.on('data', (chunk: Buffer) => { if (chunk.toString().includes('collected')) resolve(); });
    holder.once('exit', (code) => reject(new Error(`the holder exited (${code})`)));
  });
  t.throws(() => DirLock.acquire(dir, 'test.lockdb', 'test dir'), new RegExp(`in use by process ${holder.pid} on host`), 'still the holder\'s');
});
