// Small statistics over samples.

/** The p-th percentile (nearest rank) of `values`, or null when there are none. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

/** The median of the values that are numbers, or null when none is. */
export function median(values: readonly (number | null | undefined)[]): number | null {
  const numbers = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  if (numbers.length === 0) return null;
  const sorted = numbers.sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
