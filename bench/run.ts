// The bench runner (`npm run bench`, `npm run bench -- --quick`). Starts on
// loopback everything it needs (the HTTPS upstream, the guard, nginx when it is
// installed, the fastify peer), sets the guard up through its admin API, runs
// each scenario's comparators interleaved round after round, checks that the
// audit holds a row for every call the guard answered, writes the report, and
// stops everything it started, also on error and on SIGINT/SIGTERM.
//
// Importable: `runBench(options)` runs and returns the report (a test can pass
// `parseBenchArgs(['--quick', '--duration', '1', '--scenarios', 'small-get'])`).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BenchHttp } from './http-client.js';
import { GuardOrg, guardHealth, startGuard, waitAuditFlushed } from './launch/guard.js';
import { startNginx } from './launch/nginx.js';
import { startNodePeer } from './launch/node-peer.js';
import { startBare } from './launch/bare.js';
import { startGuardSplit } from './launch/guard-split.js';
import { startUpstream } from './launch/upstream.js';
import { pickFixedRateGenerator, pickLoadGenerator } from './load/index.js';
import { parseBenchArgs, USAGE, type BenchOptions } from './options.js';
import { onPath, runProcess, stopAll } from './processes.js';
import { peakRssMiB, rssMiB } from './proc-stats.js';
import { summarize, writeReport, type AuditCheck, type BenchReport, type RoundSamples, type ScenarioResult } from './report.js';
import type { BenchContext, Scenario } from './scenario.js';
import { SCENARIOS } from './scenarios/index.js';
import { directTarget, type Target, type TargetName } from './target.js';

import { BENCH_POLICY, MCP_BENCH_POLICY } from './policy.js';
import { PROXY_NODE_FLAGS } from '../server/node-flags.js';
export { parseBenchArgs } from './options.js';
export type { BenchOptions } from './options.js';
export type { BenchReport } from './report.js';

export { BENCH_POLICY } from './policy.js';

const AUDIT_FLUSH_WAIT_MS = 30_000;

export interface RunResult {
  report: BenchReport;
  files: { json: string; markdown: string; latest: string; svg: string };
}

