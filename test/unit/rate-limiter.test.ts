// The rate limiter's arithmetic with a clock the test moves: the contract's
// promise (at most N + burst in any window of the rate's length, N + burst at
// once from rest), how early a refusal may come (one slot, W/16), Retry-After,
// idle counters dropped, a full table refusing; and two proxies sharing limits
// through a real SQLite metadata store, with the over-admission bound that
// docs/api.md states.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { eventually } from '../support/eventually.js';
import { parsePolicy, type CompiledLimit } from '../../shared/policy/index.js';
import { createMetadataStore } from '../../shared/stores/metadata-store.js';
import { SqliteMetadataDriver } from '../../shared/stores/sqlite/sqlite-metadata-driver.js';
import { startRateLimitSync } from '../../proxy/rate-limit-sync.js';
import { RateLimiter, SLOTS } from '../../proxy/rate-limiter.js';
import { createLogger } from '../../shared/log.js';

function limitsOf(limits: string): readonly CompiledLimit[] {
  return parsePolicy(`version: "1"\nrules: []\nlimits:\n${limits}`).limits;
}

function limiterAt(clock: { now: number }, maxCounters = 1000): RateLimiter {
  return new RateLimiter({ maxCounters, now: () => clock.now });
}

t.test('in any window of the rate, at most N + burst pass; a refusal comes at most one slot early (property)', async (t) => {
  const units = { second: 1000, minute: 60_000 } as const;
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 20 }),
      fc.integer({ min: 0, max: 5 }),
      fc.constantFrom<keyof typeof units>('second', 'minute'),
      fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 400 }),
      fc.integer({ min: 0, max: 2 ** 40 }),
      (n, burst, unit, gaps, start) => {
        const windowMs = units[unit];
        const [limit] = limitsOf(`  - name: l\n    tool: "*"\n    rate: ${n}/${unit}\n    burst: ${burst}\n`);
        const clock = { now: start };
        const limiter = limiterAt(clock);
        const passed: number[] = [];
        for (const gap of gaps) {
          // Arrivals from bursts (gap 0) to a quarter window apart, on whole milliseconds.
          clock.now += Math.floor(gap * gap * windowMs * 0.25);
          const verdict = limiter.decide('agent', [limit!], 'api.example', 'GET', '/');
          if (verdict!.refused === null) {
            passed.push(clock.now);
            // The window ending now holds at most N + burst calls.
            const inWindow = passed.filter((at) => at > clock.now - windowMs).length;
            if (inWindow > n + burst) return false;
          } else {
            // An exact log would refuse too once one slot earlier is counted.
            const inWiderWindow = passed.filter((at) => at > clock.now - windowMs - windowMs / SLOTS).length;
            if (inWiderWindow < n + burst) return false;
            const retryAt = clock.now + verdict!.retryAfter * 1000;
            // Retry-After is honest: by then the window ending at retryAt holds room.
            if (passed.filter((at) => at > retryAt - windowMs).length >= n + burst) return false;
          }
        }
        return true;
      },
    ),
    { numRuns: 300 },
  );
  t.pass('no window over-admitted, no refusal more than a slot early, every Retry-After honest');
});

t.test('from rest N + burst pass at once; the next is refused until the first leaves the window', async (t) => {
  const clock = { now: 1_700_000_000_000 };
  const limiter = limiterAt(clock);
  const limits = limitsOf('  - name: m\n    tool: "*"\n    rate: 5/minute\n    burst: 2\n');
  const verdicts = Array.from({ length: 8 }, () => limiter.decide('a', limits, 'h', 'GET', '/')!);
  t.strictSame(verdicts.map((v) => v.refused === null), [true, true, true, true, true, true, true, false]);
  t.equal(verdicts[0]!.stateHeader.replace(/;t=\d+$/, ''), '"m";r=6');
  t.equal(verdicts[0]!.policyHeader, '"m";q=7;w=60');
  const wait = verdicts[7]!.retryAfter;
  t.ok(wait >= 60 && wait <= 64, `Retry-After ${wait} s`);
  clock.now += (wait - 1) * 1000;
  t.not(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'still refused a second before');
  clock.now += 1000;
  t.equal(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'admitted at Retry-After');
  t.equal(limiter.decide('b', limits, 'h', 'GET', '/')!.refused, null, 'another agent has its own counter');
  t.equal(limiter.decide('a', limitsOf('  - name: other\n    tool: "x"\n    rate: 1/day\n'), 'h', 'GET', '/'), null, 'no matching limit: nothing counted, no verdict');
});

