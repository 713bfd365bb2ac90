// The bench's reading of how long a process's event loop waited for a core
// (bench/proc-stats.ts, mainThreadWaitSeconds; the fixed-rate scenario's
// "event loop waiting for a core" column): it grows when more threads want the
// machine's cores than it has, and stays put while the thread sleeps.
import { spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { existsSync } from 'node:fs';
import t from 'tap';
import { mainThreadWaitSeconds } from '../../bench/proc-stats.js';

const spin = (ms: number): void => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

if (!existsSync(`/proc/${process.pid}/task/${process.pid}/schedstat`)) {
  console.log('# proc-stats: skipped, this kernel keeps no /proc/<pid>/task/<tid>/schedstat (Linux with schedstats only)');
  t.pass('skipped: no schedstat');
} else {
  t.test('the main thread\'s wait for a core grows when every core is taken, not while it sleeps', async (t) => {
    const start = mainThreadWaitSeconds(process.pid);
    t.type(start, 'number');
    await new Promise((resolve) => setTimeout(resolve, 200));
    const afterSleep = mainThreadWaitSeconds(process.pid)!;
    t.ok(afterSleep - start! < 0.1, `a sleeping thread waits for no core (${((afterSleep - start!) * 1000).toFixed(1)} ms)`);

    // One spinning process more than there are cores, and this thread spinning too.
    const spinners = Array.from({ length: availableParallelism() + 1 }, () =>
      spawn(process.execPath, ['-e', 'const end = Date.now() + 1500; while (Date.now() < end);'], { stdio: 'ignore' }));
    try {
      await new Promise((resolve) => setTimeout(resolve, 100)); // they are running
      const before = mainThreadWaitSeconds(process.pid)!;
      spin(600);
      const waited = mainThreadWaitSeconds(process.pid)! - before;
      t.ok(waited > 0.05, `spinning beside ${spinners.length} spinners on ${availableParallelism()} cores, it waited ${(waited * 1000).toFixed(0)} ms for a core`);
    } finally {
      for (const child of spinners) child.kill();
    }
  });

  t.test('a process that is gone reads as null', async (t) => {
    t.equal(mainThreadWaitSeconds(2 ** 22 + 12_345), null);
  });
}
