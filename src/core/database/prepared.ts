/**
 * Prepared statements for hot queries. Put `${PREPARED}` in a statement whose
 * text never changes (only its parameters do; first in a `sql` template, or by
 * a query builder's `modifyFront`): on PostgreSQL it is then sent as a named
 * prepared statement (pg's `{ name, text }` query config, see `pg-pool.ts`),
 * parsed and planned once per connection instead of on every call (for a
 * statement of a few CTEs, planning costs more than running it). Only marked
 * statements are prepared, so the prepared statements of a connection stay
 * few. On PGlite it is a comment.
 */
import { CompiledQuery, sql, type Kysely, type PostgresPool } from "kysely";

const PREPARED_TEXT = "/* prepared */ ";
export const PREPARED = sql.raw(PREPARED_TEXT);

const preparedNames = new Map<string, string>();

/** The name a marked statement is prepared under (the same text, the same name, on every connection); undefined when unmarked. */
export function preparedNameOf(text: string): string | undefined {
  if (!text.includes(PREPARED_TEXT)) return undefined;
  let name = preparedNames.get(text);
  if (!name) preparedNames.set(text, (name = `pb_${preparedNames.size + 1}`));
  return name;
}

/** The pool a database handle runs its statements on, when they may skip the query builder (see `queryPrepared`). */
const directPools = new WeakMap<object, PostgresPool>();

/**
 * Lets `queryPrepared` on `db` (the Kysely instance of `pool`) go to the pool directly. Only for an
 * instance without a query log: a statement that skipped Kysely would be missing from the log (its
 * tracing spans).
 */
export function allowDirect(db: object, pool: PostgresPool): void {
  directPools.set(db, pool);
}

/**
 * Runs one statement whose text never changes, with its parameters (`$1`...), as a prepared statement
 * (the `PREPARED` mark is added here), and returns its rows.
 *
 * Why: a hot read of a few rows (a quota read on every `ListModels`) spent more of its time in the query
 * builder than in PostgreSQL: making the template's nodes, compiling them to this same text, and the
 * connection provider's promises. On a pool handle (`allowDirect`), this checks a connection out of the
 * same pool (its fair gate and its statement bound, `pg-pool.ts`), runs the statement and gives the
 * connection back. Anywhere else (a transaction, PGlite, an instance with a query log) it runs through
 * Kysely as before, with the same text and parameters.
 */
/** The marked text of each statement `queryPrepared` ran (a few fixed texts). */
const markedTexts = new Map<string, string>();

export async function queryPrepared<R>(
  db: Pick<Kysely<Record<never, never>>, "executeQuery">,
  text: string,
  values: readonly unknown[],
): Promise<R[]> {
  // One marked text per statement, made once: a new concatenation per call was flattened and hashed (for
  // its prepared name) on every call.
  let marked = markedTexts.get(text);
  if (marked === undefined) markedTexts.set(text, (marked = PREPARED_TEXT + text));
  const pool = directPools.get(db);
  if (pool === undefined) {
    const { rows } = await db.executeQuery<R>(CompiledQuery.raw(marked, [...values]));
    return rows;
  }
  const client = await pool.connect();
  try {
    const { rows } = await client.query<R>(marked, values);
    return rows;
  } finally {
    client.release();
  }
}
