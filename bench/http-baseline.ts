/**
 * The baseline of `npm run bench:http`: a bare fastify server (no auth, no
 * request log, no metrics, no validation, no protobuf) whose routes run the
 * same SQL as the service's stores through `pg`, and answer the same JSON.
 * What the service spends beyond this is the HTTP layer's overhead (auth,
 * logging, metrics, validation, message mapping, protocol handling).
 *
 * Started by bench/http.ts in its own process with the node flags of
 * `npm start`. Environment: DATABASE_URL, PORT, BASELINE_APP_ID (the app
 * whose rows the reads return), BASELINE_WRITE_APP_ID (the app the puts write to).
 *
 * The statements are copied from the stores (`event-type-store.ts`,
 * the queue store's `list` and `put` (`src/queues/store/`) (the per-queue counts of migration 0012),
 * `quota-store.ts` `usedMany`); keep them in step when those change. The
 * service's put also takes the queue's advisory lock in its transaction, or
 * batches puts; the baseline runs the one statement. Like the service's, the
 * statements are named (prepared once per connection), so both pay the same
 * SQL and the difference is the HTTP layer. One difference on purpose: the put notifies on a
 * channel nobody listens to, so the service under test is not woken by the
 * baseline's puts.
 */
import Fastify, { type FastifyInstance } from "fastify";
import pg from "pg";

const INT8_OID = 20;
const DATE_OID = 1082;
const appId = process.env.BASELINE_APP_ID ?? "";
const writeAppId = process.env.BASELINE_WRITE_APP_ID ?? "";
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: 20,
  types: {
    getTypeParser: ((oid: number, format?: "text" | "binary") =>
      oid === INT8_OID
        ? (v: string) => Number(v)
        : oid === DATE_OID
          ? (v: string) => v
          : (pg.types.getTypeParser(oid, format) as (v: string) => unknown)) as typeof pg.types.getTypeParser,
  },
});

const LEASED = "(lease_until > now() AND visible_at > now())";
const EXPIRED = `(
  SELECT app_id, queue FROM queue_messages
  WHERE expires_at <= now() AND NOT coalesce(${LEASED}, false)
  ORDER BY expires_at LIMIT 10000
)`;
const LIST_TYPES = `SELECT name, properties, created_at, updated_at FROM analytics_event_types WHERE app_id = $1::uuid ORDER BY name`;
// The count store's `list` (store/count-store.ts): from the per-queue counts, with the leased, expired and dead-letter corrections.
const LIST_QUEUES = `
  WITH c AS (
    SELECT queue, sum(n) AS total FROM queue_counts WHERE app_id = $1 GROUP BY queue HAVING sum(n) > 0
  ), m AS (
    SELECT c.queue, c.total,
           (SELECT count(*)::int FROM queue_messages q
            WHERE q.app_id = $1 AND q.queue = c.queue AND q.visible_at > now() AND q.lease_until > now()) AS in_flight,
           (SELECT min(h.enqueued_at) FROM (
              SELECT q.enqueued_at FROM queue_messages q
              WHERE q.app_id = $1 AND q.queue = c.queue AND q.expires_at > now()
                AND NOT coalesce(q.lease_until > now() AND q.visible_at > now(), false)
              ORDER BY q.visible_at LIMIT 16) h) AS oldest_at
    FROM c
  ), e AS (
    SELECT queue, count(*)::int AS n FROM ${EXPIRED} x WHERE x.app_id = $1 GROUP BY queue
  ), d AS (
    SELECT queue, count(*)::int AS n FROM queue_dead_letters WHERE app_id = $1 GROUP BY queue
  )
  SELECT coalesce(m.queue, d.queue) AS queue, (m.total - coalesce(e.n, 0))::int AS total, m.in_flight, m.oldest_at,
         coalesce(d.n, 0) AS dead_letters
  FROM m LEFT JOIN e ON e.queue = m.queue FULL JOIN d ON d.queue = m.queue
  ORDER BY 1`;
