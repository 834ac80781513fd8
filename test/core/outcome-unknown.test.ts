/**
 * Honest outcomes: a 503 whose change may have been committed says so. A TCP
 * proxy between the service and PostgreSQL lets statements through and loses
 * their answers (`holdAnswers`): the service cannot know whether a statement
 * it sent (the put's insert, or one before it) ran, and answers 503 once its
 * statement bound passes. That answer
 * carries `Outcome-Unknown: true` (REST header; Connect metadata) and a
 * `details` line saying the change may have been committed, and does not
 * tell the caller to simply retry. A database that refuses connections
 * (nothing was sent) is a plain 503 without the flag.
 */
import { ConnectError } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { createTestDatabase, startServer, describeOnPostgres } from "../support/harness.ts";
import { startTcpProxy, useServerBehindProxy } from "../support/tcp-proxy.ts";

const STATEMENT_MS = 1000;

describeOnPostgres("a 503 that may have committed says so", "it cuts a connection to the server", () => {
  const behind = useServerBehindProxy({
    DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_MS),
    DATABASE_POOL_WAIT_MS: "1000",
  });

  it("REST and Connect: a put whose answer the database lost is 503 with Outcome-Unknown and says it may be committed", async () => {
    const app = await behind.t.createApp();
    expect((await behind.t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: 0 } })).status).toBe(
      200,
    );

    behind.proxy.holdAnswers();
    const rest = await behind.t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: 1 } });
    const connect = await behind.t
      .client(QueueService, app.token)
      .putMessage({ queue: "jobs", payload: { kind: { case: "numberValue", value: 2 } } })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    behind.proxy.release();

    expect(rest.status).toBe(503);
    expect(rest.headers.get("outcome-unknown")).toBe("true");
    expect(rest.body.error.code).toBe("unavailable");
    expect(rest.body.error.details).toEqual(["outcome: unknown, the change may have been committed"]);
    expect(rest.body.error.message).not.toMatch(/retry shortly/);
    expect(rest.body.error.message).toMatch(/Idempotency-Key/);
    expect(connect?.metadata.get("outcome-unknown")).toBe("true");
  });
});

describeOnPostgres("a database that refuses connections", "the embedded database has no connection to refuse", () => {
  it("is a plain 503: nothing was sent, so nothing can have been committed", async () => {
    const database = await createTestDatabase();
    const proxy = await startTcpProxy(database.url!);
    const t = await startServer({
      database: { ...database, url: proxy.url },
      env: { DATABASE_POOL_WAIT_MS: "1000" },
    });
    try {
      const app = await t.createApp();
      // The database's address stops answering: its connections are cut and new ones refused, so no
      // statement of the put can be sent.
      await proxy.close();
      const res = await t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: 1 } });
      expect(res.status).toBe(503);
      expect(res.headers.get("outcome-unknown")).toBeNull();
      expect(res.body.error.message).toMatch(/retry shortly/);
    } finally {
      await t.close();
      await database.drop();
    }
  });
});
