// The bench's results: the JSON record of everything measured, a markdown summary
// (a table per scenario, memory, the audit check) and an SVG bar chart of the
// guard's ratios, hand-written. Files: <outDir>/<timestamp>.{json,md,svg} and
// <outDir>/latest.{md,svg}.
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchOptions } from './options.js';
import type { Column, Sample, Scenario } from './scenario.js';
import { median } from './stats.js';

export type RoundSamples = Record<string, Sample | { error: string }>;

/** A scenario as it ran: its description (from Scenario) and what it measured. */
export interface ScenarioResult extends Pick<Scenario, 'id' | 'title' | 'about' | 'columns' | 'headline' | 'subject'> {
  /** Why it did not run, or null. */
  skipped: string | null;
  variants: { name: string; label: string }[];
  rounds: RoundSamples[];
  /** Per variant, per metric: the median over rounds. */
  medians: Record<string, Record<string, number | null>>;
  /** Per variant, per ratio metric: median over rounds of (subject ÷ variant) in the same round. */
  ratios: Record<string, Record<string, number | null>>;
  seconds: number;
}

export interface AuditCheck {
  /** Rows in the audit store, summed over the bench's orgs (X-Total-Count). */
  rows: number;
  /** Answers the bench's clients received from the guard's proxy. */
  completed: number;
  /** Requests that may have been in flight when a load run stopped (connections × runs). */
  inFlightAtStop: number;
  flushed: boolean;
  ok: boolean;
  health: Record<string, unknown>;
  note: string;
}

export interface BenchReport {
  startedAt: string;
  seconds: number;
  options: BenchOptions;
  machine: Record<string, string | number>;
  loadGenerator: string;
  comparators: Record<string, string>;
  scenarios: ScenarioResult[];
  /** Per process: RSS once set up, RSS after each scenario, and peak RSS (VmHWM) at the end. */
  memory: Record<string, { atStartMiB: number | null; peakMiB: number | null; afterScenario: Record<string, number | null> }>;
  audit: AuditCheck | null;
  problems: string[];
}

function isSample(s: Sample | { error: string } | undefined): s is Sample {
  return s !== undefined && !('error' in s && typeof s.error === 'string');
}

/** Medians and paired ratios of a scenario's rounds. */
export function summarize(result: Pick<ScenarioResult, 'columns' | 'subject' | 'variants' | 'rounds'>): Pick<ScenarioResult, 'medians' | 'ratios'> {
  const medians: ScenarioResult['medians'] = {};
  const ratios: ScenarioResult['ratios'] = {};
  for (const { name } of result.variants) {
    medians[name] = {};
    ratios[name] = {};
    const samples = result.rounds.map((r) => r[name]).filter(isSample);
    for (const column of result.columns) {
      medians[name]![column.key] = median(samples.map((s) => s[column.key]));
      if (column.ratio !== true) continue;
      ratios[name]![column.key] = median(result.rounds.map((round) => {
        const subject = round[result.subject];
        const other = round[name];
        if (!isSample(subject) || !isSample(other)) return null;
        const a = subject[column.key];
        const b = other[column.key];
        return typeof a === 'number' && typeof b === 'number' && b !== 0 ? a / b : null;
      }));
    }
  }
  return { medians, ratios };
}

function fmt(value: number | null | undefined, digits: number): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function ratioText(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : value.toFixed(2);
}

function scenarioTable(s: ScenarioResult): string {
  const ratioColumns = s.columns.filter((c) => c.ratio === true);
  const head = ['variant', ...s.columns.map((c) => c.label), ...ratioColumns.map((c) => `${s.subject} ÷ this (${c.label})`)];
  const rows = s.variants.map(({ name }) => {
    const errors = s.rounds.map((r) => r[name]).filter((x): x is { error: string } => x !== undefined && !isSample(x));
    const cells = [
      `${name}${errors.length > 0 ? ` (${errors.length} failed)` : ''}`,
      ...s.columns.map((c) => fmt(s.medians[name]?.[c.key], c.digits)),
      ...ratioColumns.map((c) => (name === s.subject ? '1.00' : ratioText(s.ratios[name]?.[c.key]))),
    ];
    return `| ${cells.join(' | ')} |`;
  });
  return [`| ${head.join(' | ')} |`, `|${head.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`, ...rows].join('\n');
}

const SUMMARY_BASELINES = ['direct', 'nginx', 'node-peer', 'bare', 'guard-split'];

