// The measurement every throughput scenario shares: one probe request (right
// status, or the variant fails loudly), an unmeasured warm-up, then a measured
// load run with the proxy's and the upstream's CPU time read around it.
import { cpuSeconds, machineCpuTimes, mainThreadWaitSeconds } from './proc-stats.js';
import type { BenchContext, Column, Sample, Variant } from './scenario.js';
import type { Target, TargetName } from './target.js';

export const LOAD_COLUMNS: Column[] = [
  { key: 'rps', label: 'req/s', digits: 0, better: 'higher', ratio: true },
  { key: 'p50', label: 'p50 ms', digits: 2, better: 'lower', ratio: true },
  { key: 'p99', label: 'p99 ms', digits: 2, better: 'lower', ratio: true },
  { key: 'cpu', label: 'proxy CPU µs/req', digits: 1, better: 'lower', ratio: true },
  { key: 'upstreamCpu', label: 'upstream CPU %', digits: 0, better: 'lower' },
  { key: 'machineCpu', label: 'machine CPU %', digits: 0, better: 'lower' },
  { key: 'errors', label: 'errors', digits: 0, better: 'lower' },
];

/** The fixed-rate scenario's: latency is the point, with the 99.9th percentile. */
export const FIXED_RATE_COLUMNS: Column[] = [
  { key: 'rps', label: 'req/s', digits: 0, better: 'higher' },
  { key: 'p50', label: 'p50 ms', digits: 2, better: 'lower', ratio: true },
  { key: 'p99', label: 'p99 ms', digits: 2, better: 'lower', ratio: true },
  { key: 'p999', label: 'p99.9 ms', digits: 2, better: 'lower', ratio: true },
  { key: 'cpu', label: 'proxy CPU µs/req', digits: 1, better: 'lower', ratio: true },
  // How long a Node proxy's event loop was runnable but queued behind the load
  // generator, the upstream and its own helper threads on this 2-core machine:
  // much of every proxy's distance from direct at this rate, though not what
  // makes a round's rare bad p99 (docs/performance.md, "The fixed-rate tail, taken apart").
  { key: 'loopWait', label: 'event loop waiting for a core, ms/s', digits: 1, better: 'lower' },
  { key: 'errors', label: 'errors', digits: 0, better: 'lower' },
];

/** The comparators whose main thread is their event loop (nginx's reported process is its master, not the worker). */
const NODE_LOOPS: ReadonlySet<TargetName> = new Set(['guard', 'guard-quiet', 'guard-profiled', 'guard-split', 'node-peer', 'bare']);

export interface LoadRequest {
  /** Paths on the target; more than one are drawn at random per request. */
  paths: string[];
  method: 'GET' | 'POST';
  bodyBytes: number;
  /** A JSON body instead of `bodyBytes` of 'x'. */
  jsonBody?: string;
  /** The status every answer must have. */
  expectStatus: number;
  /** A fixed request rate (requests/s): run by the fixed-rate generator (wrk2, else the open-loop one). */
  rate?: number;
}

export function targetOf(ctx: BenchContext, name: TargetName): Target {
  const target = ctx.targets.get(name);
  if (target === undefined) throw new Error(`comparator ${name} is not running`);
  return target;
}

/** The comparators of a proxy scenario, in the order they are interleaved in each round. */
export function runningComparators(ctx: BenchContext): TargetName[] {
  return (['direct', 'guard', 'guard-split', 'nginx', 'node-peer', 'bare'] as const).filter((name) => ctx.targets.has(name));
}

/** A variant that puts `request` through `targetName` under load. */
export function loadVariant(name: string, label: string, targetName: TargetName, request: (ctx: BenchContext, target: Target) => LoadRequest): Variant {
  return {
    name,
    label,
    measure: (ctx) => measureLoad(ctx, targetOf(ctx, targetName), request(ctx, targetOf(ctx, targetName))),
  };
}

/** Called just before and just after the measured load run (not the warm-up): what a scenario reads around it. */
export interface LoadWindow {
  start(): void;
  end(): void;
}