export async function runBench(options: BenchOptions, progress: (line: string) => void = defaultProgress()): Promise<RunResult> {
  const selected = selectScenarios(options.scenarios);
  const startedAt = new Date();
  const tmpDir = mkdtempSync(join(tmpdir(), 'tcg-bench-'));
  // Also removed when the process exits without unwinding (SIGINT in the CLI).
  const removeTmpDir = (): void => rmSync(tmpDir, { recursive: true, force: true });
  process.once('exit', removeTmpDir);
  const http = new BenchHttp();
  const problems: string[] = [];
  try {
    const { generator, note: loadNote } = pickLoadGenerator(options.loadgen);
    const fixedRate = pickFixedRateGenerator();
    progress(`bench: ${options.quick ? 'quick' : 'full'} run of ${selected.map((s) => s.id).join(', ')}; load: ${loadNote}`);

    const upstream = await startUpstream();
    const guard = await startGuard(tmpDir, upstream.authority);
    progress(`bench: upstream ${upstream.origin} (pid ${upstream.proc.pid}), guard ${guard.origin} (pid ${guard.proc!.pid})`);

    const bearer = randomBytes(24).toString('hex');
    const mainOrg = await GuardOrg.signup(guard.origin, 'main');
    await mainOrg.createBearerCredential(upstream.authority, bearer);
    const none = await mainOrg.createAgent('bench-none', 'none');
    const hash = await mainOrg.createAgent('bench-hash', 'hash');
    await mainOrg.setPolicy(none.id, BENCH_POLICY);
    await mainOrg.setPolicy(hash.id, BENCH_POLICY);
    const mcp = await mainOrg.createAgent('bench-mcp', 'none');
    await mainOrg.setPolicy(mcp.id, MCP_BENCH_POLICY);

    const targets = new Map<TargetName, Target>([['direct', directTarget(upstream.origin)], ['guard', guard]]);
    const missing = new Map<TargetName, string>();
    const comparators: Record<string, string> = {
      direct: `client straight to the upstream (uWebSockets.js SSLApp, HTTPS): the ceiling`,
      guard: `node dist/server/main.js, all-in-one, embedded stores; agents with log_outputs none/hash and a ${BENCH_POLICY.split('\n').filter((l) => l.includes('- name')).length}-rule policy`,
    };
    const nginxBinary = options.nginx ? onPath('nginx') : null;
    if (nginxBinary !== null) {
      const nginx = await startNginx(nginxBinary, tmpDir, upstream.port, bearer);
      targets.set('nginx', nginx);
      comparators.nginx = `${(await versionOf(nginxBinary, ['-v'])).replace(/^nginx version: /, '')}, 1 worker, upstream keepalive 64, proxy_ssl_verify on`;
    } else {
      missing.set('nginx', options.nginx ? 'nginx is not on PATH' : 'turned off (--no-nginx)');
    }
    if (options.nodePeer) {
      targets.set('node-peer', await startNodePeer(upstream.origin, bearer));
      comparators['node-peer'] = 'fastify + @fastify/http-proxy (undici), TLS verified against the test CA';
    } else {
      missing.set('node-peer', 'turned off (--no-node-peer)');
    }
    targets.set('bare', await startBare(upstream.origin, bearer));
    if (options.split) {
      targets.set('guard-split', await startGuardSplit(tmpDir, upstream.authority, bearer));
      comparators['guard-split'] = `the guard in split mode: node ${PROXY_NODE_FLAGS.join(' ')} dist/server/main-proxy.js (as npm run start:proxy; the process measured), an admin process and ClickHouse over HTTP in processes of their own, one SQLite file; the same policy, log_outputs none`;
    } else {
      missing.set('guard-split', 'turned off (--no-split)');
    }
    comparators.bare = 'uWebSockets.js + undici, forwarding with the bearer added and nothing else (bench/bare-forwarder-server.ts): the stack\'s floor';
    for (const [name, reason] of missing) {
      comparators[name] = `not run: ${reason}`;
      progress(`bench: comparator ${name} skipped: ${reason}`);
    }

    const ctx: BenchContext = {
      options, tmpDir, upstream, guard, targets, missing, mainOrg,
      keys: { none: none.apiKey, hash: hash.apiKey, mcp: mcp.apiKey },
      orgs: [mainOrg], bearer, load: generator, fixedRateLoad: fixedRate.generator, fixedRateNote: fixedRate.note, http,
      warmedUp: new Set(),
      guardCalls: { completed: 0, inFlightAtStop: 0 },
      progress,
    };

    const processes = [...targets.values()].filter((t) => t.proc !== null).map((t) => ({ name: t.name as string, pid: t.proc!.pid }));
    processes.push({ name: 'upstream', pid: upstream.proc.pid });
    const memory: BenchReport['memory'] = Object.fromEntries(processes.map((p) => [p.name, { atStartMiB: rssMiB(p.pid), peakMiB: null, afterScenario: {} }]));

    const results: ScenarioResult[] = [];
    for (const scenario of selected) {
      results.push(await runScenario(ctx, scenario, problems));
      for (const p of processes) memory[p.name]!.afterScenario[scenario.id] = rssMiB(p.pid);
    }
    for (const p of processes) memory[p.name]!.peakMiB = peakRssMiB(p.pid);

    const audit = await checkAudit(ctx);
    progress(`bench: audit rows ${audit.rows}, guard answers ${audit.completed} (+ up to ${audit.inFlightAtStop} in flight): ${audit.ok ? 'OK' : 'MISMATCH'}`);
    if (!audit.ok) problems.push(`audit check: ${audit.rows} rows for ${audit.completed} answers (allowance ${audit.inFlightAtStop})`);
    for (const t of targets.values()) {
      if (t.proc !== null && !t.proc.alive) problems.push(`${t.name} exited during the run; its last output:\n${t.proc.outputTail}`);
    }

    const report: BenchReport = {
      startedAt: startedAt.toISOString().replace(/\.\d+Z$/, 'Z'),
      seconds: (Date.now() - startedAt.getTime()) / 1000,
      options,
      machine: {
        cpus: cpus().length,
        cpu: cpus()[0]?.model ?? 'unknown',
        'memory GiB': Math.round(totalmem() / 1024 ** 3),
        node: process.version,
      },
      loadGenerator: loadNote,
      comparators,
      scenarios: results,
      memory,
      audit,
      problems,
    };
    const files = writeReport(report, options.outDir);
    progress(`bench: done in ${report.seconds.toFixed(0)} s; ${files.markdown}`);
    return { report, files };
  } finally {
    http.close();
    await stopAll();
    removeTmpDir();
    process.removeListener('exit', removeTmpDir);
  }
}

function selectScenarios(ids: string[] | null): Scenario[] {
  if (ids === null) return [...SCENARIOS];
  const unknown = ids.filter((id) => !SCENARIOS.some((s) => s.id === id));
  if (unknown.length > 0) throw new Error(`unknown scenario(s) ${unknown.join(', ')}; known: ${SCENARIOS.map((s) => s.id).join(', ')}`);
  return SCENARIOS.filter((s) => ids.includes(s.id));
}