/** The one-line-per-scenario table at the top. */
function summaryTable(report: BenchReport): string {
  const lines = [
    '| scenario | metric | guard | guard ÷ direct | guard ÷ nginx | guard ÷ node-peer | guard ÷ bare | guard ÷ own baseline | guard CPU µs/req |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const s of report.scenarios) {
    if (s.skipped !== null) {
      lines.push(`| ${s.title} | skipped: ${s.skipped} | | | | | | | |`);
      continue;
    }
    const column = s.columns.find((c) => c.key === s.headline)!;
    const own = s.variants.find((v) => v.name !== s.subject && !SUMMARY_BASELINES.includes(v.name));
    const ratio = (name: string): string => (s.variants.some((v) => v.name === name) ? ratioText(s.ratios[name]?.[s.headline]) : '');
    lines.push(`| ${s.title} | ${column.label} | ${fmt(s.medians[s.subject]?.[s.headline], column.digits)} | ${ratio('direct')} | ${ratio('nginx')} | ${ratio('node-peer')} | ${ratio('bare')} | ${own !== undefined ? `${ratio(own.name)} (vs ${own.name})` : ''} | ${fmt(s.medians[s.subject]?.cpu, 1)} |`);
  }
  return lines.join('\n');
}

/**
 * Issue 12's goals, each with the ratio this run measured and whether it is met.
 * `ratio` is guard ÷ comparator for a scenario's metric (req/s: higher is
 * better; CPU µs/req: lower is better).
 */
const GOALS: readonly { goal: string; scenario: string; comparator: string; metric: string; atLeast?: number; atMost?: number }[] = [
  { goal: 'small GET req/s ≥ 0.5× nginx (aim 0.75×)', scenario: 'small-get', comparator: 'nginx', metric: 'rps', atLeast: 0.5 },
  { goal: '64 KiB GET req/s ≥ 0.45× nginx', scenario: 'get-64k', comparator: 'nginx', metric: 'rps', atLeast: 0.45 },
  { goal: '16 KiB POST req/s ≥ 0.5× nginx', scenario: 'post-16k', comparator: 'nginx', metric: 'rps', atLeast: 0.5 },
  { goal: 'small GET CPU µs/req ≤ 1.3× the bare uWS + undici forwarder', scenario: 'small-get', comparator: 'bare', metric: 'cpu', atMost: 1.3 },
  { goal: 'small GET req/s ≥ 3× @fastify/http-proxy', scenario: 'small-get', comparator: 'node-peer', metric: 'rps', atLeast: 3 },
  // guard ÷ guard-split at most 1: the split-mode proxy serves at least the all-in-one's rate.
  { goal: 'split-mode proxy at least as fast as all-in-one (small GET req/s, all-in-one ÷ split)', scenario: 'small-get', comparator: 'guard-split', metric: 'rps', atMost: 1 },
];

export function goalsTable(report: BenchReport): string {
  const lines = ['| goal | measured (guard ÷ comparator) | verdict |', '|---|---:|---|'];
  for (const g of GOALS) {
    const s = report.scenarios.find((x) => x.id === g.scenario);
    const ratio = s !== undefined && s.skipped === null ? s.ratios[g.comparator]?.[g.metric] : undefined;
    if (ratio === undefined || ratio === null || !Number.isFinite(ratio)) {
      lines.push(`| ${g.goal} | – | not measured (${s === undefined ? 'scenario not run' : s.skipped ?? `no ${g.comparator} in this run`}) |`);
      continue;
    }
    const met = g.atLeast !== undefined ? ratio >= g.atLeast : ratio <= g.atMost!;
    lines.push(`| ${g.goal} | ${ratioText(ratio)} | ${met ? 'met' : 'not met'} |`);
  }
  // The split processes start with every run; their peak says nothing unless a scenario loaded them.
  const splitLoaded = report.scenarios.some((x) => x.skipped === null && x.variants.some((v) => v.name === 'guard-split'));
  const splitPeak = splitLoaded ? report.memory['guard-split']?.peakMiB : undefined;
  lines.push(
    splitPeak === undefined || splitPeak === null
      ? `| split-mode proxy RSS under load ≤ 150 MB | – | not measured (${splitLoaded ? 'no split mode in this run' : 'no scenario of this run loaded the split proxy'}) |`
      : `| split-mode proxy RSS under load ≤ 150 MB | peak ${splitPeak.toFixed(0)} MiB | ${splitPeak * 1.048576 <= 150 ? 'met' : 'not met'} |`,
    fixedRateGoal(report),
    auditShareGoal(report),
  );
  return lines.join('\n');
}

