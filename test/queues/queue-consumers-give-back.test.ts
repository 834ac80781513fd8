/**
 * `consume` of `queue-consumers.ts`: messages claimed for a caller that left
 * during the claim are given back (`giveBack`, the store's `release`): back in
 * line at once, the delivery uncounted, nothing left in flight, instead of
 * staying leased to nobody for the whole lease.
 *
 * The claim is held in PostgreSQL: another connection holds
 * `LOCK TABLE queue_messages IN EXCLUSIVE MODE` (a table lock, which the
 * claim's `FOR UPDATE SKIP LOCKED` does not skip), so the claim statement
 * waits on it (seen in `pg_stat_activity`). The caller then leaves (HTTP/1.1:
 * its socket destroyed; HTTP/2: its stream reset, RST_STREAM CANCEL), the
 * server's side of the response closes (the event the server's abort signal
 * follows; the response comes from Fastify's `fastify.request.handler`
 * tracing channel), and only then the lock goes: the claim completes for a
 * caller already gone. Fastify publishes no end for a handler whose caller
 * left, so the give-back is awaited in the rows: each updated twice (a new
 * row version, not leased). That needs a second connection to the database:
 * PGlite has one, so there it is skipped.
 */
import diagnostics from "node:diagnostics_channel";
import http from "node:http";
import http2 from "node:http2";
import { once } from "node:events";
import pg from "pg";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { useTestApp, useTestServer, describeOnPostgres } from "../support/harness.ts";

/** The lease the aborted consumes ask for: far longer than anything the test waits. */
const LONG_LEASE_SECONDS = 600;

/** A request's handler as the server started it: its url, and its response (the server's side of the call). */
interface HandlerRun {
  url: string;
  response: NodeJS.EventEmitter;
}

/** The handlers the server starts, in order, through Fastify's tracing channel (published as a route's handler is called). */
function watchHandlers() {
  const channel = diagnostics.tracingChannel("fastify.request.handler");
  const started: HandlerRun[] = [];
  let arrived: (() => void) | undefined;
  const none = () => {};
  const handlers = {
    start(store: unknown) {
      const { request, reply } = store as { request: { url: string }; reply: { raw: NodeJS.EventEmitter } };
      started.push({ url: request.url, response: reply.raw });
      arrived?.();
    },
    end: none,
    asyncStart: none,
    asyncEnd: none,
    error: none,
  };
  channel.subscribe(handlers);
  return {
    /** The next handler started for `url` (from the moment of this call on). */
    async next(url: string): Promise<HandlerRun> {
      const from = started.length;
      for (;;) {
        const run = started.slice(from).find((r) => r.url === url);
        if (run) return run;
        await new Promise<void>((resolve) => (arrived = resolve));
      }
    },
    close: () => channel.unsubscribe(handlers),
  };
}

