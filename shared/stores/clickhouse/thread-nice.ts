// The embedded ClickHouse (chDB, all-in-one) parses, writes and merges its
// parts on threads it starts in the guard's own process. On a machine with few
// cores a batch's insert, once a second, took the cores from the event loop for
// up to ~60 ms at a time, and every call that arrived meanwhile waited: the
// fixed-rate bench's p99.9 (docs/performance.md, "The embedded engine's threads
// niced"). The engine's threads run at a lower priority (a higher nice value).
// Node's own threads (the main thread, V8's helpers, libuv's pool) keep theirs:
// niced too, V8's garbage-collection helpers left more of their work to the main
// thread, and under a closed load the guard did 10–15 % fewer calls. Linux only
// (thread ids in /proc/self/task); elsewhere, and with nice 0, nothing is done.
import { readdirSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { getPriority, setPriority } from 'node:os';

function threadIds(): number[] {
  try {
    return readdirSync('/proc/self/task').map(Number);
  } catch {
    return [];
  }
}

/**
 * To call before the engine is loaded: returns what gives every thread started
 * since (the engine's, and those they start, which inherit it anyway) the nice
 * value `nice`. Called once the engine is loaded and after each insert.
 */
export async function engineThreadNicer(nice: number): Promise<() => void> {
  if (nice === 0 || process.platform !== 'linux') return () => undefined;
  // libuv starts its whole pool with the first work it is given: give it some
  // now, so that its threads are counted as Node's.
  await stat('/proc/self');
  const own = new Set(threadIds());
  return () => {
    for (const tid of threadIds()) {
      if (own.has(tid)) continue;
      try {
        if (getPriority(tid) < nice) setPriority(tid, nice);
      } catch {
        // ended meanwhile, or not ours to change
      }
    }
  };
}