/** Issue 12: the guard's p99 at the fixed rate within 1 ms of direct's (a difference of medians over rounds, not a ratio). */
function fixedRateGoal(report: BenchReport): string {
  const goal = '| fixed-rate p99 at 2,000 req/s within 1 ms of direct |';
  const s = report.scenarios.find((x) => x.id === 'fixed-rate');
  if (s === undefined || s.skipped !== null) return `${goal} – | not measured (${s === undefined ? 'scenario not run' : s.skipped}) |`;
  const guard = s.medians.guard?.p99;
  const direct = s.medians.direct?.p99;
  if (guard === undefined || guard === null || direct === undefined || direct === null) return `${goal} – | not measured (no guard or direct in this run) |`;
  const diff = guard - direct;
  return `${goal} ${guard.toFixed(2)} ms vs ${direct.toFixed(2)} ms (${diff >= 0 ? '+' : ''}${diff.toFixed(2)} ms) | ${diff <= 1 ? 'met' : 'not met'} |`;
}

/**
 * Issue 12: the audit at most 10 % of the guard's CPU. The share and its parts
 * come from one round, the median one by share (the lower of the middle two),
 * so that the parts add up to the share shown.
 */
function auditShareGoal(report: BenchReport): string {
  const goal = '| audit ≤ 10 % of the guard\'s CPU |';
  const s = report.scenarios.find((x) => x.id === 'audit-share');
  if (s === undefined || s.skipped !== null) return `${goal} – | not measured (${s === undefined ? 'scenario not run' : s.skipped}) |`;
  const rounds = s.rounds.map((r, i) => ({ sample: r[s.subject], round: i + 1 }))
    .filter((r): r is { sample: Sample; round: number } => isSample(r.sample) && typeof r.sample.auditShare === 'number')
    .sort((a, b) => a.sample.auditShare! - b.sample.auditShare!);
  const middle = rounds[Math.floor((rounds.length - 1) / 2)];
  if (middle === undefined) return `${goal} – | not measured (the profiled guard gave no reading) |`;
  const m = middle.sample;
  const share = m.auditShare!;
  const of = rounds.length > 1 ? `, round ${middle.round} of ${rounds.length}, the median` : '';
  return `${goal} ${share.toFixed(1)} % (event loop ${fmt(m.auditLoop, 1)} + chDB ${fmt(m.engine, 1)} of ${fmt(m.cpu, 1)} µs a call${of}) | ${share <= 10 ? 'met' : 'not met'} |`;
}

export function renderMarkdown(report: BenchReport, svgFile: string | null): string {
  const o = report.options;
  const out: string[] = [];
  out.push(`# Tool-Call Guard bench, ${report.startedAt}`, '');
  out.push(`${o.quick ? 'Quick run' : 'Full run'}: ${o.rounds} round(s), ${o.durationSec} s measured (+${o.warmupSec} s warm-up ${o.warmupOnce ? 'before each comparator\'s first run' : 'before every run'}) per load run, ${o.connections} connections, load generator ${report.loadGenerator}; took ${report.seconds.toFixed(0)} s.`);
  out.push(`Machine: ${Object.entries(report.machine).map(([k, v]) => `${k} ${v}`).join(', ')}.`, '');
  out.push('Comparators:', ...Object.entries(report.comparators).map(([name, note]) => `- \`${name}\`: ${note}`), '');
  out.push('Ratios are guard ÷ comparator, the median of per-round ratios (comparators are interleaved in every round). ' +
    'For req/s and MiB/s below 1 means the guard is slower; for latency and CPU above 1 means the guard costs more. See bench/README.md.', '');
  out.push('## Summary', '', summaryTable(report), '');
  out.push('## Against the performance goals (issue 12)', '', goalsTable(report), '');
  if (svgFile !== null) out.push(`![guard ÷ comparator, headline metric](${svgFile})`, '');
  if (report.problems.length > 0) out.push('## Problems seen', '', ...report.problems.map((p) => `- ${p}`), '');
  for (const s of report.scenarios) {
    out.push(`## ${s.title} (\`${s.id}\`)`, '', s.about, '');
    if (s.skipped !== null) {
      out.push(`Skipped: ${s.skipped}`, '');
      continue;
    }
    out.push(scenarioTable(s), '');
    out.push(...s.variants.map((v) => `- \`${v.name}\`: ${v.label}`), '');
    const failures = s.rounds.flatMap((r, i) => Object.entries(r).filter(([, x]) => !isSample(x)).map(([name, x]) => `round ${i + 1} ${name}: ${(x as { error: string }).error}`));
    if (failures.length > 0) out.push('Failures:', ...failures.map((f) => `- ${f}`), '');
  }
  const ran = report.scenarios.filter((s) => s.skipped === null);
  out.push('## Memory', '', 'Resident memory (MiB) of each process: once set up, after each scenario, and its peak (VmHWM) over the run.', '');
  out.push(`| process | set up | ${ran.map((s) => `after ${s.id}`).join(' | ')} | peak |`);
  out.push(`|---|---:|${ran.map(() => '---:').join('|')}|---:|`);
  for (const [name, m] of Object.entries(report.memory)) {
    out.push(`| ${name} | ${fmt(m.atStartMiB, 1)} | ${ran.map((s) => fmt(m.afterScenario[s.id], 1)).join(' | ')} | ${fmt(m.peakMiB, 1)} |`);
  }
  out.push('');
  out.push('## Audit check', '');
  const a = report.audit;
  if (a === null) {
    out.push('Not run (the bench stopped before it).');
  } else {
    out.push(`- audit rows (X-Total-Count of GET /audit, summed over the bench's orgs): **${a.rows}**`);
    out.push(`- answers the bench's clients received from the guard's proxy: **${a.completed}**`);
    out.push(`- allowance for calls in flight when a load run stopped (connections × load runs): ${a.inFlightAtStop}`);
    out.push(`- audit batcher flushed before counting: ${a.flushed ? 'yes' : 'NO'}; guard /health at the end: \`${JSON.stringify(a.health)}\``);
    out.push(`- result: **${a.ok ? 'OK' : 'MISMATCH'}** (expected completed ≤ rows ≤ completed + allowance)`);
    out.push('', a.note);
  }
  out.push('');
  return out.join('\n');
}

