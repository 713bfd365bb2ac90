// Counting characters as the admin API's fields count them: code points, a
// lone surrogate one (what `[...value].length` counts).

/** Code points in a string, as `[...value].length` counts them (a lone surrogate is one). */
export function codePointLength(value: string): number {
  let count = 0;
  for (let i = 0; i < value.length; i++, count++) {
    const unit = value.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < value.length) {
      const next = value.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
  }
  return count;
}

/**
 * `value` has more than `max` code points. A code point is one or two UTF-16
 * units, so its length decides most cases without counting, and counting is
 * bounded by twice `max`.
 */
export function longerThan(value: string, max: number): boolean {
  return value.length > max && (value.length > 2 * max || codePointLength(value) > max);
}
