/**
 * DeleteApp racing what it deletes (src/admin/admin-service.ts `deleteApp`):
 * a deletion refused in its transaction leaves the app whole, its analytics
 * included (they were deleted before the transaction); and a secret link in
 * use while its app is deleted neither deadlocks with the deletion nor is
 * refused: the deletion takes the app's row, then its links, before its
 * cascade reaches the secrets, the order a link's use takes.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { backend, useTestServer } from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe("DeleteApp", () => {
  it("refused in its transaction, leaves the app and its analytics events", async () => {
    const app = await t.createApp("kept-on-refusal");
    await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "visit", properties: { page: "string" } },
    });
    const logged = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: { events: [1, 2, 3].map(() => ({ type: "visit", properties: { page: "home" } })) },
    });
    expect(logged.status).toBe(200);
    const db = tables(t.server.deps.db);
    const events = async () =>
      Number(
        (await sql<{ n: number }>`SELECT count(*)::int AS n FROM analytics_events WHERE app_id = ${app.id}`.execute(db))
          .rows[0].n,
      );
    expect(await events()).toBe(3);
    // The deletion's transaction fails at the app's row (as a deadlock or a lost connection would).
    await sql`CREATE FUNCTION refuse_app_delete() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN RAISE EXCEPTION 'refused'; END $$`.execute(db);
    await sql
      .raw(
        `CREATE TRIGGER refuse_app_delete BEFORE DELETE ON apps FOR EACH ROW
         WHEN (OLD.id = '${app.id}') EXECUTE FUNCTION refuse_app_delete()`,
      )
      .execute(db);
    try {
      expect(await failure(t.admin.deleteApp({ appId: app.id }))).toBeInstanceOf(Error);
    } finally {
      await sql`DROP TRIGGER refuse_app_delete ON apps`.execute(db);
      await sql`DROP FUNCTION refuse_app_delete()`.execute(db);
    }
    expect((await t.admin.getApp({ appId: app.id })).app?.id).toBe(app.id);
    expect(await events()).toBe(3);
    // Deleted for real, its events go with it.
    await t.admin.deleteApp({ appId: app.id });
    expect(await events()).toBe(0);
  });
});

describe.skipIf(backend !== "postgres")(
  `DeleteApp racing a link's use (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); holding a use open takes a second connection, and PGlite has one"})`,
  () => {
    const clients = usePgClients(t, 2);
    const [user, observer] = [() => clients[0], () => clients[1]];

    it("the use, holding its link when the deletion starts, then takes its secret and commits; the deletion follows", async () => {
      const app = await t.createApp("deleted-while-linked");
      await t.admin.declareSecrets({ appId: app.id, names: ["KEY"] });
      await t.admin.createSecretLink({ appId: app.id, name: "KEY" });
      // A use as the store makes one: its link first, then (below) its secret.
      await user().query("BEGIN");
      await user().query("UPDATE secret_links SET used_at = now() WHERE app_id = $1", [app.id]);
      const deletion = failure(t.admin.deleteApp({ appId: app.id }));
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await observer().query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`,
          [(user() as unknown as { processID: number }).processID],
        );
        if (rows[0].n > 0) break;
        if (Date.now() > deadline) throw new Error("the deletion never waited on the link");
        await new Promise((resolve) => setImmediate(resolve));
      }
      // The secret is not the deletion's yet: the use goes on (it deadlocked before, after a second).
      await user().query("SELECT version FROM secrets WHERE app_id = $1 FOR UPDATE", [app.id]);
      await user().query("COMMIT");
      expect(await deletion).toBeUndefined();
      const { rows } = await observer().query("SELECT 1 FROM apps WHERE id = $1", [app.id]);
      expect(rows).toEqual([]);
    });
  },
);
