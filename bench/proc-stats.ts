// CPU time and memory of a process and its descendants, read from /proc (Linux).
// utime+stime (proc(5), /proc/<pid>/stat fields 14 and 15) cover every thread of
// a process; a worker's time is counted in its own entry while it lives, so an
// nginx master is read together with its worker. Elsewhere every reading is null.
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

let clockTicks: number | null = null;
function ticksPerSecond(): number {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** The fields after `pid (comm)` of a process's or a thread's `stat` (`dir`: /proc/<pid> or /proc/<pid>/task/<tid>); comm may hold spaces and parentheses, so split after the last ')'. */
function statFields(dir: string): string[] | null {
  try {
    const text = readFileSync(`${dir}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** utime + stime (proc(5), stat fields 14 and 15), in clock ticks. */
function cpuTicks(fields: string[]): number {
  return Number(fields[11]) + Number(fields[12]);
}

/** `pid` and every process below it. */
export function processTree(pid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [pid];
  }
  const parentOf = new Map<number, number>();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(`/proc/${entry}`);
    if (fields !== null) parentOf.set(Number(entry), Number(fields[1]));
  }
  const tree = [pid];
  for (let i = 0; i < tree.length && tree.length < 1000; i++) {
    for (const [child, parent] of parentOf) if (parent === tree[i]) tree.push(child);
  }
  return tree;
}

/** CPU seconds (user + system) used so far by `pid` and its descendants, or null when unreadable. */
export function cpuSeconds(pid: number): number | null {
  let ticks = 0;
  let seen = false;
  for (const p of processTree(pid)) {
    const fields = statFields(`/proc/${p}`);
    if (fields === null) continue;
    seen = true;
    ticks += cpuTicks(fields);
  }
  return seen ? ticks / ticksPerSecond() : null;
}

function statusKiB(pid: number, field: 'VmHWM' | 'VmRSS'): number | null {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    return match ? Number(match[1]) : null;
  } catch {
    return null;
  }
}

/** Resident memory now, in MiB, summed over the process tree. */
export function rssMiB(pid: number): number | null {
  return sumTree(pid, 'VmRSS');
}

/** Peak resident memory (high-water mark) in MiB, summed over the process tree. */
export function peakRssMiB(pid: number): number | null {
  return sumTree(pid, 'VmHWM');
}

function sumTree(pid: number, field: 'VmHWM' | 'VmRSS'): number | null {
  let kib = 0;
  let seen = false;
  for (const p of processTree(pid)) {
    const value = statusKiB(p, field);
    if (value === null) continue;
    seen = true;
    kib += value;
  }
  return seen ? kib / 1024 : null;
}

/** Jiffies the whole machine has spent busy and in total so far (/proc/stat, first line), or null. */
export function machineCpuTimes(): { busy: number; total: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const values = line.trim().split(/\s+/).slice(1).map(Number);
    const total = values.reduce((a, b) => a + b, 0);
    const idle = (values[3] ?? 0) + (values[4] ?? 0); // idle + iowait
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

export interface ThreadCpu {
  tid: number;
  /** The thread's name (/proc/<pid>/task/<tid>/comm): `node` for the event loop and for Node's, V8's and libuv's helpers, ClickHouse's pool names for chDB's. */
  name: string;
  /** CPU seconds so far: the scheduler's own count (schedstat, ns) when the kernel keeps it, else user + system clock ticks. */
  seconds: number;
  /** Seconds spent runnable but waiting for a core (schedstat), or null when the kernel keeps no schedstat. */
  waitSeconds: number | null;
}

/** CPU seconds of each thread of `pid` so far; [] when unreadable. */
export function threadCpu(pid: number): ThreadCpu[] {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: ThreadCpu[] = [];
  for (const tid of tids) {
    const dir = `/proc/${pid}/task/${tid}`;
    try {
      const name = readFileSync(`${dir}/comm`, 'utf8').trim();
      // schedstat: time on a core (ns), time waiting on a run queue (ns), time slices (proc(5)).
      const sched = schedstat(dir);
      if (sched !== null) {
        out.push({ tid: Number(tid), name, seconds: sched.runNs / 1e9, waitSeconds: sched.waitNs / 1e9 });
        continue;
      }
      const fields = statFields(dir);
      if (fields !== null) out.push({ tid: Number(tid), name, seconds: cpuTicks(fields) / ticksPerSecond(), waitSeconds: null });
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}

/**
 * Seconds the process's main thread (its thread id is the pid: a Node process's
 * event loop) has spent runnable but waiting for a core, or null without
 * schedstat. Read around a fixed-rate run it says how long the proxy's loop
 * was queued behind other threads for the machine's cores.
 */
export function mainThreadWaitSeconds(pid: number): number | null {
  const sched = schedstat(`/proc/${pid}/task/${pid}`);
  return sched === null ? null : sched.waitNs / 1e9;
}

function schedstat(dir: string): { runNs: number; waitNs: number } | null {
  try {
    const [run, wait] = readFileSync(`${dir}/schedstat`, 'utf8').trim().split(' ').map(Number);
    return Number.isFinite(run) && Number.isFinite(wait) ? { runNs: run!, waitNs: wait! } : null;
  } catch {
    return null;
  }
}
