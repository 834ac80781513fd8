/**
 * A stand-in for the Bedrock runtime endpoint, speaking its real REST
 * protocol over HTTP/2 without TLS (h2c), which is what the SDK's default
 * HTTP/2 handler uses for an `http://` endpoint:
 *
 * - `POST /model/{url-encoded model id}/converse` with a JSON Converse body;
 * - `POST /model/{url-encoded model id}/invoke` with the model's own body;
 * - errors as a status, an `x-amzn-errortype` header and `{ "message": ... }`.
 *
 * Each test decides the answers through `handle`; the fixture records every
 * request and how many were in flight at once.
 */
import http2 from "node:http2";
import type { AddressInfo } from "node:net";

export interface FixtureRequest {
  operation: "converse" | "invoke";
  modelId: string;
  headers: http2.IncomingHttpHeaders;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  /** Settles when the stream closes, from either side. */
  closed: Promise<void>;
}

export type FixtureAnswer =
  | { json: unknown; headers?: Record<string, string>; delayMs?: number }
  | { error: string; status: number; message: string }
  /** Sends the status and half a body, then resets the stream: the provider failing midway. */
  | { breakMidway: true }
  /** A 200 whose body is not JSON. */
  | { raw: string };

export interface BedrockFixture {
  readonly url: string;
  readonly requests: FixtureRequest[];
  /** The largest number of requests in flight at the same time. */
  readonly maxInFlight: number;
  handle: (req: FixtureRequest) => FixtureAnswer | Promise<FixtureAnswer>;
  reset(): void;
  close(): Promise<void>;
}

const PATH = /^\/model\/([^/]+)\/(converse|invoke)$/;

export async function startBedrockFixture(): Promise<BedrockFixture> {
  let inFlight = 0;
  const sessions = new Set<http2.ServerHttp2Session>();
  const fixture = {
    url: "",
    requests: [] as FixtureRequest[],
    maxInFlight: 0,
    handle: (() => ({
      error: "InternalServerException",
      status: 500,
      message: "no handler set",
    })) as BedrockFixture["handle"],
    reset() {
      fixture.requests.length = 0;
      fixture.maxInFlight = 0;
    },
    close: async () => {},
  };

  const server = http2.createServer();
  server.on("session", (session) => {
    sessions.add(session);
    session.on("close", () => sessions.delete(session));
  });
  server.on("stream", (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", () => {});
    // A stream's answer is async; a handler that throws destroys the stream (the client sees the failure).
    stream.on("end", () => void answerStream().catch((err: Error) => stream.destroy(err)));
    const answerStream = async () => {
      const match = PATH.exec(String(headers[":path"]));
      if (headers[":method"] !== "POST" || !match) {
        stream.respond({
          ":status": 404,
          "content-type": "application/json",
          "x-amzn-errortype": "UnknownOperationException",
        });
        stream.end(JSON.stringify({ message: "unknown operation" }));
        return;
      }
      const text = Buffer.concat(chunks).toString("utf8");
      const req: FixtureRequest = {
        operation: match[2] as "converse" | "invoke",
        modelId: decodeURIComponent(match[1]),
        headers,
        body: text ? JSON.parse(text) : undefined,
        closed: stream.closed
          ? Promise.resolve()
          : new Promise<void>((resolve) => stream.once("close", () => resolve())),
      };
      fixture.requests.push(req);
      // In flight until answered or closed, so a request the client cancelled stops counting.
      inFlight++;
      fixture.maxInFlight = Math.max(fixture.maxInFlight, inFlight);
      let counted = true;
      const done = () => {
        if (counted) inFlight--;
        counted = false;
      };
      void req.closed.then(done);
      const answer = await fixture.handle(req);
      if ("json" in answer && answer.delayMs) await new Promise((resolve) => setTimeout(resolve, answer.delayMs));
      done();
      if (stream.destroyed) return;
      if ("error" in answer) {
        stream.respond({
          ":status": answer.status,
          "content-type": "application/json",
          "x-amzn-errortype": answer.error,
        });
        stream.end(JSON.stringify({ message: answer.message }));
      } else if ("breakMidway" in answer) {
        stream.respond({ ":status": 200, "content-type": "application/json" });
        stream.write('{"output":{"message":{"role":"assistant","content":[{"text":"half an ans');
        setImmediate(() => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
      } else if ("raw" in answer) {
        stream.respond({ ":status": 200, "content-type": "application/json" });
        stream.end(answer.raw);
      } else {
        stream.respond({ ":status": 200, "content-type": "application/json", ...answer.headers });
        stream.end(JSON.stringify(answer.json));
      }
    };
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  fixture.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  fixture.close = async () => {
    for (const session of sessions) session.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return fixture;
}