describeOnPostgres(
  "consume: messages claimed for a caller that left during the claim go back in line",
  "holding the claim on a lock takes a second connection, and PGlite has one",
  () => {
    const t = useTestServer();
    const app = useTestApp(t);
    /** Holds the lock. */
    let locker: pg.Client;
    /** Looks at the server's statements (outside the locker's transaction, whose view of pg_stat_activity is fixed). */
    let observer: pg.Client;
    let watcher: ReturnType<typeof watchHandlers>;
    let h2: http2.ClientHttp2Session | undefined;

    beforeAll(async () => {
      locker = new pg.Client({ connectionString: t.database.url });
      await locker.connect();
      observer = new pg.Client({ connectionString: t.database.url });
      await observer.connect();
      watcher = watchHandlers();
    });
    afterAll(async () => {
      watcher?.close();
      h2?.close();
      await locker?.end();
      await observer?.end();
    });

    /** Claims of queue messages wait from now until the returned function runs (the lock's transaction ends). */
    async function holdClaims(): Promise<() => Promise<void>> {
      await locker.query("BEGIN");
      await locker.query("LOCK TABLE queue_messages IN EXCLUSIVE MODE");
      return async () => void (await locker.query("COMMIT"));
    }

    /**
     * Claim statements of the server waiting on a lock now: named by their leading comment, since the
     * database shows only a statement's first 1 KiB and the claim is longer.
     */
    async function claimsWaiting(): Promise<number> {
      const { rows } = await observer.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%/* claim */%'`,
      );
      return rows[0].n as number;
    }

    /** The queue's messages: each row version (`xmin`, new with every update) and whether it is leased. */
    async function rows(queue: string): Promise<{ xmin: string; leased: boolean }[]> {
      const { rows } = await observer.query(
        `SELECT xmin::text AS xmin, lease_until IS NOT NULL AS leased FROM queue_messages WHERE app_id = $1 AND queue = $2`,
        [app.id, queue],
      );
      return rows as { xmin: string; leased: boolean }[];
    }

    async function listing(queue: string) {
      const res = await t.request("GET", "/v1/queues", { token: app.token });
      expect(res.status).toBe(200);
      return (res.body.queues as { name: string; depth: number; inFlight: number }[]).find((q) => q.name === queue);
    }

    /**
     * Puts `n` messages on `queue`, starts a consume with `start` while claims
     * are held, makes its caller leave once its claim waits, lets the claim
     * go, and checks that what it claimed went back in line.
     */
    async function leaveDuringClaim(options: {
      queue: string;
      n: number;
      /** The handler's url (to know its run). */
      url: string;
      /** Starts the consume; returns how its caller leaves and how its client side ends. */
      start: () => { leave: () => void; settled: Promise<unknown> };
    }) {
      const { queue, n, url } = options;
      for (let i = 0; i < n; i++) {
        const put = await t.request("POST", `/v1/queues/${queue}`, { token: app.token, body: { payload: { i } } });
        expect(put.status).toBe(200);
      }
      const before = new Set((await rows(queue)).map((r) => r.xmin));
      expect(before.size).toBeGreaterThan(0);
      const release = await holdClaims();
      let released = false;
      try {
        const run = watcher.next(url);
        const call = options.start();
        const handler = await run;
        // Its claim is in the database, waiting for the lock.
        await vi.waitFor(async () => expect(await claimsWaiting()).toBe(1), { timeout: 10_000, interval: 20 });
        const serverClosed = once(handler.response, "close");
        call.leave();
        // The server saw the caller leave (its side of the response closed: what the call's abort signal follows)...
        await serverClosed;
        await call.settled;
        // ...while the claim still waits: the claim completes for a caller already gone.
        expect(await claimsWaiting()).toBe(1);
        await release();
        released = true;
      } finally {
        if (!released) await release();
      }
      // The claim then updates every message (a new row version, leased); what the caller that left claimed
      // must be released again (another new version, not leased). Until then (a bounded wait on that state).
      await vi.waitFor(
        async () =>
          expect((await rows(queue)).map((r) => ({ updated: !before.has(r.xmin), leased: r.leased }))).toEqual(
            Array.from({ length: n }, () => ({ updated: true, leased: false })),
          ),
        { timeout: 5_000, interval: 20 },
      );
      // Nothing stays leased to the caller that left...
      expect(await listing(queue)).toMatchObject({ depth: n, inFlight: 0 });
      // ...and another consumer gets the messages at once (well within the lease the gone caller asked for),
      // the aborted claim's delivery uncounted.
      const got = await t.request("POST", `/v1/queues/${queue}/consume`, {
        token: app.token,
        body: { waitSeconds: 1, max: n },
      });
      expect(got.status).toBe(200);
      const messages = got.body.messages as { payload: { i: number }; deliveries: number; receipt: string }[];
      expect(messages.map((m) => m.payload.i).sort()).toEqual(Array.from({ length: n }, (_, i) => i));
      expect(messages.map((m) => m.deliveries)).toEqual(Array.from({ length: n }, () => 1));
      const acked = await t.request("POST", "/v1/queues/_ack", {
        token: app.token,
        body: { receipts: messages.map((m) => m.receipt) },
      });
      expect(acked.status).toBe(200);
      expect(await listing(queue)).toBeUndefined();
    }

    it("REST over HTTP/1.1, no wait: the caller's socket destroyed during the claim", async () => {
      const queue = "gone-h1";
      await leaveDuringClaim({
        queue,
        n: 1,
        url: `/v1/queues/${queue}/consume`,
        start() {
          const req = http.request(`${t.url}/v1/queues/${queue}/consume`, {
            method: "POST",
            headers: { authorization: `Bearer ${app.token}`, "content-type": "application/json" },
          });
          const settled = new Promise<void>((resolve) => {
            req.on("error", () => resolve());
            req.on("close", () => resolve());
          });
          req.on("response", () => expect.fail("the consume answered a caller that left"));
          req.end(JSON.stringify({ waitSeconds: 0, leaseSeconds: LONG_LEASE_SECONDS }));
          return { leave: () => req.destroy(), settled };
        },
      });
    });

    it("REST over HTTP/2, waiting consume of two (max): the caller's stream reset (RST_STREAM CANCEL) during the claim", async () => {
      const queue = "gone-h2";
      h2 = http2.connect(t.url);
      h2.on("error", () => {});
      const session = h2;
      await leaveDuringClaim({
        queue,
        n: 2,
        url: `/v1/queues/${queue}/consume`,
        start() {
          const stream = session.request({
            ":method": "POST",
            ":path": `/v1/queues/${queue}/consume`,
            authorization: `Bearer ${app.token}`,
            "content-type": "application/json",
          });
          stream.on("error", () => {});
          stream.on("response", () => expect.fail("the consume answered a caller that left"));
          const settled = once(stream, "close");
          stream.end(JSON.stringify({ waitSeconds: 5, leaseSeconds: LONG_LEASE_SECONDS, max: 2 }));
          return { leave: () => stream.close(http2.constants.NGHTTP2_CANCEL), settled };
        },
      });
    });
  },
);
