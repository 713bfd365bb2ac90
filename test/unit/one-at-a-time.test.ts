// Heavy admin jobs one at a time, in order, with a bound on those waiting in all
// (503) and per organization (429) (admin/one-at-a-time.ts).
import t from 'tap';
import { OneAtATime } from '../../admin/one-at-a-time.js';
import { GuardError, toErrorResponse } from '../../shared/errors.js';

/** A job that runs until `open()` is called: the test decides when each ends. */
function gated(): { job: () => Promise<string>; open: () => void; started: () => boolean } {
  let open!: () => void;
  let started = false;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return {
    job: async () => {
      started = true;
      await gate;
      return 'done';
    },
    open: () => open(),
    started: () => started,
  };
}

/** Lets queued jobs start (each starts on a later turn than the one it was asked on). */
const turns = (): Promise<void> => new Promise((r) => setImmediate(r));

/** The refusal of a run (refusals are at once), or null when it was taken. */
async function refusal(run: Promise<unknown>): Promise<GuardError | null> {
  const taken = await Promise.race([run.then(() => true, (err: unknown) => err), turns().then(() => true)]);
  if (taken === true) return null;
  if (taken instanceof GuardError) return taken;
  throw taken;
}

/** A job that would end at once: asked for where it should be refused. */
const quick = async (): Promise<string> => 'ran';

t.test('jobs run one at a time in the order asked; one that fails does not stop the next; past the bound, 503', async (t) => {
  const jobs = new OneAtATime('test jobs', 4, 16); // the org's own bound out of the way
  const log: string[] = [];
  let running = 0;
  let most = 0;
  const job = (name: string, fail = false) => async () => {
    running++;
    most = Math.max(most, running);
    log.push(`start ${name}`);
    await new Promise((r) => setTimeout(r, 20));
    log.push(`end ${name}`);
    running--;
    if (fail) throw new Error(`${name} failed`);
    return name;
  };
  const a = jobs.run('org', job('a'));
  const b = jobs.run('org', job('b', true));
  const c = jobs.run('org', job('c'));
  const d = jobs.run('org', job('d'));
  t.equal(jobs.waiting, 4, 'four wait (the first too: it starts on a later turn)');
  const refused = await jobs.run('org', job('e')).then(() => null, (err: unknown) => err);
  t.ok(refused instanceof GuardError && refused.status === 503 && refused.headers?.['retry-after'] === '5', `a fifth while four wait: 503 with Retry-After (${(refused as Error).message})`);
  const results = await Promise.allSettled([a, b, c, d]);
  t.same(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)), ['a', 'b failed', 'c', 'd']);
  t.equal(most, 1, 'never two at once');
  t.same(log, ['start a', 'end a', 'start b', 'end b', 'start c', 'end c', 'start d', 'end d'], 'in the order asked');
  t.equal(await jobs.run('org', job('f')), 'f', 'once they have run, more are taken');
});

t.test('an organization past its share gets 429 (limit jobs, Retry-After), while another still gets in', async (t) => {
  const jobs = new OneAtATime('test jobs', 16, 2);
  const running = gated();
  const first = jobs.run('a', running.job);
  await turns();
  t.ok(running.started(), "a's first runs: it no longer waits");
  t.equal(jobs.waitingOf('a'), 0, 'the running job is not counted as waiting');
  const waiting = [gated(), gated()];
  const queued = waiting.map((w) => jobs.run('a', w.job));
  t.equal(jobs.waitingOf('a'), 2, 'two of a wait');

  const refused = await refusal(jobs.run('a', quick));
  t.ok(refused, "a's third waiting job is refused");
  t.equal(refused?.status, 429, '429');
  t.equal(refused?.code, 'rate_limited', 'rate_limited');
  t.same(refused?.extra, { limit: 'jobs', retry_after: 5 }, 'the body names the limit and the wait');
  t.same(refused?.headers, { 'retry-after': '5' }, 'with Retry-After');
  t.match(refused?.message, /^2 test jobs of this organization are waiting to run/, 'the message says whose jobs wait');
  const answer = toErrorResponse(refused);
  t.same(JSON.parse(answer.body), { error: 'rate_limited', message: refused?.message, limit: 'jobs', retry_after: 5 }, 'on the wire: the shape of the audit stream\'s 429');
  t.equal(jobs.waitingOf('a'), 2, 'a refused job is not counted');

  const other = gated();
  const b = jobs.run('b', other.job);
  t.equal(jobs.waitingOf('b'), 1, 'b gets in while a is at its share');
  t.equal(jobs.waiting, 3, 'three wait in all');

  running.open();
  for (const w of waiting) w.open();
  other.open();
  t.same(await Promise.all([first, ...queued, b]), ['done', 'done', 'done', 'done']);
  t.equal(jobs.waiting, 0);
  t.equal(jobs.waitingOf('a'), 0);
});

