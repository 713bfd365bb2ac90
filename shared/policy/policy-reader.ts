// Compiles large policies without holding the event loop: the yaml library
// parses ~1.5 MB/s here, so a policy of 245 KB that the memo had not seen held
// the loop 210–390 ms, 85 % of it the parse (all-in-one, every proxied call
// waited), and 18–33 ms now (test/unit/policy-reader.test.ts). A text longer
// than INLINE_POLICY_CHARS is read and validated by a worker thread
// (read-policy-worker.ts), which hands back its plain form; only compiling that
// form (its globs, ~15 % of the cost) runs here.
// The worker starts with the first such text and stops after IDLE_MS without
// one, so a process whose policies are small never pays for it.
import { GuardError } from '../errors.js';
import type { CompiledPolicy } from './types.js';
import { compileReadPolicy, knownPolicy, parsePolicy, POLICY_LIMITS, STORED_POLICY_LIMITS, unpackPolicyForm } from './parse-policy.js';
import type { PackedPolicyForm, PolicyForm, PolicyLimits } from './parse-policy.js';
import { WorkerCallError, WorkerCalls } from '../worker-calls.js';

/** Texts up to this many characters are compiled here: ~10 ms at most, less than handing them over. */
export const INLINE_POLICY_CHARS = 16 * 1024;
/** The worker stops after this long without a text to read. */
const IDLE_MS = 30_000;

/** Queues a worker reading, for callers that share its turns out (admin/policy.ts, per org). */
export type ReadQueue = (read: () => Promise<CompiledPolicy>) => Promise<CompiledPolicy>;

/**
 * parsePolicy, with a text it must parse and that is longer than
 * INLINE_POLICY_CHARS read by the worker, through `queue` when given. Rejects
 * with what parsePolicy throws; a text being read already is read once.
 */
export async function compilePolicy(yamlText: string, limits: PolicyLimits = POLICY_LIMITS, queue?: ReadQueue): Promise<CompiledPolicy> {
  // Other bounds are for tests, compiled apart (parsePolicy).
  if (limits !== POLICY_LIMITS && limits !== STORED_POLICY_LIMITS) return parsePolicy(yamlText, limits);
  const known = knownPolicy(yamlText, limits);
  if (known !== undefined) return known;
  // Short texts, and those too large to read (refused at once, without a place in the queue).
  if (yamlText.length <= INLINE_POLICY_CHARS || yamlText.length > limits.maxBytes) return parsePolicy(yamlText, limits);
  const read = (): Promise<CompiledPolicy> => reader.read(yamlText, limits);
  return queue === undefined ? read() : queue(read);
}

class PolicyReader {
  // From the sources (tests run TypeScript) or from dist/ (npm start); the loader comes with execArgv.
  // The main thread's stack (V8's default, ~1 MB), not a worker's 4 MB: the yaml
  // library refuses a text nested too deeply for it, and that must be the same text here.
  readonly #worker = new WorkerCalls<{ yamlText: string; stored: boolean }, PackedPolicyForm>(
    new URL(import.meta.url.endsWith('.ts') ? './read-policy-worker.ts' : './read-policy-worker.js', import.meta.url),
    { idleMs: IDLE_MS, resourceLimits: { stackSizeMb: 1 } },
  );
  #reads = 0;
  /** Readings under way, by text, under POLICY_LIMITS and STORED_POLICY_LIMITS: a text asked for twice at once is read once. */
  readonly #reading = { strict: new Map<string, Promise<PolicyForm>>(), stored: new Map<string, Promise<PolicyForm>>() };

  /** `limits`: POLICY_LIMITS or STORED_POLICY_LIMITS. */
  read(yamlText: string, limits: PolicyLimits): Promise<CompiledPolicy> {
    // Compiled meanwhile (a queued caller's turn comes after another's reading).
    const known = knownPolicy(yamlText, limits);
    if (known !== undefined) return Promise.resolve(known);
    const reading = limits === STORED_POLICY_LIMITS ? this.#reading.stored : this.#reading.strict;
    let form = reading.get(yamlText);
    if (form === undefined) {
      this.#reads++;
      form = this.#worker.call({ yamlText, stored: limits === STORED_POLICY_LIMITS }).then(unpackPolicyForm, (err: unknown) => {
        throw err instanceof WorkerCallError && err.code === 'invalid_policy' ? new GuardError('invalid_policy', err.message) : err;
      }).finally(() => reading.delete(yamlText));
      reading.set(yamlText, form);
    }
    // Each caller its own compiled copy (its own tool index): the first compiles the form, the others find it in the memo.
    return form.then((read) => compileReadPolicy(yamlText, read, limits));
  }

  /** Whether the worker is running (for tests). */
  get running(): boolean {
    return this.#worker.running;
  }

  /** Texts handed to the worker so far (for tests). */
  get reads(): number {
    return this.#reads;
  }
}

const reader = new PolicyReader();

/** Whether the reader's worker is running, and how many texts it was handed (for tests). */
export function policyReaderState(): { running: boolean; reads: number } {
  return { running: reader.running, reads: reader.reads };
}