async function runScenario(ctx: BenchContext, scenario: Scenario, problems: string[]): Promise<ScenarioResult> {
  const started = performance.now();
  const base = { id: scenario.id, title: scenario.title, about: scenario.about, columns: scenario.columns, headline: scenario.headline, subject: scenario.subject };
  const skipped = scenario.skipReason?.(ctx) ?? null;
  if (skipped !== null) {
    ctx.progress(`${scenario.id}: skipped: ${skipped}`);
    return { ...base, skipped, variants: [], rounds: [], medians: {}, ratios: {}, seconds: 0 };
  }
  ctx.progress(`${scenario.id}: ${scenario.title}`);
  await scenario.prepare?.(ctx);
  const variants = scenario.variants(ctx);
  const rounds: RoundSamples[] = [];
  const roundCount = scenario.rounds?.(ctx.options) ?? ctx.options.rounds;
  for (let round = 1; round <= roundCount; round++) {
    const samples: RoundSamples = {};
    for (const variant of variants) {
      try {
        samples[variant.name] = await variant.measure(ctx, round);
        ctx.progress(`  ${scenario.id} round ${round}/${roundCount} ${variant.name}: ${describeSample(samples[variant.name] as Record<string, number | null>)}`);
      } catch (err) {
        const message = (err as Error).message;
        samples[variant.name] = { error: message };
        problems.push(`${scenario.id} round ${round} ${variant.name}: ${message}`);
        ctx.progress(`  ${scenario.id} round ${round}/${roundCount} ${variant.name}: FAILED: ${message}`);
      }
    }
    rounds.push(samples);
  }
  const partial = { columns: scenario.columns, subject: scenario.subject, variants: variants.map((v) => ({ name: v.name, label: v.label })), rounds };
  const result: ScenarioResult = { ...base, skipped: null, ...partial, ...summarize(partial), seconds: (performance.now() - started) / 1000 };
  for (const v of result.variants) {
    const errors = result.medians[v.name]?.errors;
    if (typeof errors === 'number' && errors > 0) problems.push(`${scenario.id} ${v.name}: median ${errors} errors or unexpected statuses per run`);
  }
  return result;
}

function describeSample(sample: Record<string, number | null>): string {
  return Object.entries(sample)
    .filter(([, v]) => v !== null)
    .map(([k, v]) => `${k} ${Math.abs(v!) >= 100 ? Math.round(v!) : v!.toFixed(2)}`)
    .join(', ');
}

/** A /health field that counts proxied exchanges, if the guard reports one (the lead may add it). */
const EXCHANGE_COUNTER = /^(proxied|proxy_exchanges|exchanges|proxy_requests)(_total)?$/;

async function checkAudit(ctx: BenchContext): Promise<AuditCheck> {
  const flushed = await waitAuditFlushed(ctx.guard.origin, AUDIT_FLUSH_WAIT_MS);
  let rows = 0;
  for (const org of ctx.orgs) rows += await org.auditTotal();
  const health = await guardHealth(ctx.guard.origin);
  const counterName = Object.keys(health).find((k) => EXCHANGE_COUNTER.test(k) && typeof health[k] === 'number');
  if (counterName !== undefined) {
    const counted = health[counterName] as number;
    return {
      rows, completed: counted, inFlightAtStop: 0, flushed, ok: flushed && rows === counted, health,
      note: `Compared with the guard's own count of proxied exchanges (/health \`${counterName}\`); the bench's clients counted ${ctx.guardCalls.completed} answers.`,
    };
  }
  const { completed, inFlightAtStop } = ctx.guardCalls;
  return {
    rows,
    completed,
    inFlightAtStop,
    flushed,
    ok: flushed && rows >= completed && rows - completed <= inFlightAtStop,
    health,
    note: 'The guard\'s /health has no count of proxied exchanges, so the audit rows are compared with the answers ' +
      'the bench\'s own clients received (load generator totals, warm-ups, probes, SSE and download requests). A load run stops with up to ' +
      'one request per connection still in flight: the guard answers and audits those (status 499 when the client has gone), but the load ' +
      'generator does not count them, so the rows may legitimately exceed the answers by at most connections × load runs.',
  };
}

async function versionOf(binary: string, args: string[]): Promise<string> {
  const { stdout, stderr } = await runProcess('version', binary, args, 5000);
  return (stdout + stderr).trim().split('\n')[0] ?? binary;
}

function defaultProgress(): (line: string) => void {
  const started = Date.now();
  return (line) => process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}\n`);
}

function isMain(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return pathToFileURL(realpathSync(entry)).href === import.meta.url;
  } catch {
    return false;
  }
}

if (isMain()) {
  let options: BenchOptions;
  try {
    options = parseBenchArgs(process.argv.slice(2), process.env);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit((err as Error).message === USAGE ? 0 : 2);
  }
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`\nbench: ${signal}: stopping everything it started\n`);
      void stopAll().finally(() => process.exit(130));
    });
  }
  runBench(options).then(
    () => process.exit(0),
    async (err: unknown) => {
      process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
      await stopAll();
      process.exit(1);
    },
  );
}
