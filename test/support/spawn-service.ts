// Starts a process of the service (server/main.ts, server/main-proxy.ts, server/main-admin.ts) as a
// child, with this process's TypeScript loader, and waits for its listening line;
// or, as a user does, through `npm start` / `npm run start:proxy|start:admin`.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import { PROXY_ENV, PROXY_NODE_FLAGS } from '../../server/node-flags.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const ENTRY = { 'all-in-one': 'server/main.ts', proxy: 'server/main-proxy.ts', admin: 'server/main-admin.ts' } as const;
const NPM_SCRIPT = { 'all-in-one': 'start', proxy: 'start:proxy', admin: 'start:admin' } as const;

export interface SpawnedService {
  url: string;
  port: number;
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  /** SIGTERM (graceful) and wait for the exit code. */
  stop(): Promise<number | null>;
  kill9(): Promise<number | null>;
}

/** `stdin`: what waits on the process's standard input (a pipe left open); none: /dev/null. */
export function spawnService(role: keyof typeof ENTRY, env: Record<string, string>, startTimeoutMs = 30_000, stdin?: string): Promise<SpawnedService> {
  // A proxy with the node flags and environment it ships with (server/node-flags.ts).
  const child = spawn(process.execPath, [...(role === 'proxy' ? PROXY_NODE_FLAGS : []), ...process.execArgv, `${ROOT}${ENTRY[role]}`], {
    cwd: ROOT,
    stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    env: childEnv(role === 'proxy' ? { ...PROXY_ENV, ...env } : env),
  });
  if (stdin !== undefined) child.stdin!.write(stdin);
  return whenListening(child, role, startTimeoutMs);
}

/** spawnService on a free port with a fresh data directory (`prefix`…), stopped and removed when `t` ends. */
export async function spawnServiceInTempDir(t: Test, prefix: string, role: keyof typeof ENTRY, env: Record<string, string> = {}): Promise<SpawnedService> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let service: SpawnedService | undefined;
  t.teardown(async () => {
    await service?.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  service = await spawnService(role, { DATA_DIR: dir, PORT: '0', ...env });
  return service;
}

/** A process expected to refuse to start: its error (with its output), or null when it started after all (then stopped). */
export function startRefused(role: keyof typeof ENTRY, env: Record<string, string>, startTimeoutMs?: number): Promise<Error | null> {
  return spawnService(role, env, startTimeoutMs).then(async (service) => {
    await service.stop();
    return null;
  }, (err: Error) => err);
}

/**
 * `npm start` (or start:proxy, start:admin) in a process group of its own, as a
 * terminal or a supervisor runs it: `child` is npm, and `-child.pid` the group.
 * The script builds first, so the start takes longer.
 */
export function spawnNpmStart(role: keyof typeof ENTRY, env: Record<string, string>, startTimeoutMs = 90_000): Promise<SpawnedService> {
  const child = spawn('npm', ['run', '--silent', NPM_SCRIPT[role]], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: childEnv(env),
  });
  return whenListening(child, role, startTimeoutMs);
}

function childEnv(env: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env };
}

async function whenListening(child: ChildProcess, role: string, startTimeoutMs: number): Promise<SpawnedService> {
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    output += c;
    if (output.length > 200_000) output = output.slice(-100_000);
  });
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    output += c;
  });
  // 'close', not 'exit': the output may still be arriving when the process exits.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code, signal) => resolve(code ?? (signal ? -1 : null))));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${role} did not start in time:\n${output}`));
    }, startTimeoutMs);
    const check = () => {
      const m = /listening on (http:\/\/\S+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${role} exited with ${code} before listening:\n${output}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    child,
    output: () => output,
    exited,
    async stop() {
      child.kill('SIGTERM');
      return exited;
    },
    async kill9() {
      child.kill('SIGKILL');
      return exited;
    },
  };
}
