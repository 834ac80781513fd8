/**
 * The client's ordered groups (docs/queues.md "Ordered groups"), against the real service: `groupKey` on
 * `put` and `putBatch` holds a group's next message back until the one before it is acked, other groups flow
 * on, and `message` tells a message's group.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type PlatformClient } from "../src/index.ts";

let t: TestServer;
let client: PlatformClient;

beforeAll(async () => {
  t = await startServer();
  const app = await t.createApp();
  client = createClient({ baseUrl: t.url, token: app.token });
});
afterAll(async () => {
  await client?.close();
  await t?.close();
});

it("puts in groups (single and batch): one message of a group at a time, in put order; the status names the group", async () => {
  const queue = "typed-groups";
  const first = await client.queues.put(queue, { n: 1 }, { groupKey: "customer-1" });
  await client.queues.putBatch(queue, [
    { payload: { n: 2 }, groupKey: "customer-1", priority: 9 },
    { payload: { n: 3 }, groupKey: "customer-2" },
  ]);
  const taken = await client.queues.consumeBatch<{ n: number }>(queue, { waitSeconds: 0, max: 10 });
  expect(taken.map((m) => m.payload.n)).toEqual([1, 3]);
  expect(await client.queues.consumeBatch(queue, { waitSeconds: 0, max: 10 })).toEqual([]);
  expect(await client.queues.message(queue, first.id)).toMatchObject({ status: "leased", groupKey: "customer-1" });
  expect(await client.queues.ack(taken[0].receipt)).toBe(true);
  const next = await client.queues.consumeBatch<{ n: number }>(queue, { waitSeconds: 0, max: 10 });
  expect(next.map((m) => m.payload.n)).toEqual([2]);
});