/** Horizontal bars of guard ÷ comparator on each scenario's headline metric; a line marks 1.0. */
export function renderSvg(report: BenchReport): string {
  const bars: { label: string; value: number; better: 'higher' | 'lower' }[] = [];
  for (const s of report.scenarios) {
    if (s.skipped !== null) continue;
    const column = s.columns.find((c) => c.key === s.headline)!;
    for (const v of s.variants) {
      if (v.name === s.subject) continue;
      const value = s.ratios[v.name]?.[s.headline];
      if (typeof value === 'number') bars.push({ label: `${s.id}: guard ÷ ${v.name} (${column.label})`, value, better: column.better });
    }
  }
  const width = 860;
  const labelWidth = 380;
  const barHeight = 18;
  const gap = 6;
  const top = 40;
  const height = top + bars.length * (barHeight + gap) + 30;
  const max = Math.max(1.25, ...bars.map((b) => b.value)) * 1.1;
  const scale = (width - labelWidth - 70) / max;
  const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="22" font-size="14" font-weight="bold">Tool-Call Guard bench ${esc(report.startedAt)}: guard ÷ comparator (green: guard better, red: guard worse)</text>`,
  ];
  bars.forEach((b, i) => {
    const y = top + i * (barHeight + gap);
    const guardBetter = b.better === 'higher' ? b.value >= 1 : b.value <= 1;
    parts.push(
      `<text x="${labelWidth - 8}" y="${y + barHeight - 5}" text-anchor="end">${esc(b.label)}</text>`,
      `<rect x="${labelWidth}" y="${y}" width="${(b.value * scale).toFixed(1)}" height="${barHeight}" fill="${guardBetter ? '#4a9a5b' : '#c0504d'}"/>`,
      `<text x="${(labelWidth + b.value * scale + 5).toFixed(1)}" y="${y + barHeight - 5}">${b.value.toFixed(2)}</text>`,
    );
  });
  const one = labelWidth + scale;
  parts.push(
    `<line x1="${one.toFixed(1)}" y1="${top - 6}" x2="${one.toFixed(1)}" y2="${height - 24}" stroke="#333" stroke-dasharray="4 3"/>`,
    `<text x="${one.toFixed(1)}" y="${height - 10}" text-anchor="middle">1.0</text>`,
    '</svg>',
  );
  return parts.join('\n') + '\n';
}

/** Writes <stamp>.json, <stamp>.md, <stamp>.svg, latest.md and latest.svg; returns their paths. */
export function writeReport(report: BenchReport, outDir: string): { json: string; markdown: string; latest: string; svg: string } {
  mkdirSync(outDir, { recursive: true });
  const stamp = report.startedAt.replace(/[:.]/g, '-');
  const json = join(outDir, `${stamp}.json`);
  const markdown = join(outDir, `${stamp}.md`);
  const svg = join(outDir, `${stamp}.svg`);
  const latest = join(outDir, 'latest.md');
  writeFileSync(json, JSON.stringify(report, null, 2) + '\n');
  writeFileSync(svg, renderSvg(report));
  writeFileSync(markdown, renderMarkdown(report, `${stamp}.svg`));
  writeFileSync(latest, renderMarkdown(report, 'latest.svg'));
  copyFileSync(svg, join(outDir, 'latest.svg'));
  return { json, markdown, latest, svg };
}
