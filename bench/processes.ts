// Child processes of the bench: started, waited for until they say they are
// ready, and stopped (SIGTERM, then SIGKILL after a grace period). Every process
// started here is tracked, so one `stopAll()` (and, as a last resort, the exit
// hook) leaves nothing running, whatever failed.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { createServer } from 'node:net';

const OUTPUT_TAIL_CHARS = 4000;
const running = new Set<BenchProcess>();

export interface StartOptions {
  /** What the report and the progress lines call it. */
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * A line of stdout or stderr matching this means ready (its match is returned);
   * or, for servers that print nothing, a probe polled every 50 ms.
   */
  ready: RegExp | (() => Promise<boolean>);
  readyTimeoutMs: number;
}

export class BenchProcess {
  readonly name: string;
  readonly child: ChildProcess;
  #output = '';
  #exited: Promise<number | null>;
  #exitCode: number | null | undefined = undefined;

  constructor(name: string, child: ChildProcess) {
    this.name = name;
    this.child = child;
    this.#exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.#exitCode = code ?? (signal !== null ? -1 : null);
        running.delete(this);
        resolve(this.#exitCode);
      });
      child.once('error', () => {
        this.#exitCode = -1;
        running.delete(this);
        resolve(-1);
      });
    });
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get alive(): boolean {
    return this.#exitCode === undefined;
  }

  /** The last few KB the process printed (for error messages). */
  get outputTail(): string {
    return this.#output;
  }

  appendOutput(text: string): void {
    this.#output = (this.#output + text).slice(-OUTPUT_TAIL_CHARS);
  }

  /** Resolves with the exit code (null when killed by a signal). */
  exited(): Promise<number | null> {
    return this.#exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Safe to call twice. */
  async stop(graceMs = 5000): Promise<void> {
    if (!this.alive) return;
    this.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const killed = await Promise.race([
      this.#exited.then(() => false),
      new Promise<boolean>((resolve) => { timer = setTimeout(() => resolve(true), graceMs); }),
    ]);
    clearTimeout(timer);
    if (killed && this.alive) {
      this.child.kill('SIGKILL');
      await this.#exited;
    }
  }
}

/** Starts a process and resolves once it printed a line matching `ready` (with that match). */
export async function startProcess(options: StartOptions): Promise<{ proc: BenchProcess; match: RegExpMatchArray }> {
  const child = spawn(options.command, options.args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = new BenchProcess(options.name, child);
  running.add(proc);
  let lineBuffer = '';
  const match = await new Promise<RegExpMatchArray>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`${options.name} was not ready within ${options.readyTimeoutMs} ms; its output:\n${proc.outputTail}`));
    }, options.readyTimeoutMs);
    const onText = (chunk: Buffer): void => {
      const text = chunk.toString('utf8');
      proc.appendOutput(text);
      lineBuffer = (lineBuffer + text).slice(-OUTPUT_TAIL_CHARS);
      const found = options.ready instanceof RegExp ? options.ready.exec(lineBuffer) : null;
      if (found !== null) {
        clearTimeout(timer);
        resolve(found);
      }
    };
    child.stdout!.on('data', onText);
    child.stderr!.on('data', onText);
    const ready = options.ready;
    if (typeof ready === 'function') {
      const poll = (): void => {
        void ready().then((ok) => {
          if (ok) {
            clearTimeout(timer);
            resolve(['ready'] as unknown as RegExpMatchArray);
          } else if (proc.alive) {
            setTimeout(poll, 50);
          }
        });
      };
      poll();
    }
    void proc.exited().then((code) => {
      clearTimeout(timer);
      reject(new Error(`${options.name} exited (code ${code}) before it was ready; its output:\n${proc.outputTail}`));
    });
  }).catch(async (err: unknown) => {
    await proc.stop(1000);
    throw err;
  });
  return { proc, match };
}

/** Runs a process to its end and returns what it printed on stdout (stderr kept for errors). */
export async function runProcess(name: string, command: string, args: string[], timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = new BenchProcess(name, child);
  running.add(proc);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => { stdout += c.toString('utf8'); });
  child.stderr!.on('data', (c: Buffer) => { stderr = (stderr + c.toString('utf8')).slice(-OUTPUT_TAIL_CHARS); });
  const timer = setTimeout(() => void proc.stop(1000), timeoutMs);
  const code = await proc.exited();
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** Stops every process this module started, newest first. */
export async function stopAll(): Promise<void> {
  const all = [...running].reverse();
  for (const proc of all) await proc.stop();
}

// Last resort when the runner itself dies: no process outlives it.
process.once('exit', () => {
  for (const proc of running) proc.child.kill('SIGKILL');
});

/** A free TCP port on 127.0.0.1 (for servers that cannot report the port they bound, like nginx). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** The path of `command` when it is an executable on PATH, else null. */
export function onPath(command: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir === '') continue;
    try {
      accessSync(`${dir}/${command}`, fsConstants.X_OK);
      return `${dir}/${command}`;
    } catch {
      // not in this directory
    }
  }
  return null;
}
