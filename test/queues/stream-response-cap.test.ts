/**
 * `StreamMessages` answers in responses of at most 1 MiB encoded, so that
 * standard gRPC clients, which refuse a message over 4 MiB by default, receive
 * large messages (here Python grpcio, a client this project did not write);
 * messages a stream claimed but did not send go back in line, neither leased
 * nor counted as a delivery; what is sent does not depend on the skew between
 * the instance's clock and the database's.
 */
import { execFile } from "node:child_process";
import http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it, vi } from "vitest";
import {
  QueueService,
  StreamMessagesRequestSchema,
  StreamMessagesResponseSchema,
} from "../../gen/platform/queues/v1/queues_pb.js";
import { backend, useTestApp, useTestServer } from "../support/harness.ts";
import { metricValue } from "../support/server-state.ts";

const logLines: string[] = [];
const t = useTestServer({ logLines });
const app = useTestApp(t);
const PYTHON = "/usr/bin/python3";
const SCRIPT = new URL("../support/grpcio-stream.py", import.meta.url).pathname;
const MiB = 1 << 20;

/** Runs the grpcio client; resolves with its JSON lines. */
function grpcioStream(queue: string, stopAfter: number): Promise<Record<string, unknown>[]> {
  const request = Buffer.from(
    toBinary(StreamMessagesRequestSchema, create(StreamMessagesRequestSchema, { queue, window: 1000 })),
  );
  const target = new URL(t.url).host;
  return new Promise((resolve, reject) => {
    execFile(
      PYTHON,
      [SCRIPT, target, app.token, request.toString("hex"), String(stopAfter)],
      { maxBuffer: 16 * MiB },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`${err.message}\n${stderr}`));
        resolve(
          stdout
            .trim()
            .split("\n")
            .map((line) => JSON.parse(line) as Record<string, unknown>),
        );
      },
    );
  });
}

/** A raw gRPC `StreamMessages` call over HTTP/2 (no client library buffering what arrives): its session and stream. */
function rawStream(request: { queue: string; window: number; leaseSeconds: number }) {
  const session = http2.connect(t.url);
  const call = session.request({
    ":method": "POST",
    ":path": "/platform.queues.v1.QueueService/StreamMessages",
    "content-type": "application/grpc",
    te: "trailers",
    authorization: `Bearer ${app.token}`,
  });
  const message = toBinary(StreamMessagesRequestSchema, create(StreamMessagesRequestSchema, request));
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  call.end(frame);
  return { session, call };
}

async function put100(queue: string): Promise<void> {
  const queues = t.client(QueueService, app.token);
  const big = "x".repeat(250_000);
  for (let i = 0; i < 4; i++) {
    await queues.putMessages({
      queue,
      messages: Array.from({ length: 25 }, () => ({ payload: { kind: { case: "stringValue", value: big } } })),
    });
  }
}

async function queueStats(queue: string) {
  const { queues } = await t.client(QueueService, app.token).listQueues({});
  const q = queues.find((x) => x.name === queue)!;
  return { depth: Number(q.depth), inFlight: Number(q.inFlight) };
}

const counter = (name: string) => metricValue(t, name);
const waitingConsumers = () => metricValue(t, "queue_waiting_consumers");
const streamsOpen = () => metricValue(t, "queue_streams");

