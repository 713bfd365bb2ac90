// The bench's goals table (bench/report.ts) from hand-made reports: a goal is
// judged only on what the run measured, and the audit's share shows one round's
// parts, the median round's, so that they add up to the share shown.
import t from 'tap';
import { goalsTable, type BenchReport, type ScenarioResult } from '../../bench/report.js';
import { parseBenchArgs } from '../../bench/options.js';

function scenario(id: string, subject: string, variants: string[], rounds: ScenarioResult['rounds'] = []): ScenarioResult {
  return {
    id, title: id, about: '', columns: [], headline: 'rps', subject, skipped: null,
    variants: variants.map((name) => ({ name, label: name })), rounds, medians: {}, ratios: {}, seconds: 1,
  };
}

function report(scenarios: ScenarioResult[]): BenchReport {
  return {
    startedAt: '2026-11-27T00:00:00Z', seconds: 1, options: parseBenchArgs(['--quick']), machine: {}, loadGenerator: 'wrk',
    comparators: {}, scenarios, audit: null, problems: [],
    // The split processes start with every run, so they always have a peak.
    memory: { 'guard-split': { atStartMiB: 80, peakMiB: 100, afterScenario: {} } },
  };
}

const line = (table: string, goal: string): string => table.split('\n').find((l) => l.startsWith(`| ${goal}`)) ?? '';

t.test('the split proxy\'s RSS is judged only when a scenario loaded it', async (t) => {
  const idle = goalsTable(report([scenario('policy-denied', 'guard', ['guard', 'guard-allowed'])]));
  t.match(line(idle, 'split-mode proxy RSS'), /\| – \| not measured \(no scenario of this run loaded the split proxy\) \|$/);
  const loaded = goalsTable(report([scenario('small-get', 'guard', ['direct', 'guard', 'guard-split'])]));
  t.match(line(loaded, 'split-mode proxy RSS'), /\| peak 100 MiB \| met \|$/);
});

t.test('the audit\'s share shows the median round with its own parts', async (t) => {
  const round = (auditShare: number, auditLoop: number, engine: number, cpu: number) => ({ 'guard-profiled': { auditShare, auditLoop, engine, cpu } });
  const rounds = [round(21, 9, 6, 71.4), round(19, 8, 5, 68.4), round(25, 12, 8, 80)];
  const table = goalsTable(report([scenario('audit-share', 'guard-profiled', ['guard-profiled'], rounds)]));
  t.match(line(table, 'audit ≤ 10 %'), /\| 21\.0 % \(event loop 9\.0 \+ chDB 6\.0 of 71\.4 µs a call, round 1 of 3, the median\) \| not met \|$/);
  const failed = goalsTable(report([scenario('audit-share', 'guard-profiled', ['guard-profiled'], [{ 'guard-profiled': { error: 'no profile' } }])]));
  t.match(line(failed, 'audit ≤ 10 %'), /not measured \(the profiled guard gave no reading\)/);
  const met = goalsTable(report([scenario('audit-share', 'guard-profiled', ['guard-profiled'], [round(9.5, 4, 2.5, 68.4)])]));
  t.match(line(met, 'audit ≤ 10 %'), /\| 9\.5 % \(event loop 4\.0 \+ chDB 2\.5 of 68\.4 µs a call\) \| met \|$/);
});
