/**
 * OpenTelemetry traces (src/core/tracing.ts), sent by the real OTLP/HTTP exporter to an OTLP receiver
 * this test runs (a plain HTTP server decoding the JSON export requests): one put (a Connect call) →
 * consume (REST) → ack (REST) makes a SERVER span per request, named after the RPC or the route, each the
 * child of the caller's W3C `traceparent`; a `send` PRODUCER span under the put, whose context is stored
 * with the message; a `receive` span under the consume, linked to that `send`; an `ack` settle span;
 * statement spans under them. Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is sent and the message carries
 * no trace context.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { querySummary } from "../../src/core/tracing.ts";
import { startServer, useTestServer, type TestServer } from "../support/harness.ts";

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: OtlpValue }[];
  links?: { traceId: string; spanId: string }[];
}
interface ExportRequest {
  resourceSpans: {
    resource: { attributes: { key: string; value: OtlpValue }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;

/** An OTLP/HTTP receiver: every export request it was sent, decoded. */
async function startReceiver(): Promise<{ url: string; requests: ExportRequest[]; close(): Promise<void> }> {
  const requests: ExportRequest[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces" || req.headers["content-type"] !== "application/json") {
        res.writeHead(400).end();
        return;
      }
      requests.push(JSON.parse(Buffer.concat(chunks).toString()) as ExportRequest);
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const attr = (span: OtlpSpan, key: string): string | number | boolean | undefined => {
  const value = span.attributes.find((a) => a.key === key)?.value;
  if (!value) return undefined;
  if (value.intValue !== undefined) return Number(value.intValue);
  return value.stringValue ?? value.boolValue;
};

describe("traces of a put, a consume and an ack, through an OTLP receiver", () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let spans: OtlpSpan[];
  let serviceName: string | undefined;
  let messageId: string;
  // The callers' own spans: the put's and the consume's (the ack comes without one).
  const putCaller = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331" };
  const consumeCaller = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7" };
  // A put with a deadline, which connect-fastify's plugin serves rather than the unary short path.
  const pluginCaller = { traceId: "5ce0e9a56015fec5aadfa328ae398115", spanId: "ab12cd34ef56ab78" };
  const traceparent = (c: { traceId: string; spanId: string }) => `00-${c.traceId}-${c.spanId}-01`;

  beforeAll(async () => {
    receiver = await startReceiver();
    const t = await startServer({
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: "batteries-under-test" },
    });
    try {
      const app = await t.createApp();
      const put = await t.request("POST", "/platform.queues.v1.QueueService/PutMessage", {
        token: app.token,
        headers: { traceparent: traceparent(putCaller) },
        body: { queue: "jobs", payload: { n: 1 } },
      });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      messageId = (put.body as { id: string }).id;
      const viaPlugin = await t.request("POST", "/platform.queues.v1.QueueService/PutMessage", {
        token: app.token,
        headers: { traceparent: traceparent(pluginCaller), "connect-timeout-ms": "60000" },
        body: { queue: "later", payload: { n: 2 } },
      });
      expect(viaPlugin.status, JSON.stringify(viaPlugin.body)).toBe(200);
      const consumed = await t.request("POST", "/v1/queues/jobs/consume", {
        token: app.token,
        headers: { traceparent: traceparent(consumeCaller) },
        body: {},
      });
      expect(consumed.status).toBe(200);
      const message = (consumed.body as { message: { id: string; receipt: string } }).message;
      expect(message.id).toBe(messageId);
      const acked = await t.request("POST", "/v1/queues/_ack", {
        token: app.token,
        body: { receipt: message.receipt },
      });
      expect(acked.body).toEqual({ acked: true });
    } finally {
      // Closing sends what is left.
      await t.close();
    }
    spans = receiver.requests.flatMap((r) => r.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans)));
    serviceName = receiver.requests[0]?.resourceSpans[0].resource.attributes.find((a) => a.key === "service.name")
      ?.value.stringValue;
  }, 120_000);
  afterAll(() => receiver?.close());

  const one = (name: string, traceId?: string) => {
    const found = spans.filter((s) => s.name === name && (traceId === undefined || s.traceId === traceId));
    expect(
      found.map((s) => s.name),
      `${name} in ${spans.map((s) => s.name).join(", ")}`,
    ).toEqual([name]);
    return found[0];
  };

  it("names the service", () => {
    expect(serviceName).toBe("batteries-under-test");
  });

  it("makes the put's SERVER span a child of the caller's, named after the RPC", () => {
    const span = one("platform.queues.v1.QueueService/PutMessage", putCaller.traceId);
    expect(span.kind).toBe(SERVER);
    expect(span.traceId).toBe(putCaller.traceId);
    expect(span.parentSpanId).toBe(putCaller.spanId);
    expect(attr(span, "rpc.system")).toBe("connect_rpc");
    expect(attr(span, "rpc.service")).toBe("platform.queues.v1.QueueService");
    expect(attr(span, "rpc.method")).toBe("PutMessage");
    expect(attr(span, "http.request.method")).toBe("POST");
    expect(attr(span, "http.response.status_code")).toBe(200);
  });

  it("does the same for a call connect-fastify's plugin serves (past the short path)", () => {
    const server = one("platform.queues.v1.QueueService/PutMessage", pluginCaller.traceId);
    expect(server.parentSpanId).toBe(pluginCaller.spanId);
    expect(attr(server, "rpc.method")).toBe("PutMessage");
    const send = one("send later");
    expect(send.traceId).toBe(pluginCaller.traceId);
    expect(send.parentSpanId).toBe(server.spanId);
  });

  it("puts the message in a send PRODUCER span under it, with the statement that stored it", () => {
    const server = one("platform.queues.v1.QueueService/PutMessage", putCaller.traceId);
    const send = one("send jobs");
    expect(send.kind).toBe(PRODUCER);
    expect(send.traceId).toBe(putCaller.traceId);
    expect(send.parentSpanId).toBe(server.spanId);
    expect(attr(send, "messaging.system")).toBe("platform_batteries");
    expect(attr(send, "messaging.operation.type")).toBe("send");
    expect(attr(send, "messaging.destination.name")).toBe("jobs");
    expect(attr(send, "messaging.message.id")).toBe(messageId);
    const insert = spans.find((s) => s.name === "INSERT queue_messages" && s.traceId === putCaller.traceId);
    expect(insert, spans.map((s) => s.name).join(", ")).toBeDefined();
    expect(insert!.kind).toBe(CLIENT);
    expect(attr(insert!, "db.system.name")).toBe("postgresql");
    expect(attr(insert!, "db.query.text")).toContain("INSERT INTO queue_messages");
    // The statement's text, never its values: the payload is not in it.
    expect(String(attr(insert!, "db.query.text"))).not.toContain('{"n":1}');
  });

  it("receives it in a span under the consume's, linked to the put's send span", () => {
    const server = one("POST /v1/queues/:queue/consume");
    expect(server.kind).toBe(SERVER);
    expect(server.traceId).toBe(consumeCaller.traceId);
    expect(server.parentSpanId).toBe(consumeCaller.spanId);
    expect(attr(server, "http.route")).toBe("/v1/queues/:queue/consume");
    expect(attr(server, "http.response.status_code")).toBe(200);
    const receive = one("receive jobs");
    expect(receive.kind).toBe(CLIENT);
    expect(receive.parentSpanId).toBe(server.spanId);
    expect(attr(receive, "messaging.operation.type")).toBe("receive");
    expect(attr(receive, "messaging.message.id")).toBe(messageId);
    const send = one("send jobs");
    expect(receive.links?.map((l) => ({ traceId: l.traceId, spanId: l.spanId }))).toEqual([
      { traceId: send.traceId, spanId: send.spanId },
    ]);
    // The claim's statement is the receive's child.
    const claim = spans.find((s) => s.parentSpanId === receive.spanId && s.name === "UPDATE queue_messages");
    expect(claim, spans.map((s) => s.name).join(", ")).toBeDefined();
  });

  it("settles it in an ack span, in a trace of its own when the caller sent none", () => {
    const server = one("POST /v1/queues/_ack");
    expect(server.parentSpanId ?? "").toBe("");
    expect([putCaller.traceId, consumeCaller.traceId]).not.toContain(server.traceId);
    const ack = one("ack");
    expect(ack.kind).toBe(CLIENT);
    expect(ack.parentSpanId).toBe(server.spanId);
    expect(attr(ack, "messaging.operation.type")).toBe("settle");
    expect(attr(ack, "messaging.message.id")).toBe(messageId);
  });

  it("makes no span for statements outside a request (housekeeping, gauges)", () => {
    const traced = new Set([
      putCaller.traceId,
      pluginCaller.traceId,
      consumeCaller.traceId,
      one("POST /v1/queues/_ack").traceId,
    ]);
    const roots = spans.filter((s) => !s.parentSpanId || !spans.some((p) => p.spanId === s.parentSpanId));
    for (const root of roots) {
      expect(root.kind, root.name).toBe(SERVER);
      if (!traced.has(root.traceId)) expect(root.name, "only requests are traced").not.toMatch(/^(SELECT|INSERT)/);
    }
  });
});