describe("StreamMessages response size", () => {
  it("grpcio receives 100 × 250 kB messages, in responses of at most 1 MiB with at least one message each", async () => {
    await put100("big");
    const lines = await grpcioStream("big", 100);
    const responses = lines.filter((l) => "bytes" in l) as { bytes: number; messages: number }[];
    expect(lines.at(-1)).toEqual({ status: "OK", received: 100 });
    expect(responses.reduce((n, r) => n + r.messages, 0)).toBe(100);
    for (const r of responses) {
      expect(r.bytes).toBeLessThanOrEqual(MiB);
      expect(r.messages).toBeGreaterThanOrEqual(1);
    }
    expect(responses.length).toBeGreaterThanOrEqual(25);
  });

  it("messages claimed but not sent when the client cancels are neither leased nor counted", async () => {
    await put100("cut");
    const sentBefore = counter("queue_stream_messages_sent_total");
    const releasedBefore = counter("queue_stream_leases_released_total");
    const lines = await grpcioStream("cut", 1);
    const received = (lines.at(-1) as { received: number }).received;
    expect(received).toBeGreaterThanOrEqual(1);
    // The stream ends on the server (its finally gives back the unsent leases) once it sees the cancel.
    const started = Date.now();
    while (streamsOpen() > 0 && Date.now() - started < 10_000) await new Promise((r) => setTimeout(r, 20));
    expect(streamsOpen()).toBe(0);
    // One claim took all 100; what was handed to the transport (some of it still on the wire when the client
    // cancelled) stays leased, the rest went back in line.
    const sent = counter("queue_stream_messages_sent_total") - sentBefore;
    expect(sent).toBeGreaterThanOrEqual(received);
    expect(sent).toBeLessThan(100);
    expect(counter("queue_stream_leases_released_total") - releasedBefore).toBe(100 - sent);
    expect(await queueStats("cut")).toEqual({ depth: 100 - sent, inFlight: sent });
    // The messages given back were never delivered: a consume now sees its message's first delivery.
    const next = await t.client(QueueService, app.token).consumeMessage({ queue: "cut", waitSeconds: 0 });
    expect(next.message?.deliveries).toBe(1);
  });

  it("messages a cancelled stream gives back wake a consumer waiting on the queue at once", async () => {
    await put100("woken");
    const queues = t.client(QueueService, app.token, "grpc");
    // A raw gRPC reader that stops reading after its first response, so that HTTP/2 flow control holds the
    // rest on the server, unsent (a client that buffers what arrives would take all 100 as sent instead).
    const { session, call } = rawStream({ queue: "woken", window: 1000, leaseSeconds: 300 });
    call.on("error", () => {});
    let buffered = Buffer.alloc(0);
    const firstResponse = new Promise<void>((resolve) =>
      call.on("data", (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        if (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt32BE(1)) {
          call.pause();
          resolve();
        }
      }),
    );
    try {
      await firstResponse;
      // Nothing is visible now: a consume waits (its own wake-up is the leases' end, minutes away).
      const consumed = queues.consumeMessage({ queue: "woken", waitSeconds: 20, leaseSeconds: 60 });
      const deadline = Date.now() + 10_000;
      while (waitingConsumers() === 0 && Date.now() < deadline) await new Promise((r) => setImmediate(r));
      expect(waitingConsumers()).toBe(1);
      const cancelled = Date.now();
      call.close(http2.constants.NGHTTP2_CANCEL);
      const got = await consumed;
      expect(got.message?.deliveries).toBe(1);
      // Woken by the give-back itself, not by the hub's safety re-check (every 5 s).
      expect(Date.now() - cancelled).toBeLessThan(1_000);
    } finally {
      session.destroy();
    }
  });

  it("a reader that stops reading is not sent the parts whose lease ran out meanwhile: they go back in line", async () => {
    const queues = t.client(QueueService, app.token, "grpc");
    // A lapsed lease comes back at once (no retry hold), so the other consumer below finds every message the
    // stream no longer holds.
    await queues.updateQueuePolicy({ queue: "slow", retryDelaySeconds: 0 });
    const big = "y".repeat(200_000);
    // 15 messages of 200 kB: one claim, sent in parts of 5 (about 1 MiB each).
    await queues.putMessages({
      queue: "slow",
      messages: Array.from({ length: 15 }, (_, i) => ({
        payload: { kind: { case: "stringValue", value: `${i}:${big}` } },
      })),
    });
    // A raw gRPC reader over HTTP/2 that stops reading after its first response: unread data fills the
    // stream's flow-control window, and the server can send nothing more until it reads again.
    const { session, call } = rawStream({ queue: "slow", window: 100, leaseSeconds: 1 });
    let buffered = Buffer.alloc(0);
    const responses: string[][] = [];
    let arrived: () => void = () => {};
    call.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt32BE(1)) {
        const length = buffered.readUInt32BE(1);
        const res = fromBinary(StreamMessagesResponseSchema, buffered.subarray(5, 5 + length));
        buffered = buffered.subarray(5 + length);
        responses.push(res.messages.map((m) => m.id));
        if (responses.length === 1) call.pause();
        arrived();
      }
    });
    const next = async (n: number) => {
      while (responses.length < n) await new Promise<void>((resolve) => (arrived = resolve));
    };
    try {
      await next(1);
      // Once the stream's leases lapse, another consumer takes what is back in line.
      const other = await queues.consumeMessage({ queue: "slow", max: 15, waitSeconds: 10, leaseSeconds: 60 });
      const taken = new Set(other.messages.map((m) => m.id));
      expect(taken.size).toBeGreaterThan(0);

      // A small message put now is what the stream sends next once it may: the reader reads again.
      const sentinel = await queues.putMessage({
        queue: "slow",
        payload: { kind: { case: "stringValue", value: "s" } },
      });
      call.resume();
      while (!responses.flat().includes(sentinel.id)) await next(responses.length + 1);
      const late = responses
        .slice(1)
        .flat()
        .filter((id) => id !== sentinel.id);
      // At most the part already written when the reader stopped comes late (its lease was whole when it was
      // handed on); the parts after it went back in line, to the other consumer, not to a second holder.
      expect(late.length).toBeLessThanOrEqual(5);
      expect(responses[0].length + late.length).toBeLessThan(15);
      // What the stream never handed on was given back while it waited on the reader, not left to lapse:
      // the other consumer's is its first delivery (a lapse counts one, and with maxDeliveries 1 buries it).
      const handedOn = new Set([...responses[0], ...late]);
      const neverSent = other.messages.filter((m) => !handedOn.has(m.id));
      expect(neverSent.length).toBeGreaterThan(0);
      expect(neverSent.map((m) => m.deliveries)).toEqual(neverSent.map(() => 1));
    } finally {
      call.close();
      session.close();
    }
  });

  it.skipIf(backend !== "postgres")(
    `a stream sends what it claimed when this instance's clock runs ahead of the database's${backend === "postgres" ? "" : " (skipped: PGlite runs on this process's clock, so the two cannot differ; needs DATABASE_URL)"}`,
    async () => {
      // Lease ends come from the database's clock; this process's clock is set 2 s ahead of it, more than a
      // 1 s lease. Only Date is faked (timers are real), and it keeps running.
      vi.useFakeTimers({ toFake: ["Date"], now: Date.now() + 2_000, shouldAdvanceTime: true });
      const stop = new AbortController();
      try {
        const queues = t.client(QueueService, app.token);
        const { id } = await queues.putMessage({
          queue: "skew",
          payload: { kind: { case: "stringValue", value: "s" } },
        });
        const stream = queues.streamMessages(
          { queue: "skew", window: 1, leaseSeconds: 1 },
          { signal: stop.signal, timeoutMs: 5_000 },
        );
        for await (const res of stream) {
          // Before, every claim was judged stale on arrival and given back, again and again: nothing came.
          expect(res.messages.map((m) => m.id)).toEqual([id]);
          break;
        }
      } finally {
        stop.abort();
        vi.useRealTimers();
      }
    },
  );

  it("a client cancelling a busy stream is a normal end: no error-level log line", async () => {
    const queues = t.client(QueueService, app.token, "grpc");
    for (let round = 0; round < 5; round++) {
      await queues.putMessages({
        queue: "busy",
        messages: Array.from({ length: 50 }, (_, i) => ({ payload: { kind: { case: "numberValue", value: i } } })),
      });
      const abort = new AbortController();
      let got = 0;
      try {
        for await (const res of queues.streamMessages({ queue: "busy", window: 1000 }, { signal: abort.signal })) {
          got += res.messages.length;
          if (got >= 1) abort.abort();
        }
      } catch {
        // The client's own cancel.
      }
      const started = Date.now();
      while (streamsOpen() > 0 && Date.now() - started < 10_000) await new Promise((r) => setTimeout(r, 20));
      expect(streamsOpen()).toBe(0);
    }
    const errors = logLines.filter((l) => (JSON.parse(l) as { level: number }).level >= 50);
    expect(errors).toEqual([]);
  });
});
