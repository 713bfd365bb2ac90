// One worker thread doing one kind of job for the thread that made it: started
// on the first call, taking calls in the order made, and keeping no process
// alive while none is pending; with `idleMs`, it stops after that long without
// one. The worker answers with `answerCalls`.
import { parentPort, Worker, type ResourceLimits, type TransferListItem } from 'node:worker_threads';

type Reply = { id: number; value: unknown } | { id: number; error: string; code: string | undefined };

/** A call the worker failed: its error's message, and its `code` when it had one (a GuardError's). */
export class WorkerCallError extends Error {
  constructor(message: string, readonly code: string | undefined) {
    super(message);
  }
}

export class WorkerCalls<In, Out> {
  readonly #url: URL;
  readonly #options: { idleMs?: number; resourceLimits?: ResourceLimits };
  #worker: Worker | null = null;
  #idle: NodeJS.Timeout | null = null;
  #nextId = 0;
  readonly #pending = new Map<number, { resolve: (value: Out) => void; reject: (err: Error) => void }>();

  constructor(url: URL, options: { idleMs?: number; resourceLimits?: ResourceLimits } = {}) {
    this.#url = url;
    this.#options = options;
  }

  call(input: In, transfer: readonly TransferListItem[] = []): Promise<Out> {
    const worker = this.#started();
    const id = this.#nextId++;
    const answer = new Promise<Out>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    worker.postMessage({ id, input }, [...transfer]);
    return answer;
  }

  /** Whether the worker is running. */
  get running(): boolean {
    return this.#worker !== null;
  }

  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    if (this.#idle !== null) clearTimeout(this.#idle);
    if (worker !== null) await worker.terminate();
  }

  #started(): Worker {
    if (this.#idle !== null) clearTimeout(this.#idle);
    this.#idle = null;
    if (this.#worker !== null) {
      this.#worker.ref();
      return this.#worker;
    }
    const worker = new Worker(this.#url, this.#options.resourceLimits === undefined ? {} : { resourceLimits: this.#options.resourceLimits });
    worker.on('message', (reply: Reply) => {
      const pending = this.#pending.get(reply.id);
      if (pending === undefined) return;
      this.#pending.delete(reply.id);
      if ('value' in reply) pending.resolve(reply.value as Out);
      else pending.reject(new WorkerCallError(reply.error, reply.code));
      if (this.#pending.size === 0 && this.#worker === worker) {
        worker.unref(); // an idle worker keeps no process alive...
        const { idleMs } = this.#options;
        if (idleMs !== undefined) this.#idle = setTimeout(() => this.#stop(worker), idleMs).unref(); // ...and goes
      }
    });
    worker.on('error', (err) => this.#failAll(worker, err));
    worker.on('exit', (code) => this.#failAll(worker, new Error(`the worker ${this.#url.pathname} exited (${code})`)));
    this.#worker = worker;
    return worker;
  }

  #stop(worker: Worker): void {
    if (this.#worker !== worker || this.#pending.size > 0) return;
    this.#worker = null;
    this.#idle = null;
    void worker.terminate();
  }

  #failAll(worker: Worker, err: Error): void {
    if (this.#worker !== worker) return;
    this.#worker = null;
    for (const pending of this.#pending.values()) pending.reject(err);
    this.#pending.clear();
  }
}

/** In the worker: answers each call with what `handle` returns, or with its error's message and code. */
export function answerCalls<In, Out>(handle: (input: In) => Out | Promise<Out>, transferOf: (value: Out) => readonly TransferListItem[] = () => []): void {
  parentPort!.on('message', ({ id, input }: { id: number; input: In }) => {
    Promise.resolve()
      .then(() => handle(input))
      .then(
        (value) => parentPort!.postMessage({ id, value } satisfies Reply, [...transferOf(value)]),
        (err: unknown) => {
          const code = typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : undefined;
          parentPort!.postMessage({ id, error: err instanceof Error ? err.message : String(err), code } satisfies Reply);
        },
      );
  });
}
