// ClickHouse's quantileExact, which the PDF report's and GET /audit/summary's
// p50 and p95 are: the element at floor(level × n) of the sorted values
// (0-based), the largest when that is n. test/unit/quantile.test.ts checks it
// against the engine.
export function quantileExact(sorted: readonly number[], level: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(level * sorted.length))]!;
}
