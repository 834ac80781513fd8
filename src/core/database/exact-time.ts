/**
 * Timestamps as exact text, for page positions: a keyset page continues after
 * the last row's time, which PostgreSQL keeps to the microsecond and a JS
 * `Date` only to the millisecond. Written by SQL, read back by SQL; checked
 * in between, since a position comes back from outside in a page token.
 */
import { sql, type RawBuilder } from "kysely";

/** `to_char` format of a timestamptz in UTC to the microsecond: `2026-11-24T14:47:28.123456Z`. */
const EXACT_TIME_FORMAT = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"';

/** The timestamptz expression as exact UTC text. */
export function exactTimeText(column: RawBuilder<unknown>): RawBuilder<string> {
  return sql<string>`to_char(${column} AT TIME ZONE 'UTC', ${EXACT_TIME_FORMAT})`;
}

const EXACT_TIME_SHAPE = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.\d{6}Z$/;

/** Whether text is what `exactTimeText` writes, and a real calendar time (no 30 February). */
export function isExactTimeText(text: string): boolean {
  const m = EXACT_TIME_SHAPE.exec(text);
  // Year 0000 parses in JavaScript (1 BC) but not as a PostgreSQL timestamptz written this way.
  return (
    !!m &&
    !m[1].startsWith("0000") &&
    !Number.isNaN(Date.parse(`${m[1]}Z`)) &&
    new Date(`${m[1]}Z`).toISOString().startsWith(m[1])
  );
}
