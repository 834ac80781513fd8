/**
 * `toPlatformError` (src/core/errors.ts) on real database errors, from the
 * backend under test: a row naming an app that was deleted meanwhile (a foreign
 * key violation on `app_id`) is the 401 a new request of that app gets, not a
 * 500; other foreign keys stay internal.
 */
import crypto from "node:crypto";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { toPlatformError } from "../../src/core/errors.ts";
import { useTestServer } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

async function failure(statement: Promise<unknown>): Promise<unknown> {
  return statement.then(
    () => {
      throw new Error("the statement did not fail");
    },
    (err: unknown) => err,
  );
}

describe("toPlatformError", () => {
  it("a row of a deleted app (app_id foreign key) is unauthenticated, as a new request would be", async () => {
    const db = tables(t.server.deps.db);
    const gone = crypto.randomUUID();
    for (const insert of [
      sql`INSERT INTO quota_usage (app_id, day, counter, used) VALUES (${gone}::uuid, current_date, 'events', 1)`,
      sql`INSERT INTO analytics_event_types (app_id, name, properties) VALUES (${gone}::uuid, 'signup', '{}'::jsonb)`,
    ]) {
      const err = await failure(insert.execute(db));
      expect(toPlatformError(err)).toMatchObject({ code: "unauthenticated", message: "the app was deleted" });
      // Wrapped as a cause, too.
      expect(toPlatformError(new Error("outer", { cause: err })).code).toBe("unauthenticated");
    }
  });

  it("a foreign key that does not name the app stays internal", () => {
    const err = Object.assign(new Error("insert or update violates foreign key constraint"), {
      code: "23503",
      constraint: "secret_links_secret_fkey",
    });
    expect(toPlatformError(err)).toMatchObject({ code: "internal", message: "internal error" });
  });
});
