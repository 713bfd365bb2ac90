// What a scenario is (one file each under bench/scenarios/), and the context the
// runner hands it: the running processes, the agents, the load generator.
import type { BenchHttp } from './http-client.js';
import type { GuardOrg, GuardTarget } from './launch/guard.js';
import type { RunningUpstream } from './launch/upstream.js';
import type { LoadGenerator } from './load/types.js';
import type { BenchOptions } from './options.js';
import type { Target, TargetName } from './target.js';

export interface BenchContext {
  options: BenchOptions;
  /** Scratch space, removed at the end (scripts, nginx's files, the guard's data). */
  tmpDir: string;
  upstream: RunningUpstream;
  guard: GuardTarget;
  /** Every comparator that is running, by name (direct and guard always). */
  targets: Map<TargetName, Target>;
  /** Comparators that are not running, and why. */
  missing: Map<TargetName, string>;
  /** The main organization and its agents: log_outputs none and hash, the same bench policy. */
  mainOrg: GuardOrg;
  /** Agents of the main org: log_outputs none and hash (BENCH_POLICY), and one under an MCP-aware policy (MCP_BENCH_POLICY). */
  keys: { none: string; hash: string; mcp: string };
  /** Every organization the bench made (their audit rows are summed in the audit check). */
  orgs: GuardOrg[];
  /** The bearer token the guard injects, and nginx and the Node peer add likewise. */
  bearer: string;
  load: LoadGenerator;
  fixedRateLoad: LoadGenerator | null;
  fixedRateNote: string;
  http: BenchHttp;
  /** Comparators that have had their warm-up (for options.warmupOnce). */
  warmedUp: Set<TargetName>;
  /** Calls the guard answered, counted by the bench's clients, for the audit check. */
  guardCalls: { completed: number; inFlightAtStop: number };
  progress(line: string): void;
}

/** One measurement of one variant in one round: metric key → value (null: not applicable). */
export type Sample = Record<string, number | null>;

export interface Variant {
  /** `direct`, `guard`, `nginx`, `node-peer`, or a guard variant such as `guard-allowed`. */
  name: string;
  /** What this variant is, for the report. */
  label: string;
  measure(ctx: BenchContext, round: number): Promise<Sample>;
}

export interface Column {
  key: string;
  label: string;
  digits: number;
  better: 'higher' | 'lower';
  /** Reported as guard ÷ this variant, per round, then the median. */
  ratio?: boolean;
}

export interface Scenario {
  /** What `--scenarios` names. */
  id: string;
  title: string;
  /** What it measures and how to read it: one or two sentences for the report. */
  about: string;
  columns: Column[];
  /** The column the summary table and the chart use. */
  headline: string;
  /** The variant every ratio is about (`guard`). */
  subject: string;
  /** Rounds for this scenario (default: the run's). */
  rounds?(options: BenchOptions): number;
  /** Why it cannot run here, or null. */
  skipReason?(ctx: BenchContext): string | null;
  /** Setup that is not measured (e.g. creating agents). */
  prepare?(ctx: BenchContext): Promise<void>;
  variants(ctx: BenchContext): Variant[];
}
