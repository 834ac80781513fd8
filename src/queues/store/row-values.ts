/**
 * The values a statement of the queue facility reads, as the drivers give them: node-postgres parses a
 * `timestamptz` into a Date, PGlite may hand its text; a `bigint` (a `count(*)`, a `sum`) comes as
 * its decimal text, an `int` as a number. Row types name these, and the two helpers below turn them into
 * what the store returns, so no row is typed `unknown` and no value is cast.
 */

/** A timestamp as a driver gives it. */
export type When = Date | string;

/** A count as a driver gives it: an int4 as a number, an int8 (bigint) as its decimal text. */
export type Count = number | string;

/** The one conversion of a read timestamp, for every store of the queue facility. */
export const toDate = (v: When): Date => (v instanceof Date ? v : new Date(v));

/** `toDate`, keeping a SQL null null. */
export const toDateOrNull = (v: When | null): Date | null => (v === null ? null : toDate(v));
