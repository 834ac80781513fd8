/**
 * A client cancelling a busy `StreamMessages` is a normal end of the call:
 * nothing reaches `console.error` or stderr (connect-fastify's plugin writes
 * there when a handler fails, e.g. `write ECANCELED` when the stream is reset
 * while a response is on its way), and the server's log has no error-level
 * line. Errors that are the server's go through the pino log instead.
 */
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestApp, useTestServer, type Protocol } from "../support/harness.ts";
import { metricValue } from "../support/server-state.ts";

const logLines: string[] = [];
const t = useTestServer({ logLines });
const app = useTestApp(t);

let consoleError: MockInstance;
let consoleWarn: MockInstance;
let stderrWrite: MockInstance;
const stderr: string[] = [];
beforeAll(() => {
  consoleError = vi.spyOn(console, "error");
  consoleWarn = vi.spyOn(console, "warn");
  const write = process.stderr.write.bind(process.stderr);
  stderrWrite = vi.spyOn(process.stderr, "write").mockImplementation(((
    chunk: string | Uint8Array,
    ...rest: never[]
  ) => {
    stderr.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stderr.write);
});
afterAll(() => {
  consoleError.mockRestore();
  consoleWarn.mockRestore();
  stderrWrite.mockRestore();
});

const streamsOpen = () => metricValue(t, "queue_streams");

/** Waits until the server has ended every stream (its `finally` ran), without a fixed sleep. */
async function streamsEnded(): Promise<void> {
  await vi.waitFor(() => expect(streamsOpen()).toBe(0), { timeout: 10_000, interval: 20 });
}

const big = "x".repeat(200_000);

describe("a cancelled StreamMessages", () => {
  for (const protocol of ["grpc", "connect", "grpc-web"] as Protocol[]) {
    it(`over ${protocol}: no console output, no stderr, no error-level log`, async () => {
      const queues = t.client(QueueService, app.token, protocol);
      const queue = `busy-${protocol}`;
      for (let round = 0; round < 4; round++) {
        await queues.putMessages({
          queue,
          messages: Array.from({ length: 40 }, () => ({ payload: { kind: { case: "stringValue", value: big } } })),
        });
        const abort = new AbortController();
        let got = 0;
        await expect(
          (async () => {
            for await (const res of queues.streamMessages({ queue, window: 1000 }, { signal: abort.signal })) {
              got += res.messages.length;
              // Cancel while the server is still writing the next (1 MiB) responses.
              abort.abort();
            }
          })(),
        ).rejects.toThrow(/cancel|abort/i);
        expect(got).toBeGreaterThanOrEqual(1);
        await streamsEnded();
      }
      expect(consoleError.mock.calls).toEqual([]);
      expect(consoleWarn.mock.calls).toEqual([]);
      expect(stderr).toEqual([]);
      const errors = logLines.filter((l) => (JSON.parse(l) as { level: number }).level >= 50);
      expect(errors).toEqual([]);
    });
  }
});

describe("a call that fails past the handler", () => {
  it("is logged through pino as an error naming the RPC, never written to the console", async () => {
    // An HTTP/1.0 GET without a Host header reaches the plugin's route, and Connect cannot make a request of it
    // (it has no authority): the failure the plugin would write with console.error.
    const before = logLines.length;
    const { port } = new URL(t.url);
    const socket = net.connect(Number(port), "127.0.0.1");
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    socket.write(
      `GET /platform.meta.v1.MetaService/GetHealth?connect=v1&encoding=json&message=%7B%7D HTTP/1.0\r\n\r\n`,
    );
    try {
      await vi.waitFor(
        () => {
          const failed = logLines
            .slice(before)
            .map((l) => JSON.parse(l) as { level: number; msg: string; rpc?: string })
            .filter((l) => l.msg === "rpc handler failed");
          expect(failed).toMatchObject([{ level: 50, rpc: "platform.meta.v1.MetaService/GetHealth" }]);
        },
        { timeout: 5000, interval: 20 },
      );
    } finally {
      socket.destroy();
    }
    expect(consoleError.mock.calls).toEqual([]);
    expect(stderr).toEqual([]);
  });
});
