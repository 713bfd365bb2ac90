// Heavy admin jobs (policy replay, audit verification, PDF reports) run one at a
// time per process, organizations taking turns, each one's in the order asked
// (so do password hashes, per client address rather than organization:
// admin/auth.ts): each gives the event loop its turns, but
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
  #waiting = 0;
  #running = false;
  /** Jobs waiting, by owner, in the order asked; owners in turn order (a Map keeps insertion order). An owner with none has no entry. */
  readonly #queues = new Map<string, (() => void)[]>();

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
    return this.#queues.get(org)?.length ?? 0;
  }

  /**
   * Runs `job` for `org` once the job running has ended (whether it succeeded
   * or not), the owners taking turns: each owner's jobs in the order asked, one
   * of each owner with jobs waiting in turn, so an owner that keeps its share
   * full delays another's next job by one of its own, not by all of them. When
   * `signal` aborts first (its client left), the job gives its place up at once
   * and never runs.
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
    return new Promise<T>((resolve, reject) => {
      const start = (): void => {
        signal?.removeEventListener('abort', leave);
        let ran: Promise<T>;
        try {
          ran = Promise.resolve(job()); // a job that returns a plain value (or a thenable) must not jam the queue
        } catch (err) {
          ran = Promise.reject(err);
        }
        ran.then(resolve, reject).finally(() => {
          this.#running = false;
          this.#next();
        });
      };
      const leave = (): void => {
        const queue = this.#queues.get(org);
        const at = queue?.indexOf(start) ?? -1;
        if (at < 0) return; // started meanwhile
        queue!.splice(at, 1);
        if (queue!.length === 0) this.#queues.delete(org);
        this.#waiting--;
        reject(skipped(this.#what));
      };
      signal?.addEventListener('abort', leave, { once: true });
      const queue = this.#queues.get(org);
      if (queue === undefined) this.#queues.set(org, [start]);
      else queue.push(start);
      this.#waiting++;
      // On a later turn, as a job asked while none runs always has: its caller's answer is on its way first.
      queueMicrotask(() => this.#next());
    });
  }

  /** Starts the next owner's first job when none runs; that owner goes to the end of the turn order. */
  #next(): void {
    if (this.#running) return;
    const turn = this.#queues.entries().next();
    if (turn.done === true) return;
    const [org, queue] = turn.value;
    const start = queue.shift()!;
    this.#queues.delete(org);
    if (queue.length > 0) this.#queues.set(org, queue);
    this.#waiting--;
    this.#running = true;
    start();
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