const USED = `SELECT counter, used FROM quota_usage WHERE app_id = $1::uuid AND day = $2::date AND counter = ANY($3::text[])`;
// The put store's `put` (store/put-store.ts): the depth from the counts (depthOf), then the insert.
const PUT = `
  WITH depth AS (
    SELECT greatest(0,
      (SELECT coalesce(sum(n), 0) FROM queue_counts WHERE app_id = $1 AND queue = $2)
      - (SELECT count(*) FROM queue_messages WHERE app_id = $1 AND queue = $2 AND visible_at > now() AND lease_until > now())
      - (SELECT count(*) FROM ${EXPIRED} e WHERE e.app_id = $1 AND e.queue = $2)
    )::int AS n
  ), ins AS (
    INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at)
    SELECT $1, $2, $4,
           now() + make_interval(secs => $5),
           now() + make_interval(secs => $6)
    FROM depth WHERE depth.n < $3
    RETURNING id, expires_at
  )
  SELECT depth.n, ins.id, ins.expires_at,
         CASE WHEN ins.id IS NOT NULL AND $7::text IS NOT NULL
              THEN pg_notify('pb_bench_baseline', $7::text) END AS notified
  FROM depth LEFT JOIN ins ON true`;

const ms = (d: Date | null) => (d ? d.getTime() : null);
const day = () => new Date().toISOString().slice(0, 10);

/**
 * BASELINE_HTTP2=1 serves cleartext HTTP/2 (prior knowledge) instead of HTTP/1.1: the floor of what any
 * fastify route on Node's HTTP/2 can reach, which the service's gRPC, h2c REST and (with
 * BENCH_CONNECT_HTTP=2) Connect figures cannot beat, since connect-fastify serves them on that same layer.
 */
const fastify = (process.env.BASELINE_HTTP2 === "1"
  ? Fastify({ logger: false, http2: true })
  : Fastify({ logger: false })) as unknown as FastifyInstance;

fastify.get("/v1/analytics/types", async () => {
  const { rows } = await pool.query<{
    name: string;
    properties: Record<string, string>;
    created_at: Date;
    updated_at: Date;
  }>({ name: "list_types", text: LIST_TYPES, values: [appId] });
  return {
    types: rows.map((r) => ({
      name: r.name,
      properties: r.properties,
      createdAt: ms(r.created_at),
      updatedAt: ms(r.updated_at),
    })),
  };
});

fastify.get("/v1/queues", async () => {
  const { rows } = await pool.query<{
    queue: string;
    total: number | null;
    in_flight: number | null;
    oldest_at: Date | null;
    dead_letters: number;
  }>({ name: "list_queues", text: LIST_QUEUES, values: [appId] });
  return {
    queues: rows
      .map((r) => {
        const inFlight = r.in_flight ?? 0;
        const depth = (r.total ?? 0) - inFlight;
        return { r, depth, inFlight };
      })
      .filter((q) => q.depth > 0 || q.inFlight > 0 || q.r.dead_letters > 0)
      .map(({ r, depth, inFlight }) => ({
        name: r.queue,
        depth,
        inFlight,
        maxDepth: 10_000,
        oldestAt: depth > 0 ? ms(r.oldest_at) : null,
      })),
  };
});

fastify.get("/v1/inference/models", async () => {
  const today = day();
  const { rows } = await pool.query<{ counter: string; used: number }>({
    name: "used",
    text: USED,
    values: [appId, today, ["fast_tokens", "embed_tokens"]],
  });
  const used = (counter: string) => Number(rows.find((r) => r.counter === counter)?.used ?? 0);
  const fast = used("fast_tokens");
  const embed = used("embed_tokens");
  return {
    models: [
      { name: "platform/fast", kind: "generate", tokensPerDay: 200_000, remainingToday: Math.max(0, 200_000 - fast) },
      {
        name: "platform/embed",
        kind: "embed",
        tokensPerDay: 1_000_000,
        remainingToday: Math.max(0, 1_000_000 - embed),
      },
    ],
  };
});

fastify.post<{ Params: { queue: string }; Body: { payload: unknown } }>("/v1/queues/:queue", async (req) => {
  const { queue } = req.params;
  const notify = `baseline|${writeAppId}|${queue}|0`;
  const depthBelow = 10_000;
  const ttl = 345_600;
  const { rows } = await pool.query<{ n: number; id: string | null; expires_at: Date | null }>({
    name: "put",
    text: PUT,
    values: [writeAppId, queue, depthBelow, JSON.stringify(req.body.payload), 0, ttl, notify],
  });
  const row = rows[0];
  if (!row.id) throw new Error("queue full");
  return { id: row.id, queue, expiresAt: ms(row.expires_at) };
});

await fastify.listen({ port: Number(process.env.PORT), host: "127.0.0.1" });
// No fastify.close(): over h2c it waits for every client session to end, and the load generator's may linger.
process.on("SIGTERM", () => {
  void pool.end().finally(() => process.exit(0));
});
