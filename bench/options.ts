// The bench's options: flags first, then BENCH_* environment variables, then the
// defaults of the full or the quick run.
import { DEFAULT_RESULTS_DIR } from './paths.js';

export interface BenchOptions {
  quick: boolean;
  /** Measured seconds per load run (wrk counts whole seconds). */
  durationSec: number;
  /** Unmeasured load before each measured run (at least 1 s with wrk). */
  warmupSec: number;
  /** Warm up only before a comparator's first run (quick), not before every run (full). */
  warmupOnce: boolean;
  /** Repeats of every scenario, comparators interleaved in each. */
  rounds: number;
  connections: number;
  /** Scenario ids to run; null runs them all. */
  scenarios: string[] | null;
  loadgen: 'auto' | 'wrk' | 'autocannon';
  nginx: boolean;
  nodePeer: boolean;
  /** Run the guard in split mode too (proxy, admin and ClickHouse over HTTP as processes). */
  split: boolean;
  /** Where <timestamp>.json/.md/.svg and latest.md go. */
  outDir: string;
  /** Agents of the many-agents scenario. */
  agents: number;
  /** Bytes of the big download. */
  downloadBytes: number;
  /** Sequential requests of the SSE scenario, per comparator and round. */
  sseRequests: number;
}

export const FULL: Omit<BenchOptions, 'scenarios' | 'loadgen' | 'nginx' | 'nodePeer' | 'split' | 'outDir'> = {
  quick: false,
  durationSec: 10,
  warmupSec: 1,
  warmupOnce: false,
  rounds: 3,
  connections: 64,
  agents: 10_000,
  downloadBytes: 1024 ** 3,
  sseRequests: 50,
};

export const QUICK: typeof FULL = {
  quick: true,
  durationSec: 3,
  warmupSec: 1,
  warmupOnce: true,
  rounds: 1,
  connections: 64,
  agents: 1000,
  downloadBytes: 256 * 1024 ** 2,
  sseRequests: 20,
};

export const USAGE = `usage: npm run bench -- [options]
  --quick              short run (under 90 s): 1 round, 3 s per load, warm-up once per comparator,
                       1,000 agents, 256 MiB download
  --duration <s>       measured seconds per load run            (BENCH_DURATION)
  --warmup <s>         unmeasured seconds before each run       (BENCH_WARMUP)
  --rounds <n>         repeats, comparators interleaved         (BENCH_ROUNDS)
  --connections <n>    concurrent connections of the load       (BENCH_CONNECTIONS)
  --scenarios a,b      run only these scenario ids              (BENCH_SCENARIOS)
  --loadgen <name>     auto | wrk | autocannon                  (BENCH_LOADGEN)
  --agents <n>         agents of the many-agents scenario       (BENCH_AGENTS)
  --download-mib <n>   size of the big download                 (BENCH_DOWNLOAD_MIB)
  --sse-requests <n>   sequential SSE requests per comparator   (BENCH_SSE_REQUESTS)
  --no-nginx           skip the nginx comparator
  --no-node-peer       skip the @fastify/http-proxy comparator
  --no-split           skip the guard in split mode
  --out <dir>          results directory (default bench/results) (BENCH_OUT)
  (BENCH_QUICK=1 is --quick)`;

function positive(name: string, raw: string, integer: boolean): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) throw new Error(`${name} must be a positive ${integer ? 'whole ' : ''}number, not "${raw}"`);
  return n;
}

/** Parses `argv` (after the script name) and `env`; throws with a message naming the bad option. */
export function parseBenchArgs(argv: readonly string[], env: NodeJS.ProcessEnv = {}): BenchOptions {
  const flags = new Map<string, string>();
  const switches = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--quick' || arg === '--no-nginx' || arg === '--no-node-peer' || arg === '--no-split' || arg === '--help') {
      switches.add(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (!name.startsWith('--') || value === undefined) throw new Error(`unknown or incomplete option "${arg}"\n${USAGE}`);
    flags.set(name.slice(2), value);
  }
  if (switches.has('--help')) throw new Error(USAGE);
  const pick = (flag: string, envName: string): string | undefined => flags.get(flag) ?? (env[envName] || undefined);
  const known = ['duration', 'warmup', 'rounds', 'connections', 'scenarios', 'loadgen', 'agents', 'download-mib', 'sse-requests', 'out'];
  for (const name of flags.keys()) if (!known.includes(name)) throw new Error(`unknown option "--${name}"\n${USAGE}`);

  const quick = switches.has('--quick') || env.BENCH_QUICK === '1';
  const base = quick ? QUICK : FULL;
  const value = (flag: string, envName: string, fallback: number, integer: boolean): number => {
    const raw = pick(flag, envName);
    return raw === undefined ? fallback : positive(`--${flag}`, raw, integer);
  };
  const loadgen = pick('loadgen', 'BENCH_LOADGEN') ?? 'auto';
  if (loadgen !== 'auto' && loadgen !== 'wrk' && loadgen !== 'autocannon') throw new Error(`--loadgen must be auto, wrk or autocannon, not "${loadgen}"`);
  const scenarios = pick('scenarios', 'BENCH_SCENARIOS');
  const downloadMiB = pick('download-mib', 'BENCH_DOWNLOAD_MIB');
  return {
    quick,
    durationSec: value('duration', 'BENCH_DURATION', base.durationSec, false),
    warmupSec: value('warmup', 'BENCH_WARMUP', base.warmupSec, false),
    warmupOnce: base.warmupOnce,
    rounds: value('rounds', 'BENCH_ROUNDS', base.rounds, true),
    connections: value('connections', 'BENCH_CONNECTIONS', base.connections, true),
    scenarios: scenarios === undefined ? null : scenarios.split(',').map((s) => s.trim()).filter(Boolean),
    loadgen,
    nginx: !switches.has('--no-nginx'),
    nodePeer: !switches.has('--no-node-peer'),
    split: !switches.has('--no-split'),
    outDir: pick('out', 'BENCH_OUT') ?? DEFAULT_RESULTS_DIR,
    agents: value('agents', 'BENCH_AGENTS', base.agents, true),
    downloadBytes: downloadMiB === undefined ? base.downloadBytes : Math.round(positive('--download-mib', downloadMiB, false) * 1024 ** 2),
    sseRequests: value('sse-requests', 'BENCH_SSE_REQUESTS', base.sseRequests, true),
  };
}