t.test('a call taken back (refund of lastCharge) frees its place in every limit it was counted in', async (t) => {
  const clock = { now: 1_700_000_000_000 };
  const limiter = limiterAt(clock);
  const limits = limitsOf('  - name: m\n    tool: "*"\n    rate: 2/minute\n  - name: h\n    tool: "*"\n    rate: 3/hour\n');
  t.equal(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null);
  t.equal(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null);
  const charge = limiter.lastCharge();
  t.equal(charge.length, 8, 'the second call, counted in two limits');
  t.not(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'the minute is full');
  limiter.refund(charge);
  clock.now += 1000;
  const again = limiter.decide('a', limits, 'h', 'GET', '/')!;
  t.equal(again.refused, null, 'room again after the refund');
  t.match(again.stateHeader, /"h";r=1/, 'the hour counts two calls, not three');
  limiter.refund([charge[0]! + 999, 0, 1, 1]); // a counter never used: ignored
  t.pass('a charge naming no live counter is ignored');
});

t.test('a limit on an MCP tool counts each request of a batch that names it; a batch over the quota never passes', async (t) => {
  const clock = { now: 1_700_000_000_000 };
  const limiter = limiterAt(clock);
  const limits = limitsOf('  - name: mail\n    tool: "*"\n    mcp_tool: send_email\n    rate: 5/minute\n  - name: posts\n    tool: "*"\n    rate: 100/minute\n');
  const call = (tool: string) => ({ method: 'tools/call', tool });
  const batch = (n: number) => [...Array.from({ length: n }, () => call('send_email')), call('list_inbox')];
  const first = limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(3))!;
  t.equal(first.refused, null, 'three of five');
  t.match(first.stateHeader, /"mail";r=2/, 'two left: the batch counted three');
  t.match(first.stateHeader, /"posts";r=99/, 'a limit without MCP fields counts the HTTP call once');
  t.equal(limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(3))!.refused?.name, 'mail', 'three more do not fit in two');
  t.equal(limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(2))!.refused, null, 'two do');
  const charge = limiter.lastCharge();
  limiter.refund(charge);
  t.equal(limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(2))!.refused, null, 'a refund gives back all two');
  clock.now += 120_000;
  const tooBig = limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(1000))!;
  t.equal(tooBig.refused?.name, 'mail', 'a batch of 1,000 against 5 a minute: refused at rest too');
  t.same(tooBig.neverFits, { calls: 1000, most: 5 }, 'refused for good: the agent is told to split it');
  t.equal(limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(5))!.neverFits, null, 'a batch that fits the quota is no such refusal');
  t.equal(limiter.decide('a', limits, 'h', 'POST', '/mcp', batch(5))!.neverFits, null, 'nor when the window is only used up');
  const noTool = limiter.decide('a', limits, 'h', 'POST', '/mcp', [call('list_inbox')])!;
  t.equal(noTool.refused, null);
  t.notMatch(noTool.stateHeader, /"mail"/, 'a batch without the tool is not counted by the mail limit');
});

t.test('a clock that goes back more than a window: calls counted meanwhile stay in the window, not in an older slot that leaves it early', async (t) => {
  const clock = { now: 1_700_000_040_000 };
  const limiter = limiterAt(clock);
  const limits = limitsOf('  - name: m\n    tool: "*"\n    rate: 2/minute\n');
  t.equal(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'one of two');
  clock.now -= 5 * 60_000;
  t.equal(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'two of two, the clock five minutes back');
  clock.now += 5 * 60_000 + 20_000;
  t.not(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'back at the first call\'s time + 20 s: both still count');
});

