// Runs a test file in a child process (this process's Node options, so its
// TypeScript loader) and collects what it printed: for tests that need a
// different environment, such as another store or a network namespace.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface ChildRun {
  code: number | null;
  /** stdout and stderr, as they came. */
  out: string;
  /** Top-level tests that passed (not skipped), and the assertions that failed, as TAP printed them. */
  passed: string[];
  failed: string[];
}

/**
 * Runs `file` (relative to the project) with `env` added to this process's;
 * `prefix` (a command and its arguments) runs it under another, which must end
 * by exec'ing its arguments. Killed after `timeoutMs`.
 */
export async function runTestFileInChild(file: string, env: Record<string, string>, timeoutMs: number, prefix: readonly string[] = []): Promise<ChildRun> {
  const argv = [...prefix, process.execPath, ...process.execArgv, join(PROJECT_ROOT, file)];
  const child = spawn(argv[0]!, argv.slice(1), { cwd: PROJECT_ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => { out += c; });
  child.stderr.setEncoding('utf8').on('data', (c: string) => { out += c; });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(timer);
  return {
    code,
    out,
    passed: out.match(/^ok \d+ - (?!.*# SKIP).*$/gm) ?? [],
    failed: out.match(/^\s*not ok \d+ .*$/gm) ?? [],
  };
}