t.test('owners take turns: one that keeps its share full delays another by one of its jobs, not all', async (t) => {
  const jobs = new OneAtATime('test jobs', 16, 4);
  const order: string[] = [];
  const job = (name: string) => async () => {
    order.push(name);
    await turns();
    return name;
  };
  const running = gated();
  const first = jobs.run('a', running.job);
  await turns();
  const asked = [jobs.run('a', job('a2')), jobs.run('a', job('a3')), jobs.run('a', job('a4')), jobs.run('b', job('b1')), jobs.run('c', job('c1')), jobs.run('b', job('b2'))];
  running.open();
  await Promise.all([first, ...asked]);
  t.same(order, ['a2', 'b1', 'c1', 'a3', 'b2', 'a4'], 'a, b, c in turn, each its own in the order asked');
});

t.test('a job that returns a plain value does not jam the queue', async (t) => {
  const jobs = new OneAtATime('test jobs', 16, 4);
  const plain = (() => 'plain') as unknown as () => Promise<string>;
  t.equal(await jobs.run('a', plain), 'plain');
  t.equal(await jobs.run('a', quick), 'ran', 'the next runs');
  t.equal(jobs.waiting, 0);
});

t.test('shares held by another kind of owner are named as such (password checks, per client address)', async (t) => {
  const checks = new OneAtATime('password checks', 16, 1, { owner: 'client address', limit: 'password_checks' });
  const running = gated();
  const first = checks.run('127.0.0.1', running.job);
  await turns();
  const waiting = gated();
  const queued = checks.run('127.0.0.1', waiting.job);
  const refused = await refusal(checks.run('127.0.0.1', quick));
  t.equal(refused?.status, 429);
  t.same(refused?.extra, { limit: 'password_checks', retry_after: 5 }, 'the limit is named by its owner');
  t.match(refused?.message, /^1 password checks of this client address are waiting to run/);
  running.open();
  waiting.open();
  t.same(await Promise.all([first, queued]), ['done', 'done']);
});

t.test('the bound on all that wait is still 503, checked after the org\'s own share', async (t) => {
  const jobs = new OneAtATime('test jobs', 4, 2);
  const running = gated();
  const first = jobs.run('x', running.job);
  await turns(); // x's job runs: those asked next wait behind it
  const gates = Array.from({ length: 4 }, () => gated());
  const runs = gates.map((g, i) => jobs.run(i % 2 === 0 ? 'a' : 'b', g.job));
  t.equal(jobs.waiting, 4, 'a and b wait two each: four in all');
  const c = await refusal(jobs.run('c', quick));
  t.equal(c?.status, 503, 'an org with none waiting: 503 when four wait in all');
  t.equal(c?.code, 'unavailable', 'unavailable');
  t.same(c?.headers, { 'retry-after': '5' }, 'with Retry-After');
  t.equal(c?.extra, undefined, 'no limit field on the 503');
  const a = await refusal(jobs.run('a', quick));
  t.equal(a?.status, 429, 'an org at its share: 429, its own bound, even when all are full');
  t.equal(jobs.waitingOf('c'), 0, 'refused: not counted');
  running.open();
  for (const g of gates) g.open();
  await Promise.all([first, ...runs]);
  t.equal(jobs.waiting, 0);
});

