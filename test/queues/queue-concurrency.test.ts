/**
 * Real concurrency against the claim statement: 50 consumers over REST share
 * 2000 messages put by concurrent producers. Every message is leased by
 * exactly one consumer at a time, acked exactly once, and none is lost.
 */
import { expect, it } from "vitest";
import { useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

it("50 concurrent consumers over 2000 messages: no message held by two at once, none lost", async () => {
  const total = 2000;
  const queue = "work";
  const putIds = new Set<string>();
  const producers = Array.from({ length: 10 }, async (_, p) => {
    for (let i = p; i < total; i += 10) {
      const res = await t.request("POST", `/v1/queues/${queue}`, { token: app.token, body: { payload: { i } } });
      expect(res.status).toBe(200);
      putIds.add(res.body.id);
    }
  });

  /** id -> the consumer holding its lease now; a second holder would be a violation. */
  const holder = new Map<string, number>();
  const violations: string[] = [];
  const acked = new Set<string>();
  const seenPayloads = new Set<number>();
  let deliveries = 0;
  let producing = true;
  const consumers = Array.from({ length: 50 }, async (_, c) => {
    for (;;) {
      if (acked.size >= total) return;
      const res = await t.request("POST", `/v1/queues/${queue}/consume`, {
        token: app.token,
        body: { waitSeconds: producing ? 1 : 0, leaseSeconds: 120 },
      });
      expect(res.status).toBe(200);
      const m = res.body.message;
      if (!m) {
        if (!producing && acked.size >= total) return;
        if (!producing) continue;
        continue;
      }
      deliveries++;
      if (holder.has(m.id)) violations.push(`${m.id} held by ${holder.get(m.id)} and ${c}`);
      holder.set(m.id, c);
      seenPayloads.add(m.payload.i);
      // Work takes a moment, so leases overlap in time across consumers.
      await new Promise((r) => setImmediate(r));
      holder.delete(m.id);
      const a = await t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt: m.receipt } });
      expect(a.body).toEqual({ acked: true });
      if (acked.has(m.id)) violations.push(`${m.id} acked twice`);
      acked.add(m.id);
    }
  });
  await Promise.all(producers);
  producing = false;
  await Promise.all(consumers);

  expect(violations).toEqual([]);
  expect(putIds.size).toBe(total);
  expect(acked.size).toBe(total);
  expect([...acked].every((id) => putIds.has(id))).toBe(true);
  expect(seenPayloads.size).toBe(total);
  expect(deliveries).toBe(total);
  const left = await t.request("GET", "/v1/queues", { token: app.token });
  expect(left.body.queues).toEqual([]);
}, 180_000);
