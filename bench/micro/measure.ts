// How every micro-benchmark in this folder measures and prints: ns per call of
// one operation, in this process, after a warm-up. Numbers vary with the
// machine and its load: compare runs side by side, and read
// docs/performance.md for the whole call.
import { argv } from 'node:process';
import { pathToFileURL } from 'node:url';

export interface Result {
  name: string;
  nsPerOp: number;
}

/**
 * One file's cases: its set-up runs when they are measured, not when the file
 * is imported, so that the runner (hot-path.ts) holds one file's fixtures at a time.
 */
export type MicroCases = () => Result[] | Promise<Result[]>;

/**
 * Runs `op` in batches for about `ms` after a warm-up; ns per call, the best of 5 batches.
 * The warm-up is 20,000 calls, cut short at `ms`; each batch times its calls 1,000 at a
 * time, fewer when a call takes longer than ms/20,000 (a 10,000-rule policy takes
 * milliseconds), so that every batch still stops near ms/5.
 */
/** ms a case is measured for: 300, or MICRO_MS (a test runs every file with a few, to see that each runs). */
const CASE_MS = Number(process.env.MICRO_MS) > 0 ? Number(process.env.MICRO_MS) : 300;

export function measure(name: string, op: (i: number) => unknown, ms = CASE_MS): Result {
  let sink: unknown;
  const warmStart = performance.now();
  let warmed = 0;
  while (warmed < 20_000 && performance.now() - warmStart < ms) sink = op(warmed++);
  const msPerCall = (performance.now() - warmStart) / warmed;
  const perTiming = Math.max(1, Math.min(1000, Math.floor(ms / 20 / msPerCall)));
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    let n = 0;
    const start = performance.now();
    let now = start;
    while (now - start < ms / 5) {
      for (let i = 0; i < perTiming; i++) sink = op(n + i);
      n += perTiming;
      now = performance.now();
    }
    best = Math.min(best, ((now - start) * 1e6) / n);
  }
  if (sink === Symbol.for('never')) console.log(sink);
  return { name, nsPerOp: best };
}

/** The results as a markdown table, `name | ns/op`; a group's heading row before its results. */
export function resultTable(groups: readonly { heading: string | null; results: readonly Result[] }[]): string {
  const lines = ['| piece | ns/op |', '|---|---:|'];
  for (const { heading, results } of groups) {
    if (heading !== null) lines.push(`| **${heading}** | |`);
    for (const r of results) lines.push(`| ${r.name} | ${r.nsPerOp.toFixed(0)} |`);
  }
  return lines.join('\n');
}

/** When the file at `moduleUrl` is the one node was started with, measures `cases` and prints their table. */
export function runWhenMain(moduleUrl: string, cases: MicroCases): void {
  if (argv[1] === undefined || pathToFileURL(argv[1]).href !== moduleUrl) return;
  void Promise.resolve().then(cases).then(
    (results) => console.log(resultTable([{ heading: null, results }])),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
