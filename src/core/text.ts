/**
 * The rules on text that several facilities share, written once: what counts
 * as text at all, and how its length in characters is counted.
 */

/**
 * Whether `s` is text: no lone UTF-16 surrogate. JSON can spell one
 * (`"\ud800"`); it is not a character, UTF-8 (so Postgres) cannot store it
 * without changing the value, and no provider can take it.
 */
export function isWellFormedText(s: string): boolean {
  // String.prototype.isWellFormed (Node 20+), not yet in TypeScript's ES2023 lib.
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}

const INT64_TEXT = /^(0|[1-9][0-9]{0,18})$/;
const MAX_INT64 = 2n ** 63n - 1n;

/**
 * Whether `s` is a non-negative decimal that fits a PostgreSQL bigint: the ids
 * inside page tokens and cursors come back from outside, and 19 digits can be
 * more than a bigint holds (an out-of-range cast is an error of the database).
 */
export function isInt64Text(s: string): boolean {
  return INT64_TEXT.test(s) && BigInt(s) <= MAX_INT64;
}

/** Length in characters (Unicode code points), not UTF-16 units or bytes: an emoji is one character. */
export function characterCount(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}
