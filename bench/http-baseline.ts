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
 * `queue-store.ts` `list` and `put`, `quota-store.ts` `usedMany`); keep them in
 * step when those change. One difference on purpose: the put notifies on a
 * channel nobody listens to, so the service under test is not woken by the
 * baseline's puts.
 */
import Fastify from "fastify";
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

const WAITING = "(deliveries = 0 OR visible_at <= now()) AND expires_at > now()";
const LIST_TYPES = `SELECT name, properties, created_at, updated_at FROM analytics_event_types WHERE app_id = $1::uuid ORDER BY name`;
const LIST_QUEUES = `
  SELECT queue,
         count(*) FILTER (WHERE ${WAITING})::int AS depth,
         count(*) FILTER (WHERE deliveries > 0 AND visible_at > now())::int AS in_flight,
         min(enqueued_at) FILTER (WHERE ${WAITING}) AS oldest_at
  FROM queue_messages
  WHERE app_id = $1
  GROUP BY queue
  ORDER BY queue`;
const USED = `SELECT counter, used FROM quota_usage WHERE app_id = $1::uuid AND day = $2::date AND counter = ANY($3::text[])`;
const PUT = `
  WITH depth AS (
    SELECT count(*)::int AS n FROM (
      SELECT 1 FROM queue_messages
      WHERE app_id = $1 AND queue = $2 AND ${WAITING}
      LIMIT $3
    ) w
  ), ins AS (
    INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at)
    SELECT $4, $5, $6,
           now() + make_interval(secs => $7),
           now() + make_interval(secs => $8)
    FROM depth WHERE depth.n < $9
    RETURNING id, expires_at
  )
  SELECT depth.n, ins.id, ins.expires_at,
         CASE WHEN ins.id IS NOT NULL AND $10::text IS NOT NULL
              THEN pg_notify('pb_bench_baseline', $11::text) END AS notified
  FROM depth LEFT JOIN ins ON true`;

const ms = (d: Date | null) => (d ? d.getTime() : null);
const day = () => new Date().toISOString().slice(0, 10);

const fastify = Fastify({ logger: false });

fastify.get("/v1/analytics/types", async () => {
  const { rows } = await pool.query<{
    name: string;
    properties: Record<string, string>;
    created_at: Date;
    updated_at: Date;
  }>(LIST_TYPES, [appId]);
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
  const { rows } = await pool.query<{ queue: string; depth: number; in_flight: number; oldest_at: Date | null }>(
    LIST_QUEUES,
    [appId],
  );
  return {
    queues: rows
      .filter((r) => r.depth > 0 || r.in_flight > 0)
      .map((r) => ({
        name: r.queue,
        depth: r.depth,
        inFlight: r.in_flight,
        maxDepth: 10_000,
        oldestAt: ms(r.oldest_at),
      })),
  };
});

fastify.get("/v1/inference/models", async () => {
  const today = day();
  const { rows } = await pool.query<{ counter: string; used: number }>(USED, [
    appId,
    today,
    ["fast_tokens", "embed_tokens"],
  ]);
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
  const { rows } = await pool.query<{ n: number; id: string | null; expires_at: Date | null }>(PUT, [
    writeAppId,
    queue,
    depthBelow,
    writeAppId,
    queue,
    JSON.stringify(req.body.payload),
    0,
    ttl,
    depthBelow,
    notify,
    notify,
  ]);
  const row = rows[0];
  if (!row.id) throw new Error("queue full");
  return { id: row.id, queue, expiresAt: ms(row.expires_at) };
});

await fastify.listen({ port: Number(process.env.PORT), host: "127.0.0.1" });
process.on("SIGTERM", () => {
  void fastify
    .close()
    .then(() => pool.end())
    .then(() => process.exit(0));
});
