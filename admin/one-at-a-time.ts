// Heavy admin jobs (policy replay, audit verification, PDF reports) run one at a
// time per process, in the order asked: each gives the event loop its turns, but
// n at once made it wait n slices between turns, and all-in-one the proxied
// calls waited with it. At most `maxWaiting` wait; the next is 503 with
// Retry-After, so a client that asks for hundreds does not queue hours of work.
import { GuardError } from '../shared/errors.js';

export class OneAtATime {
  readonly #what: string;
  readonly #maxWaiting: number;
  #tail: Promise<unknown> = Promise.resolve();
  #waiting = 0;

  /** `what`: the jobs' plural name, for the 503's message ("policy replays"). */
  constructor(what: string, maxWaiting: number) {
    this.#what = what;
    this.#maxWaiting = maxWaiting;
  }

  /** Jobs asked for that have not started. */
  get waiting(): number {
    return this.#waiting;
  }

  /** Runs `job` once the jobs asked before it have ended (whether they succeeded or not). */
  run<T>(job: () => Promise<T>): Promise<T> {
    if (this.#waiting >= this.#maxWaiting) {
      return Promise.reject(new GuardError('unavailable', `${this.#maxWaiting} ${this.#what} are waiting to run; retry later.`, undefined, { 'retry-after': '5' }));
    }
    this.#waiting++;
    const run = this.#tail.then(() => {
      this.#waiting--;
      return job();
    });
    this.#tail = run.catch(() => undefined);
    return run;
  }
}

/** Jobs of one kind that may wait behind the one running, per process. */
export const JOBS_WAITING_MAX = 16;