describe("without OTEL_EXPORTER_OTLP_ENDPOINT", () => {
  const t: TestServer = useTestServer();

  it("stores no trace context with a message put with a traceparent", async () => {
    const app = await t.createApp();
    const put = await t.request("POST", "/v1/queues/plain", {
      token: app.token,
      headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
      body: { payload: 1 },
    });
    expect(put.status).toBe(200);
    const { rows } = await sql<{ trace_parent: string | null }>`
      SELECT trace_parent FROM queue_messages WHERE queue = 'plain'`.execute(t.server.deps.db);
    expect(rows).toEqual([{ trace_parent: null }]);
    expect(t.server.deps.tracing).toBeUndefined();
  });
});

describe("querySummary", () => {
  it("names a statement by its operation and first table", () => {
    expect(querySummary("/* prepared */ WITH depth AS (SELECT 1) INSERT INTO queue_messages (id) SELECT 1")).toBe(
      "INSERT queue_messages",
    );
    expect(querySummary('select "id" from "apps" where "id" = $1')).toBe("SELECT apps");
    expect(querySummary("UPDATE queue_messages m SET x = 1")).toBe("UPDATE queue_messages");
    expect(querySummary("BEGIN")).toBe("BEGIN");
    expect(
      querySummary(
        "WITH next AS (SELECT id FROM queue_messages FOR UPDATE SKIP LOCKED) UPDATE queue_messages m SET n = 1",
      ),
    ).toBe("UPDATE queue_messages");
    expect(querySummary("SELECT id FROM queue_messages WHERE id = $1 FOR UPDATE")).toBe("SELECT queue_messages");
  });
});