export async function measureLoad(ctx: BenchContext, target: Target, request: LoadRequest, window?: LoadWindow): Promise<Sample> {
  const { options } = ctx;
  const first = request.paths[0]!;
  const probe = await ctx.http.exchange(`${target.origin}${first}`, {
    method: request.method,
    ...(request.jsonBody !== undefined ? { body: Buffer.from(request.jsonBody), headers: { 'content-type': 'application/json' } } : request.bodyBytes > 0 ? { body: Buffer.alloc(request.bodyBytes, 'x') } : {}),
    timeoutMs: 10_000,
  });
  if (probe.status !== request.expectStatus) {
    throw new Error(`${target.name} answered ${probe.status} to ${request.method} ${first}, expected ${request.expectStatus}`);
  }
  const load = request.rate !== undefined ? ctx.fixedRateLoad : ctx.load;
  if (load === null) throw new Error('no fixed-rate load generator');
  const spec = {
    origin: target.origin,
    paths: request.paths,
    method: request.method,
    bodyBytes: request.bodyBytes,
    ...(request.jsonBody !== undefined ? { jsonBody: request.jsonBody } : {}),
    connections: options.connections,
    ...(request.rate !== undefined ? { rate: request.rate } : {}),
  };
  const warmUp = !options.warmupOnce || !ctx.warmedUp.has(target.name);
  const warm = warmUp ? await load.run({ ...spec, durationSec: options.warmupSec }, ctx.tmpDir) : null;
  ctx.warmedUp.add(target.name);

  const pid = target.proc?.pid ?? null;
  const proxyBefore = pid !== null ? cpuSeconds(pid) : null;
  const upstreamBefore = cpuSeconds(ctx.upstream.proc.pid);
  const machineBefore = machineCpuTimes();
  const loopPid = request.rate !== undefined && pid !== null && NODE_LOOPS.has(target.name) ? pid : null;
  const loopWaitBefore = loopPid !== null ? mainThreadWaitSeconds(loopPid) : null;
  window?.start();
  const started = performance.now();
  const run = await load.run({ ...spec, durationSec: options.durationSec }, ctx.tmpDir);
  const wallSec = (performance.now() - started) / 1000;
  window?.end();
  const proxyAfter = pid !== null ? cpuSeconds(pid) : null;
  const upstreamAfter = cpuSeconds(ctx.upstream.proc.pid);
  const machineAfter = machineCpuTimes();
  const loopWaitAfter = loopPid !== null ? mainThreadWaitSeconds(loopPid) : null;

  if (target.name === 'guard') {
    ctx.guardCalls.completed += 1 + (warm?.requests ?? 0) + run.requests;
    ctx.guardCalls.inFlightAtStop += (warm !== null ? 2 : 1) * options.connections;
  }
  // wrk counts answers >= 400 as status errors, autocannon non-2xx ones.
  const unexpected = request.expectStatus < 400 ? run.badStatus : run.requests - run.badStatus;
  return {
    rps: run.rps,
    p50: run.p50Ms,
    p99: run.p99Ms,
    ...(run.p999Ms !== undefined ? { p999: run.p999Ms } : {}),
    cpu: proxyBefore !== null && proxyAfter !== null && run.requests > 0 ? ((proxyAfter - proxyBefore) * 1e6) / run.requests : null,
    upstreamCpu: upstreamBefore !== null && upstreamAfter !== null ? ((upstreamAfter - upstreamBefore) / wallSec) * 100 : null,
    // Busy share of all cores: with 2 cores, the load generator, the proxy and the upstream compete.
    machineCpu: machineBefore !== null && machineAfter !== null && machineAfter.total > machineBefore.total
      ? ((machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total)) * 100
      : null,
    ...(request.rate !== undefined ? { loopWait: loopWaitBefore !== null && loopWaitAfter !== null ? ((loopWaitAfter - loopWaitBefore) * 1000) / wallSec : null } : {}),
    errors: run.errors + unexpected,
    requests: run.requests,
  };
}

export const COMPARATOR_LABELS: Record<TargetName, string> = {
  direct: 'client → upstream over HTTPS (the ceiling)',
  guard: 'client → guard → upstream',
  'guard-quiet': 'client → guard (metrics off, LOG_LEVEL=error) → upstream',
  'guard-profiled': 'client → guard under a CPU profiler (node --cpu-prof) → upstream',
  nginx: 'client → nginx → upstream',
  'node-peer': 'client → fastify + @fastify/http-proxy → upstream',
  bare: 'client → bare uWebSockets.js + undici forwarder (no features: the stack\'s floor) → upstream',
  'guard-split': 'client → guard split-mode proxy (audit over HTTP to ClickHouse in another process) → upstream',
};

/**
 * One variant per running comparator, all asking the upstream for the same thing;
 * the guard with the main org's `log_outputs: none` agent (its audit cost is a
 * scenario of its own).
 */
export function comparatorVariants(ctx: BenchContext, upstreamPath: string, method: 'GET' | 'POST', bodyBytes: number): Variant[] {
  return runningComparators(ctx).map((name) => loadVariant(name, COMPARATOR_LABELS[name], name, (c, target) => ({
    paths: [target.pathFor(upstreamPath, c.keys.none)],
    method,
    bodyBytes,
    expectStatus: 200,
  })));
}
