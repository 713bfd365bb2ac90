// The memo the audit's compiled encoders share (audit-codec.ts, entry-json.ts):
// under load consecutive rows repeat the agent, the tool, the rule, the
// millisecond, so a field that keeps its last value and that value's encoding
// is mostly a comparison instead of an escape. Comparing strings with ===
// compares their contents, so a repeat is exact. Used inside a template built
// with `new Function`, whose parameters include NONE (memoNone): field names
// come from the encoders' typed tables, never from input.

/** The template's memo variables for `count` fields, v<i> (last value) and e<i> (its encoding), declared before its function. */
export function memoVariables(count: number): string {
  return Array.from({ length: count }, (_, i) => `let v${i} = NONE, e${i} = '';`).join(' ');
}

/** What the memo variables start at: a value no field holds. */
export const memoNone = Symbol('none');

/**
 * The expression for slot `i`: `value` encoded by `encode`, or its last
 * encoding when `value` repeats. The pair changes only once the encoding
 * succeeded, so a value that throws throws again.
 */
export function memoized(value: string, encode: string, i: number): string {
  return `(${value} === v${i} ? e${i} : (e${i} = ${encode}(${value}), v${i} = ${value}, e${i}))`;
}
