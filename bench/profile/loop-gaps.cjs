// A module to preload into a Node process under test (`node -r
// ./bench/profile/loop-gaps.cjs dist/server/main.js`): a 1 ms interval timer
// that writes every event-loop gap over LOOP_GAPS_MS (default 2) with what the
// main thread did meanwhile, read from the kernel's schedstat (Linux):
//   gap <epoch ms> <gap ms> run <ms on a core> wait <ms runnable, waiting for a core>
// A gap mostly `run` is the loop busy (profile it); mostly `wait` is the loop
// queued behind other threads for a core; neither is the thread blocked (a
// system call, a page fault, a lock). Garbage-collection pauses over half the
// threshold are written too, so that a busy gap can be told from V8's work:
//   gc <epoch ms at its start> <ms> <minor|major|incremental|weakcb>
// The first line maps the epoch to the
// monotonic clock a --cpu-prof profile's timestamps use:
//   map <epoch ms> <monotonic µs>
// Output: LOOP_GAPS_OUT, default /tmp/loop-gaps-<pid>.txt. Costs the process a
// read of /proc a millisecond. docs/performance.md, "The fixed-rate tail, taken
// apart", was measured with it.
'use strict';
const fs = require('node:fs');
const { PerformanceObserver, constants } = require('node:perf_hooks');

const thresholdMs = Number(process.env.LOOP_GAPS_MS ?? 2);
const out = fs.openSync(process.env.LOOP_GAPS_OUT ?? `/tmp/loop-gaps-${process.pid}.txt`, 'w');
let schedFd = -1;
try {
  schedFd = fs.openSync(`/proc/self/task/${process.pid}/schedstat`, 'r');
} catch {
  // no schedstat: gaps only
}
const buf = Buffer.alloc(128);
function sched() {
  if (schedFd < 0) return [0, 0];
  const n = fs.readSync(schedFd, buf, 0, buf.length, 0);
  const [run, wait] = buf.toString('latin1', 0, n).split(' ').map(Number);
  return [run, wait];
}

fs.writeSync(out, `map ${(performance.timeOrigin + performance.now()).toFixed(1)} ${Number(process.hrtime.bigint() / 1000n)}\n`);
let last = performance.now();
let [run0, wait0] = sched();
setInterval(() => {
  const now = performance.now();
  const [run, wait] = sched();
  const gap = now - last - 1;
  if (gap > thresholdMs) {
    fs.writeSync(out, `gap ${(performance.timeOrigin + now).toFixed(1)} ${gap.toFixed(2)} run ${((run - run0) / 1e6).toFixed(2)} wait ${((wait - wait0) / 1e6).toFixed(2)}\n`);
  }
  last = now;
  run0 = run;
  wait0 = wait;
}, 1).unref();

const GC_KINDS = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (entry.duration > thresholdMs / 2) {
      fs.writeSync(out, `gc ${(performance.timeOrigin + entry.startTime).toFixed(1)} ${entry.duration.toFixed(2)} ${GC_KINDS[entry.detail?.kind] ?? entry.detail?.kind}\n`);
    }
  }
}).observe({ entryTypes: ['gc'] });
