/**
 * The one token estimator of the inference facility. Reservations against the
 * daily allowance are made before a provider has counted anything, and the
 * local provider reports its usage with the same rule, so an estimate and a
 * local "real" count always agree. About four characters per token is the
 * usual rule of thumb for English text with current tokenisers; providers
 * that report their own counts settle the reservation to those afterwards.
 */

/** Characters (UTF-16 code units) counted as one token. */
const CHARS_PER_TOKEN = 4;

/** Estimated tokens of one text: `ceil(length / 4)`, so any non-empty text is at least 1. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** Estimated tokens of several texts, each rounded up on its own (as each is sent as its own block). */
export function estimateTokensOfAll(texts: Iterable<string>): number {
  let total = 0;
  for (const text of texts) total += estimateTokens(text);
  return total;
}

/**
 * The longest prefix of `text` whose estimate is at most `tokens`, never
 * splitting a surrogate pair (so the cut text is still valid Unicode).
 */
export function truncateToTokens(text: string, tokens: number): string {
  const limit = Math.max(0, tokens) * CHARS_PER_TOKEN;
  if (text.length <= limit) return text;
  let end = limit;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return text.slice(0, end);
}
