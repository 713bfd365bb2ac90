// Starts the bench upstream (bench/upstream.ts) in its own process.
import { benchScript } from '../paths.js';
import { startProcess, type BenchProcess } from '../processes.js';

export interface RunningUpstream {
  proc: BenchProcess;
  port: number;
  /** `127.0.0.1:<port>`: the authority the guard's target and credential name. */
  authority: string;
  origin: string;
}

export async function startUpstream(): Promise<RunningUpstream> {
  const { proc, match } = await startProcess({
    name: 'upstream',
    command: process.execPath,
    args: benchScript('upstream'),
    ready: /BENCH_UPSTREAM_READY port=(\d+)/,
    readyTimeoutMs: 15_000,
  });
  const port = Number(match[1]);
  return { proc, port, authority: `127.0.0.1:${port}`, origin: `https://127.0.0.1:${port}` };
}
