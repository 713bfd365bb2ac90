// The bench works end to end (it asserts no speed): a tiny --quick run of three
// scenarios against the real guard (all-in-one and split mode), upstream, the Node peer
// and the bare forwarder, driven by
// autocannon (the default on a machine without wrk), with the audit
// check exact against the guard's own count of proxied calls.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parseBenchArgs, runBench } from '../../bench/run.js';

t.test('npm run bench -- --quick runs, reports every comparator, and the audit rows match', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'tcg-bench-test-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const lines: string[] = [];
  const { report, files } = await runBench(
    parseBenchArgs(['--quick', '--duration', '1', '--scenarios', 'small-get,policy-denied,audit-share', '--loadgen', 'autocannon', '--no-nginx', '--out', out]),
    (line) => lines.push(line),
  );
  t.same(report.problems, [], 'no problems reported');
  t.same(report.scenarios.map((s) => s.id).sort(), ['audit-share', 'policy-denied', 'small-get']);
  const small = report.scenarios.find((s) => s.id === 'small-get')!;
  t.ok((small.medians.guard?.rps ?? 0) > 0, 'the guard answered under load');
  t.ok((small.medians.direct?.rps ?? 0) > 0, 'direct ran beside it');
  t.ok((small.medians.bare?.rps ?? 0) > 0, 'and the bare uWS + undici forwarder (the floor)');
  t.ok(Number.isFinite(small.ratios.bare?.cpu ?? NaN), 'CPU per request against the floor');
  t.ok((small.medians['guard-split']?.rps ?? 0) > 0, 'and the guard in split mode');
  t.ok(small.ratios.guard !== undefined, 'ratios computed');
  t.ok(report.audit?.ok, `audit check: ${report.audit?.note}`);
  const share = report.scenarios.find((s) => s.id === 'audit-share')!.medians['guard-profiled']!;
  t.ok(share.auditShare! > 0 && share.auditShare! < 100, `the audit's share of a profiled guard's CPU: ${share.auditShare} %`);
  t.ok(share.auditLoop! > 0 && share.auditLoop! < share.loop!, 'its event-loop part is some of the loop\'s CPU');
  t.ok(share.engine! >= 0 && share.loop! + share.engine! <= share.cpu! * 1.001, 'the engine\'s threads and the loop within the process\'s CPU');
  const markdown = readFileSync(files.markdown, 'utf8');
  t.match(markdown, /## Summary/);
  t.match(markdown, /\| small GET CPU µs\/req ≤ 1\.3× the bare uWS \+ undici forwarder \| [0-9.]+ \| (met|not met) \|/, 'the goals, each marked');
  t.match(markdown, /small GET req\/s ≥ 0\.5× nginx .* \| not measured/, 'a goal whose comparator did not run says so');
  t.match(markdown, /\| audit ≤ 10 % of the guard's CPU \| [0-9.]+ % \(event loop [0-9.,]+ \+ chDB [0-9.,]+ of [0-9.,]+ µs a call\) \| (met|not met) \|/, 'the audit\'s share, measured');
  t.match(markdown, /\| split-mode proxy RSS under load ≤ 150 MB \| peak \d+ MiB \| (met|not met) \|/);
  t.ok(lines.length > 3, 'progress printed while it ran');
});
