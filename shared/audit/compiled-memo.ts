// The memo the audit's compiled encoders share (audit-codec.ts, entry-json.ts):
// under load consecutive rows repeat the agent, the tool, the rule, the
// millisecond, so a field that keeps its last value and that value's encoding
// is mostly a comparison instead of an escape. Comparing strings with ===
// compares their contents, so a repeat is exact. compileTemplate builds an
// encoder from its fields with `new Function`: field names come from the
// encoders' typed tables, never from input.

/** The template's memo variables for `count` fields, v<i> (last value) and e<i> (its encoding), declared before its function. */
function memoVariables(count: number): string {
  return Array.from({ length: count }, (_, i) => `let v${i} = NONE, e${i} = '';`).join(' ');
}

/** What the memo variables start at: a value no field holds. */
const NONE = Symbol('none');

/** The last conversion flattened() made, kept so that no compiler drops it. */
export let flattenedSink = 0;

/**
 * `s` in one piece: a string built by `+` is a tree of its pieces, and V8
 * copies it flat, in place, when it converts it to a number. Not Array.join: a
 * joined string is two-byte when a piece is an internalized (thin) string,
 * which store ids are, and one two-byte line makes its whole batch two-byte,
 * twice the bytes (seen in the proxy: every line of a batch).
 */
export function flattened(s: string): string {
  flattenedSink = Number(s);
  return s;
}

/**
 * The expression for slot `i`: `value` encoded by `encode`, or its last
 * encoding when `value` repeats. The pair changes only once the encoding
 * succeeded, so a value that throws throws again.
 */
export function memoized(value: string, encode: string, i: number): string {
  return `(${value} === v${i} ? e${i} : (e${i} = ${encode}(${value}), v${i} = ${value}, e${i}))`;
}

/**
 * A run of adjacent fields that repeat together from call to call (the agent's,
 * the tool's, the rule's): the run's variables, w<k>_<j> (each value last
 * encoded) and f<k> (the run's text), declared before the template's function.
 */
function runVariables(k: number, width: number): string {
  return `${Array.from({ length: width }, (_, j) => `let w${k}_${j} = NONE;`).join(' ')} let f${k} = '';`;
}

/**
 * The expression for run `k`: its last text when every value repeats, else its
 * pieces (each field still memoized on its own) with `separator` between them,
 * flattened.
 * A string built by `+` is a tree of its pieces that V8 walks again each time
 * it is read whole (the hash's input, a batch's join); a repeated run is one
 * piece of it instead of two a field. The run's values change only once its
 * text is built, as memoized's do.
 */
function memoRun(values: readonly string[], pieces: readonly string[], k: number, separator: string): string {
  const same = values.map((v, j) => `${v} === w${k}_${j}`).join(' && ');
  const keep = values.map((v, j) => `w${k}_${j} = ${v}`).join(', ');
  return `(${same} ? f${k} : (f${k} = FLAT('' + ${concatenated(pieces, separator)}), ${keep}, f${k}))`;
}

/** The expression concatenating `pieces` with `separator` between them. */
function concatenated(pieces: readonly string[], separator: string): string {
  return pieces.join(separator === '' ? ' + ' : ` + ${JSON.stringify(separator)} + `);
}

/** One field of a compiled template: its value as read from the record, its pieces of text, and whether it changes from call to call. */
export interface TemplateField {
  readonly value: string;
  readonly pieces: readonly string[];
  readonly varies: boolean;
}

/**
 * An encoder compiled from its fields: each varying field's pieces alone, each
 * run of two or more others memoized as one piece (memoRun), every piece
 * separated by `separator`, the whole given to `source`, which writes the
 * encoder's function around it. `helpers` are the functions the pieces call,
 * by name; `slots` is the number of per-field memo slots (memoized's `i`).
 */
export function compileTemplate<F>(helpers: Readonly<Record<string, unknown>>, fields: readonly TemplateField[], slots: number, separator: string, source: (body: string) => string): F {
  const variables = [memoVariables(slots)];
  const parts: string[] = [];
  let run: TemplateField[] = [];
  const endRun = () => {
    if (run.length >= 2) {
      const k = variables.length;
      variables.push(runVariables(k, run.length));
      parts.push(memoRun(run.map((f) => f.value), run.flatMap((f) => f.pieces), k, separator));
    } else for (const f of run) parts.push(...f.pieces);
    run = [];
  };
  for (const field of fields) {
    if (field.varies) {
      endRun();
      parts.push(...field.pieces);
    } else run.push(field);
  }
  endRun();
  const names = [...Object.keys(helpers), 'NONE', 'FLAT'];
  return new Function(...names, `${variables.join(' ')}\n  return ${source(concatenated(parts, separator))};`)(...Object.values(helpers), NONE, flattened) as F;
}
