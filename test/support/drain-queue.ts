/**
 * A queue's messages consumed (and acked) over REST, for tests that count what was put.
 */
import { expect } from "vitest";
import type { TestApp, TestServer } from "./harness.ts";

/** The messages of `queue`, consumed (and acked) until `n` came or `ms` passed; long polls, no sleeps. */
export async function drain(server: TestServer, app: TestApp, queue: string, n: number, ms = 30_000) {
  const got: { id: string; payload: unknown }[] = [];
  const until = Date.now() + ms;
  while (got.length < n && Date.now() < until) {
    const res = await server.request("POST", `/v1/queues/${queue}/consume`, {
      token: app.token,
      body: { waitSeconds: 2, max: 10 },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const messages = (res.body.messages ?? (res.body.message ? [res.body.message] : [])) as {
      id: string;
      payload: unknown;
      receipt: string;
    }[];
    for (const m of messages) {
      got.push({ id: m.id, payload: m.payload });
      await server.request("POST", `/v1/queues/${queue}/ack`, { token: app.token, body: { receipt: m.receipt } });
    }
  }
  return got;
}