t.test('idle counters are swept; a table full of live counters refuses new ones', async (t) => {
  const clock = { now: 5_000_000 };
  const limiter = limiterAt(clock, 1000);
  const limits = limitsOf('  - name: s\n    tool: "*"\n    rate: 10/second\n');
  for (let i = 0; i < 1000; i++) limiter.decide(`agent-${i}`, limits, 'h', 'GET', '/');
  t.equal(limiter.size, 1000);
  const full = limiter.decide('one-too-many', limits, 'h', 'GET', '/')!;
  t.ok(full.refused !== null, 'refused: no room for a counter, and none idle');
  clock.now += 1100;
  t.equal(limiter.decide('one-too-many', limits, 'h', 'GET', '/')!.refused, null, 'once the others are idle, they are swept and it fits');
  t.equal(limiter.sweep(), 0, 'the sweep already ran');
  clock.now += 2000;
  t.equal(limiter.sweep(), 1);
  t.equal(limiter.size, 0);
});

t.test('two proxies sharing a limit through one SQLite store never pass more than N + burst together', async (t) => {
  const store = createMetadataStore(SqliteMetadataDriver.open(':memory:'));
  t.teardown(() => store.close());
  const clock = { now: 1_800_000_000_000 };
  const limits = limitsOf('  - name: shared\n    tool: "*"\n    rate: 100/minute\n');
  const syncMs = 1000;
  const proxies = ['node-a', 'node-b'].map((id) => ({ id, limiter: limiterAt(clock), readSince: 0, passed: 0 }));
  for (const p of proxies) p.limiter.startSyncing(syncMs, 5 * syncMs);
  async function sync(p: (typeof proxies)[number]) {
    const add = p.limiter.takeAdmitted();
    const result = await store.syncRateCounts({ node_id: p.id, now: clock.now, live_after: clock.now - 5 * syncMs, add, changed_since: p.readSince });
    p.limiter.applySync(result.nodes, p.id, result.rows);
    p.readSince = clock.now - 5000;
  }
  for (const p of proxies) await sync(p);
  // 40 s: each proxy gets a call every 5 ms (A's and B's interleaved), and syncs
  // once a second, B half a second after A.
  for (let ms = 0; ms < 40_000; ms += 5) {
    clock.now += 5;
    for (const p of proxies) if (p.limiter.decide('agent', limits, 'h', 'GET', '/')!.refused === null) p.passed++;
    if (ms % 1000 === 0) await sync(proxies[0]!);
    if (ms % 1000 === 500) await sync(proxies[1]!);
  }
  t.equal(proxies[0]!.passed + proxies[1]!.passed, 100, 'together exactly N = 100 in 40 s of one minute\'s window: the quota, no more');
  t.strictSame(proxies.map((p) => p.passed), [50, 50], 'each its part');

  // B stops syncing (it stopped or lost the store): once it is no longer live, A
  // holds the whole quota, and B's calls still in the window keep counting.
  for (let ms = 0; ms < 10_000; ms += 5) {
    clock.now += 5;
    if (proxies[0]!.limiter.decide('agent', limits, 'h', 'GET', '/')!.refused === null) proxies[0]!.passed++;
    if (ms % 1000 === 0) await sync(proxies[0]!);
  }
  t.equal(proxies[0]!.passed, 50, "alone now, A still counts B's 50 in the window: no room");
  clock.now += 20_000; // the first calls leave the minute
  for (let ms = 0; ms < 2000; ms += 5) {
    clock.now += 5;
    if (proxies[0]!.limiter.decide('agent', limits, 'h', 'GET', '/')!.refused === null) proxies[0]!.passed++;
    if (ms % 1000 === 0) await sync(proxies[0]!);
  }
  t.equal(proxies[0]!.passed, 150, 'a minute on, A takes the whole quota again');
});

t.test('a per-second limit syncs through SQLite (its 62.5 ms slots end on half milliseconds)', async (t) => {
  const store = createMetadataStore(SqliteMetadataDriver.open(':memory:'));
  t.teardown(() => store.close());
  const clock = { now: 1_800_000_000_001 };
  const limiter = limiterAt(clock);
  limiter.startSyncing(250, 2000);
  const limits = limitsOf('  - name: s\n    tool: "*"\n    rate: 10/second\n');
  const sync = async () => {
    const result = await store.syncRateCounts({ node_id: 'n', now: clock.now, live_after: clock.now - 2000, add: limiter.takeAdmitted(), changed_since: 0 });
    limiter.applySync(result.nodes, 'n', result.rows);
    return result;
  };
  await sync();
  clock.now += 250;
  await sync();
  clock.now += 250;
  let passed = 0;
  for (let i = 0; i < 20; i++) {
    clock.now += 31; // odd steps: slots of both parities, all within the second
    if (limiter.decide('a', limits, 'h', 'GET', '/')!.refused === null) passed++;
  }
  const result = await sync();
  t.ok(passed > 0, `${passed} passed`);
  t.equal(result.rows.reduce((sum, row) => sum + row.count, 0), passed, 'every admitted call reached the store');
  t.ok(result.rows.every((row) => Number.isInteger(row.expires_at)), 'expiries are whole milliseconds');
});

