// The overview's figures per agent (pages/overview.tsx), kept apart from the
// page so that a unit test can check them against the PDF's.
import type { AuditEntry } from './types.js';

export interface Row {
  agent: string;
  calls: number;
  denied: number;
  p95: number;
}

/**
 * ClickHouse's quantileExact, which the PDF report's p50 and p95 are: the
 * element at floor(level × n) of the sorted values (0-based), the largest
 * when that is n.
 */
export function quantileExact(sorted: readonly number[], level: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(level * sorted.length))]!;
}

/** Calls, denials and p95 latency per agent, most calls first; an entry listed twice (paging) counts once. */
export function summarize(entries: readonly Pick<AuditEntry, 'id' | 'agent_id' | 'agent_name' | 'latency_ms' | 'decision'>[]): Row[] {
  const seen = new Set<string>();
  const byAgent = new Map<string, { agent: string; latencies: number[]; denied: number }>();
  for (const e of entries) {
    if (seen.has(e.id)) continue;
    seen.add(e.id);
    let a = byAgent.get(e.agent_id);
    if (a === undefined) byAgent.set(e.agent_id, (a = { agent: e.agent_name, latencies: [], denied: 0 }));
    a.latencies.push(e.latency_ms);
    if (e.decision === 'denied') a.denied++;
  }
  return [...byAgent.values()].map((a) => {
    const sorted = a.latencies.sort((x, y) => x - y);
    return { agent: a.agent, calls: sorted.length, denied: a.denied, p95: quantileExact(sorted, 0.95) };
  }).sort((x, y) => y.calls - x.calls);
}
