// Heavy admin jobs one at a time, in order, with a bound on those waiting (admin/one-at-a-time.ts).
import t from 'tap';
import { OneAtATime } from '../../admin/one-at-a-time.js';
import { GuardError } from '../../shared/errors.js';

t.test('jobs run one at a time in the order asked; one that fails does not stop the next; past the bound, 503', async (t) => {
  const jobs = new OneAtATime('test jobs', 4);
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
  const a = jobs.run(job('a'));
  const b = jobs.run(job('b', true));
  const c = jobs.run(job('c'));
  const d = jobs.run(job('d'));
  t.equal(jobs.waiting, 4, 'four wait (the first too: it starts on a later turn)');
  const refused = await jobs.run(job('e')).then(() => null, (err: unknown) => err);
  t.ok(refused instanceof GuardError && refused.status === 503 && refused.headers?.['retry-after'] === '5', `a fifth while four wait: 503 with Retry-After (${(refused as Error).message})`);
  const results = await Promise.allSettled([a, b, c, d]);
  t.same(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)), ['a', 'b failed', 'c', 'd']);
  t.equal(most, 1, 'never two at once');
  t.same(log, ['start a', 'end a', 'start b', 'end b', 'start c', 'end c', 'start d', 'end d'], 'in the order asked');
  t.equal(await jobs.run(job('f')), 'f', 'once they have run, more are taken');
});