t.test('the counts are released as jobs start, and a job that throws still releases', async (t) => {
  const jobs = new OneAtATime('test jobs', 16, 2);
  const running = gated();
  const first = jobs.run('a', running.job);
  const failing = jobs.run('a', async () => {
    throw new Error('async failure');
  });
  t.equal(jobs.waitingOf('a'), 2);
  t.ok(await refusal(jobs.run('a', quick)), 'a at its share');
  await turns();
  t.equal(jobs.waitingOf('a'), 1, 'the first started: one left waiting');
  const next = gated();
  const third = jobs.run('a', next.job);
  t.equal(jobs.waitingOf('a'), 2, 'its place is taken again');
  running.open();
  t.equal(await first, 'done');
  await t.rejects(failing, /async failure/, 'the failing job fails its caller');
  // A job that throws before it returns a promise (not an async function).
  const throwing = jobs.run('a', () => {
    throw new Error('sync failure');
  });
  await turns();
  t.ok(next.started(), 'the one after the failure runs');
  t.equal(jobs.waitingOf('a'), 1, 'the failed one left the count; the one thrown synchronously waits');
  next.open();
  t.equal(await third, 'done');
  await t.rejects(throwing, /sync failure/);
  t.equal(jobs.waitingOf('a'), 0, 'all released');
  t.equal(jobs.waiting, 0);
  const again = [gated(), gated()];
  const runs = again.map((g) => jobs.run('a', g.job));
  t.equal(jobs.waitingOf('a'), 2, 'a may queue its two again');
  for (const g of again) g.open();
  t.same(await Promise.all(runs), ['done', 'done']);
});

t.test('a waiting job whose client left gives its place up at once and never runs; one already running is not stopped', async (t) => {
  const jobs = new OneAtATime('test jobs', 16, 2);
  const running = gated();
  const first = jobs.run('a', running.job);
  await turns();
  const left = gated();
  const client = new AbortController();
  const abandoned = jobs.run('a', left.job, client.signal);
  const kept = gated();
  const next = jobs.run('a', kept.job);
  t.equal(jobs.waitingOf('a'), 2);
  client.abort();
  t.equal(jobs.waitingOf('a'), 1, 'its place is free as soon as its client leaves');
  const another = gated();
  const taken = jobs.run('a', another.job);
  t.equal(jobs.waitingOf('a'), 2, 'so the org may ask again at once');
  running.open();
  t.equal(await first, 'done', 'the running job ran on');
  const skipped = await abandoned.then(() => null, (err: unknown) => err);
  t.ok(skipped instanceof GuardError && !left.started(), `the abandoned job never started (${(skipped as Error).message})`);
  await turns();
  t.ok(kept.started(), 'the next job took its turn');
  kept.open();
  another.open();
  t.same(await Promise.all([next, taken]), ['done', 'done']);
  t.equal(jobs.waiting, 0);

  // A client that left before its job reached the queue: no place taken, never run.
  const before = new AbortController();
  before.abort();
  const never = gated();
  const refusedAtOnce = await jobs.run('a', never.job, before.signal).then(() => null, (err: unknown) => err);
  t.ok(refusedAtOnce instanceof GuardError && jobs.waitingOf('a') === 0, 'a job whose client already left takes no place');
  await turns();
  t.notOk(never.started(), 'and never runs');

  // A client that leaves once its job has started changes nothing.
  const late = new AbortController();
  const started = gated();
  const run = jobs.run('a', started.job, late.signal);
  await turns();
  late.abort();
  started.open();
  t.equal(await run, 'done', 'a started job runs to its end');
  t.equal(jobs.waitingOf('a'), 0);
});
