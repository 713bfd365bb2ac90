// Issue 12's goal that the audit cost at most 10 % of the guard's CPU, measured
// in the service: each round starts an all-in-one guard under V8's sampling
// profiler, loads it with the small GET, and reads its CPU by thread from /proc
// around the measured run. The audit's share is the event loop's CPU in the
// audit's stages (the profile's samples in the run's window, by
// bench/profile/stages.ts: records, row encoding, entry hashes and seals, the
// journal, the insert's JS side) plus the embedded ClickHouse's threads and
// libuv's pool that runs its inserts (the insert and its merges), over the
// process's CPU without the profiler's own thread.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { GuardOrg, startGuard, type GuardTarget } from '../launch/guard.js';
import { measureLoad } from '../measure.js';
import { threadCpu, type ThreadCpu } from '../proc-stats.js';
import { AUDIT_STAGES, profileStages, type CpuProfile } from '../profile/stages.js';
import { SMALL_PATH } from '../routes.js';
import type { BenchContext, Column, Sample, Scenario } from '../scenario.js';

const COLUMNS: Column[] = [
  { key: 'auditShare', label: 'audit % of CPU', digits: 1, better: 'lower' },
  { key: 'cpu', label: 'guard CPU µs/req', digits: 1, better: 'lower' },
  { key: 'loop', label: 'event loop µs/req', digits: 1, better: 'lower' },
  { key: 'auditLoop', label: 'audit on the loop µs/req', digits: 1, better: 'lower' },
  { key: 'engine', label: 'chDB and libuv pool µs/req', digits: 1, better: 'lower' },
  { key: 'rps', label: 'req/s (profiled)', digits: 0, better: 'higher' },
  { key: 'errors', label: 'errors', digits: 0, better: 'lower' },
];

/**
 * The guard's threads by what they do. Node 20 names all of its own `node`: the
 * event loop (tid = pid), V8's platform threads (GC helpers, compilers), started
 * with the process, and libuv's pool, started at its first use, after V8's
 * profiler thread (`v8:ProfEvntProc`, started before any of the service's
 * code). chDB's insert calls run on libuv's pool (nothing else uses it under
 * this load: the journal writes synchronously), and chDB names its own threads
 * (`ThreadPool`, `MergeMutate`, ...) but for a few idle `node` ones. So the
 * engine is every thread started after the profiler's but Node's.
 */
function threadGroups(pid: number, threads: ThreadCpu[]): Map<number, 'loop' | 'profiler' | 'node' | 'engine'> {
  const profiler = threads.find((t) => t.name.startsWith('v8:Prof'));
  if (profiler === undefined) throw new Error('no V8 profiler thread in the profiled guard');
  // Thread ids grow in creation order unless the kernel's pid counter wrapped while the guard started.
  if (threads.some((t) => t.tid < pid)) throw new Error('the guard\'s thread ids are not in creation order (pid counter wrapped): run again');
  return new Map(threads.map((t) => [t.tid, t.tid === pid ? 'loop' : t === profiler ? 'profiler' : t.tid < profiler.tid ? 'node' : 'engine']));
}

/** Seconds the threads of `group` spent between two readings, on a core (or waiting for one: `field` waitSeconds); threads that ended in between are lost (chDB's pools keep theirs). */
function spent(before: ThreadCpu[], after: ThreadCpu[], groups: Map<number, string>, group: (g: string | undefined) => boolean, field: 'seconds' | 'waitSeconds' = 'seconds'): number {
  const start = new Map(before.map((t) => [t.tid, t[field] ?? 0]));
  return after.filter((t) => group(groups.get(t.tid))).reduce((sum, t) => sum + (t[field] ?? 0) - (start.get(t.tid) ?? 0), 0);
}

