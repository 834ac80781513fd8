/**
 * Prepared statements for hot queries. Put `${PREPARED}` in a statement whose
 * text never changes (only its parameters do; first in a `sql` template, or by
 * a query builder's `modifyFront`): on PostgreSQL it is then sent as a named
 * prepared statement, parsed and planned once per connection instead of on
 * every call (for a statement of a few CTEs, planning costs more than running
 * it). Only marked statements are prepared, so the prepared statements of a
 * connection stay few. On PGlite it is a comment.
 */
import { sql } from "kysely";
import pg from "pg";

export const PREPARED = sql.raw("/* prepared */ ");
const PREPARED_TEXT = "/* prepared */ ";
const preparedNames = new Map<string, string>();

/** A `pg` client that sends statements marked with `PREPARED` as named prepared statements. */
export class PreparingClient extends pg.Client {}
// Called below with the client as `this`, as the prototype method it is.
// eslint-disable-next-line @typescript-eslint/unbound-method
const plainQuery = pg.Client.prototype.query;
PreparingClient.prototype.query = function (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) {
  if (typeof config === "string" && config.includes(PREPARED_TEXT)) {
    let name = preparedNames.get(config);
    if (!name) preparedNames.set(config, (name = `pb_${preparedNames.size + 1}`));
    return (plainQuery as (...args: unknown[]) => unknown).call(this, { name, text: config, values }, callback);
  }
  return (plainQuery as (...args: unknown[]) => unknown).call(this, config, values, callback);
} as typeof pg.Client.prototype.query;
