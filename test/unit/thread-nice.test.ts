// shared/stores/clickhouse/thread-nice.ts: the threads started after the nicer
// was made (the engine's) get the nice value; those alive before (the main
// thread, V8's helpers, libuv's pool) keep their own.
import { readdirSync, readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { engineThreadNicer } from '../../shared/stores/clickhouse/thread-nice.js';

/** Each thread's nice value, from /proc (field 19 of stat, after the command's closing parenthesis). */
function niceByThread(): Map<number, number> {
  const out = new Map<number, number>();
  for (const name of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${name}/stat`, 'utf8');
      out.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]));
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

async function startThread(t: { teardown(fn: () => unknown): void }): Promise<void> {
  const worker = new Worker('setInterval(() => {}, 1000)', { eval: true });
  await new Promise((resolve) => worker.once('online', resolve));
  t.teardown(() => worker.terminate());
}

t.test('threads started after the nicer get the nice value; Node\'s own keep theirs', { skip: process.platform !== 'linux' && 'thread ids and nice values are read from /proc: Linux only' }, async (t) => {
  const nicer = await engineThreadNicer(7);
  const lower = await engineThreadNicer(3);
  const before = niceByThread();
  // Threads started after, as the engine starts its own.
  await startThread(t);
  await startThread(t);
  const started = [...niceByThread().keys()].filter((tid) => !before.has(tid));
  t.ok(started.length >= 2, `the new threads are seen (${started.length})`);
  nicer();
  const after = niceByThread();
  t.ok(started.every((tid) => after.get(tid) === 7), `each started thread has nice 7 (${started.map((tid) => after.get(tid)).join(', ')})`);
  t.ok([...before].every(([tid, nice]) => !after.has(tid) || after.get(tid) === nice), 'the threads alive before keep their nice value');
  lower();
  t.ok(started.every((tid) => niceByThread().get(tid) === 7), 'a thread is never given a higher priority than it has');
});

t.test('nice 0 changes nothing', { skip: process.platform !== 'linux' && 'Linux only' }, async (t) => {
  const nicer = await engineThreadNicer(0);
  await startThread(t);
  const before = niceByThread();
  nicer();
  t.same(niceByThread(), before);
});