async function measureAuditShare(ctx: BenchContext, round: number): Promise<Sample> {
  let guard: GuardTarget | null = null;
  let profileDir: string | null = null;
  try {
    profileDir = mkdtempSync(join(ctx.tmpDir, 'cpu-prof-'));
    guard = await startGuard(ctx.tmpDir, ctx.upstream.authority, {
      name: 'guard-profiled',
      env: {},
      nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`],
    });
    const { agent } = await GuardOrg.withBenchAgent(guard.origin, `profiled-${round}`, ctx.upstream.authority, ctx.bearer, 'bench-profiled', 'none');
    const pid = guard.proc!.pid;
    let before: ThreadCpu[] = [];
    let after: ThreadCpu[] = [];
    let fromUs = 0;
    let toUs = 0;
    const nowUs = (): number => Number(process.hrtime.bigint() / 1000n); // the profile's clock (CLOCK_MONOTONIC)
    ctx.warmedUp.delete('guard-profiled'); // every round's guard is a new one, cold
    const load = await measureLoad(ctx, guard, { paths: [guard.pathFor(SMALL_PATH, agent.apiKey)], method: 'GET', bodyBytes: 0, expectStatus: 200 }, {
      start: () => { before = threadCpu(pid); fromUs = nowUs(); },
      end: () => { toUs = nowUs(); after = threadCpu(pid); },
    });
    await guard.proc!.stop(60_000); // a graceful stop writes the profile
    const file = readdirSync(profileDir).find((f) => f.endsWith('.cpuprofile'));
    if (file === undefined) throw new Error(`the profiled guard wrote no CPU profile (exit code ${await guard.proc!.exited()})`);
    const stages = profileStages(JSON.parse(readFileSync(join(profileDir, file), 'utf8')) as CpuProfile, fromUs, toUs);
    const sampledAudit = AUDIT_STAGES.reduce((sum, name) => sum + (stages.get(name) ?? 0), 0) / 1e6;
    const requests = Number(load.requests ?? 0);
    if (after.length === 0 || toUs <= fromUs || requests === 0) throw new Error('no thread times or profile window for the measured run');
    const groups = threadGroups(pid, after);
    const loop = spent(before, after, groups, (g) => g === 'loop');
    const engine = spent(before, after, groups, (g) => g === 'engine');
    const whole = spent(before, after, groups, (g) => g !== 'profiler');
    // Samples are spaced in wall time, and a sample in JavaScript was taken while the loop
    // was on a core or waiting for one (never blocked in epoll), so it stands for its interval
    // times the loop's share on a core of the time it was not blocked. Without schedstat: its
    // share of the whole window, which counts blocked time too (a lower bound).
    const waited = after[0]!.waitSeconds !== null ? spent(before, after, groups, (g) => g === 'loop', 'waitSeconds') : null;
    const onCore = waited !== null ? loop / (loop + waited) : loop / ((toUs - fromUs) / 1e6);
    const auditLoop = sampledAudit * onCore;
    const perCall = (seconds: number): number => (seconds * 1e6) / requests;
    return {
      auditShare: ((auditLoop + engine) / whole) * 100,
      cpu: perCall(whole),
      loop: perCall(loop),
      auditLoop: perCall(auditLoop),
      engine: perCall(engine),
      rps: load.rps ?? null,
      errors: load.errors ?? null,
      requests,
    };
  } finally {
    await guard?.proc?.stop(60_000);
    // Each round's guard leaves a chDB data directory and a profile of tens of MB.
    if (profileDir !== null) rmSync(profileDir, { recursive: true, force: true });
    if (guard !== null) rmSync(guard.dataDir, { recursive: true, force: true });
  }
}

export const auditShare: Scenario = {
  id: 'audit-share',
  title: 'Audit share of the guard\'s CPU (GET small JSON)',
  about: 'Each round starts an all-in-one guard under V8\'s sampling profiler (node --cpu-prof) and loads it with the small GET (log_outputs: none, the bench policy). The audit\'s share is the run\'s profile samples in the audit\'s stages (records, row encoding, entry hashes and seals, the journal, the insert\'s JS side; bench/profile/stages.ts), each its interval times the loop\'s time on a core over its time on a core or waiting for one (schedstat), plus all CPU of the embedded ClickHouse\'s threads and of libuv\'s pool, where its inserts run, over the process\'s CPU without the profiler\'s thread. Garbage collection (V8\'s helpers and the loop\'s pauses) is charged to no one.',
  columns: COLUMNS,
  headline: 'auditShare',
  subject: 'guard-profiled',
  variants: () => [{ name: 'guard-profiled', label: 'all-in-one guard under node --cpu-prof, one per round', measure: measureAuditShare }],
};
