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
import { sql } from "kysely";

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
