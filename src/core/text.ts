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

/** Length in characters (Unicode code points), not UTF-16 units or bytes: an emoji is one character. */
export function characterCount(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}