t.test('a proxy whose store never answered counts alone after the grace period; before it, refuses with an honest wait', async (t) => {
  const clock = { now: 1_900_000_000_000 };
  const limiter = limiterAt(clock);
  limiter.startSyncing(250, 2000);
  const limits = limitsOf('  - name: m\n    tool: "*"\n    rate: 3/minute\n');
  const early = limiter.decide('a', limits, 'h', 'GET', '/')!;
  t.not(early.refused, null, 'not yet: the others may not know it');
  t.equal(early.retryAfter, 1);
  t.match(early.stateHeader, /;r=0;/, 'and says no call is left');
  clock.now += 2000;
  const verdicts = Array.from({ length: 4 }, () => limiter.decide('a', limits, 'h', 'GET', '/')!.refused === null);
  t.strictSame(verdicts, [true, true, true, false], 'past the grace period: the whole quota, alone');
});

t.test('a proxy whose store answered once, then never again, counts by its share after the grace period: it does not refuse every call', async (t) => {
  const clock = { now: 1_900_000_100_000 };
  const limiter = limiterAt(clock);
  limiter.startSyncing(250, 2000);
  limiter.applySync(['a-proxy', 'n'], 'n', []); // the one sync that succeeded: two proxies live
  const limits = limitsOf('  - name: m\n    tool: "*"\n    rate: 4/minute\n');
  t.not(limiter.decide('a', limits, 'h', 'GET', '/')!.refused, null, 'not yet, as before the second sync');
  clock.now += 60_000; // the store has been down since
  const verdicts = Array.from({ length: 3 }, () => limiter.decide('a', limits, 'h', 'GET', '/')!.refused === null);
  t.strictSame(verdicts, [true, true, false], 'its half of the quota, as the sync left it');
});

t.test('when the store cannot be reached, the proxy goes on deciding and /metrics shows it; the counts wait for the store', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-rate-sync-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'metadata.db');
  const store = createMetadataStore(SqliteMetadataDriver.open(file));
  const limiter = new RateLimiter({ maxCounters: 1000 });
  const log = createLogger('error', () => {});
  const sync = startRateLimitSync({ limiter, store, syncMs: 20, log });
  const limits = limitsOf('  - name: l\n    tool: "*"\n    rate: 1000/minute\n');
  await new Promise((r) => setTimeout(r, 100)); // past the first two syncs
  t.equal(sync.stats().storeReachable, 1);
  for (let i = 0; i < 3; i++) t.equal(limiter.decide('agent', limits, 'h', 'GET', '/')!.refused, null);
  await new Promise((r) => setTimeout(r, 60));
  await store.close(); // every later sync fails
  for (let i = 0; i < 2; i++) t.equal(limiter.decide('agent', limits, 'h', 'GET', '/')!.refused, null, 'decided from memory while the store is gone');
  // Each sync is scheduled when the last ends: a stalled loop makes fewer in a fixed wait.
  const stats = await eventually(async () => {
    const now = sync.stats();
    return now.syncFailures >= 2 ? now : undefined;
  }).catch(() => sync.stats());
  t.equal(stats.storeReachable, 0, 'the store is shown unreachable');
  t.ok(stats.syncFailures >= 2, `${stats.syncFailures} failed syncs counted`);
  t.equal(limiter.takeAdmitted().reduce((sum, row) => sum + row.count, 0), 2, 'the two counts made meanwhile wait for the next sync');
  await sync.stop();
  const reopened = createMetadataStore(SqliteMetadataDriver.open(file));
  t.teardown(() => reopened.close());
  const now = Date.now();
  const rows = (await reopened.syncRateCounts({ node_id: 'reader', now, live_after: now - 60_000, add: [], changed_since: 0 })).rows;
  t.equal(rows.reduce((sum, row) => sum + row.count, 0), 3, 'what was synced before the outage is in the store');
});
