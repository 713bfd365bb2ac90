// Heavy admin jobs (policy replay, audit verification, PDF reports) run one at a
// time per process, in the order asked (so do password hashes, per client
// address rather than organization: admin/auth.ts): each gives the event loop its turns, but
// n at once made it wait n slices between turns, and all-in-one the proxied
// calls waited with it. At most `maxWaiting` wait; the next is 503 with
// Retry-After, so a client that asks for hundreds does not queue hours of work.
// Those places are shared by every organization, so one organization may hold
// at most `maxWaitingPerOrg` of them; its next is 429 `rate_limited` (limit
// `jobs`, as the audit stream's per-org bound), and the others still get in.
// Only jobs that wait count: one leaves the counts as it starts, whether it then
// succeeds or throws, or at once when its client leaves (it then never runs:
// a client that gave up and asked again does not wait behind its own).
import { GuardError } from '../shared/errors.js';

/** Retry-After of both refusals, in seconds (as the audit stream's). */
const RETRY_AFTER_S = 5;

/** Who holds a share of the places, as the 429 names it: an organization's jobs by default. */
export interface Owners {
  /** As the refusal's message names one ("organization", "client address"). */
  owner: string;
  /** The refusal's `limit` ("jobs"). */
  limit: string;
}

export class OneAtATime {
  readonly #what: string;
  readonly #maxWaiting: number;
  readonly #maxWaitingPerOrg: number;
  readonly #owners: Owners;
  #tail: Promise<unknown> = Promise.resolve();
  #waiting = 0;
  /** Jobs waiting, by org; an org with none has no entry. */
  readonly #waitingByOrg = new Map<string, number>();

  /** `what`: the jobs' plural name, for the refusals' messages ("policy replays"). */
  constructor(what: string, maxWaiting: number, maxWaitingPerOrg: number, owners: Owners = { owner: 'organization', limit: 'jobs' }) {
    this.#what = what;
    this.#maxWaiting = maxWaiting;
    this.#maxWaitingPerOrg = maxWaitingPerOrg;
    this.#owners = owners;
  }

  /** Jobs asked for that have not started. */
  get waiting(): number {
    return this.#waiting;
  }

  /** Jobs of `org` asked for that have not started. */
  waitingOf(org: string): number {
    return this.#waitingByOrg.get(org) ?? 0;
  }

  /**
   * Runs `job` for `org` once the jobs asked before it have ended (whether they
   * succeeded or not). When `signal` aborts first (its client left), the job
   * gives its place up at once and never runs.
   */
  run<T>(org: string, job: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    // Its client left before it got here (while its caller was checked): no place, no run.
    if (signal?.aborted) return Promise.reject(skipped(this.#what));
    // The org's own share first: when both are full, 429 tells it that it is the one to wait.
    const mine = this.waitingOf(org);
    if (mine >= this.#maxWaitingPerOrg) {
      const { owner, limit } = this.#owners;
      return Promise.reject(new GuardError('rate_limited', `${mine} ${this.#what} of this ${owner} are waiting to run; retry once one has started.`, { limit, retry_after: RETRY_AFTER_S }, { 'retry-after': String(RETRY_AFTER_S) }));
    }
    if (this.#waiting >= this.#maxWaiting) {
      return Promise.reject(new GuardError('unavailable', `${this.#maxWaiting} ${this.#what} are waiting to run; retry later.`, undefined, { 'retry-after': String(RETRY_AFTER_S) }));
    }
    this.#waiting++;
    this.#waitingByOrg.set(org, mine + 1);
    let waiting = true;
    const leave = (): void => {
      if (!waiting) return;
      waiting = false;
      this.#waiting--;
      const left = this.waitingOf(org) - 1;
      if (left === 0) this.#waitingByOrg.delete(org);
      else this.#waitingByOrg.set(org, left);
    };
    signal?.addEventListener('abort', leave, { once: true });
    // #tail never rejects, so this always runs: the counts are released before the job can throw.
    const run = this.#tail.then(() => {
      signal?.removeEventListener('abort', leave);
      if (!waiting) throw skipped(this.#what);
      leave();
      return job();
    });
    this.#tail = run.catch(() => undefined);
    return run;
  }
}

/** What a job whose client left before it started answers (to no one). */
function skipped(what: string): GuardError {
  return new GuardError('unavailable', `The client of this job left before it started; ${what} skip such jobs.`);
}

/** Jobs of one kind that may wait behind the one running, per process. */
export const JOBS_WAITING_MAX = 16;
/** Of those, how many one organization may hold: at least 8 organizations to fill them. */
export const JOBS_WAITING_PER_ORG = 2;
