// A comparator as the load generators see it: an origin, and the path on it that
// reaches a given path of the upstream.
import type { BenchProcess } from './processes.js';

export type TargetName = 'direct' | 'guard' | 'guard-quiet' | 'guard-profiled' | 'nginx' | 'node-peer' | 'bare' | 'guard-split';

export interface Target {
  name: TargetName;
  /** `http(s)://127.0.0.1:<port>` */
  origin: string;
  /** The path on this target that reaches `upstreamPath` (with the agent key `key`, for the guard). */
  pathFor(upstreamPath: string, key?: string): string;
  /** The process whose CPU time and memory are reported; null for `direct` (no proxy). */
  proc: BenchProcess | null;
}

export function directTarget(upstreamOrigin: string): Target {
  return { name: 'direct', origin: upstreamOrigin, pathFor: (upstreamPath) => upstreamPath, proc: null };
}
