// Starts a comparator that forwards every path to the bench upstream with the
// bench's bearer added (the Node peer, the bare forwarder): a module of bench/
// in its own process, ready once it prints `<readyTag> port=<n>`.
import { benchScript } from '../paths.js';
import { startProcess } from '../processes.js';
import type { Target, TargetName } from '../target.js';

export async function startForwarder(name: TargetName, script: string, readyTag: string, upstreamOrigin: string, bearer: string): Promise<Target> {
  const { proc, match } = await startProcess({
    name,
    command: process.execPath,
    args: benchScript(script),
    env: { ...process.env, UPSTREAM_ORIGIN: upstreamOrigin, BEARER: bearer },
    ready: new RegExp(`${readyTag} port=(\\d+)`),
    readyTimeoutMs: 15_000,
  });
  return { name, origin: `http://127.0.0.1:${match[1]}`, pathFor: (upstreamPath) => upstreamPath, proc };
}
