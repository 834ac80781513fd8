/**
 * Ordered groups under real concurrency (docs/queues.md "Ordered groups"): 50 groups of 200 messages (and
 * ungrouped ones beside them), 16 consumers spread over 3 instances on one PostgreSQL (on PGlite, one
 * instance: it has one connection), half over REST and half over Connect, with random nacks (some held
 * back) and leases left to lapse. Every group's messages are completed (acked) exactly in put order, and no
 * message of a group is handed out while another delivery of that group still holds its lease (checked
 * from the calls' own times: a delivery whose settle succeeded held its lease until that settle was sent).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { backend, startInstances, type Instances, type TestApp, type TestServer } from "../support/harness.ts";

const GROUPS = 50;
/** PGlite (one instance, one connection, in this process) takes the same run with fewer messages per group. */
const EACH = Number(process.env.GROUPS_EACH ?? (backend === "postgres" ? 100 : 40));
/** One ungrouped message after each round of the groups: they flow past the groups held back. */
const UNGROUPED = EACH;
const CONSUMERS = 16;
const LEASE_SECONDS = 2;
/**
 * Messages per consume: 2, so that up to 32 of the 50 groups are out at once and the others' heads are there
 * to take (with every group out, each claim would read the whole backlog to find nothing: docs/queues.md
 * "Ordered groups", costs).
 */
const MAX = 2;

let instances: Instances;
let app: TestApp;

beforeAll(async () => {
  // Idle kept-alive connections stay open past the run: the server closing one (after 5 s by default) just as
  // a call reuses it fails that call with ECONNRESET, a race of the transport, not of the queue.
  instances = await startInstances(backend === "postgres" ? 3 : 1, { env: { HTTP_KEEPALIVE_TIMEOUT_MS: "600000" } });
  app = await instances.servers[0].createApp();
  await instances.servers[0].admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 20_000 } });
}, 60_000);
afterAll(() => instances?.close());

/** One delivery as a consumer saw it (times from `Date.now()`, the clock the database shares here). */
interface Delivery {
  group: number;
  index: number;
  claimStart: number;
  claimEnd: number;
  leaseExpiresAt: number;
  /** When the ack or nack was sent, and whether it held the lease; undefined when left to lapse. */
  settleStart?: number;
  settled?: boolean;
}

/** A random source of its own, so a failure can be told apart by its seed. */
function random(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1_664_525 + 1_013_904_223) >>> 0;
    return s / 2 ** 32;
  };
}

it(`${GROUPS} groups x ${EACH} messages, ${CONSUMERS} consumers, random nacks and lapses: each group completed in put order, never two leased at once`, async () => {
  const servers = instances.servers;
  const restOf = (server: TestServer) => (method: string, path: string, body?: unknown) =>
    server.request(method, path, { token: app.token, body });
  await restOf(servers[0])("PUT", "/v1/queues/orders/policy", { maxDeliveries: 0 });

  // Put: interleaved across groups, in batches alternating REST and Connect (on the instance whose limits
  // were raised), each batch after the last, so that a group's put order is its index order.
  const items: { payload: { g: number; i: number }; groupKey?: string }[] = [];
  for (let i = 0; i < EACH; i++)
    for (let g = 0; g < GROUPS; g++) {
      items.push({ payload: { g, i }, groupKey: `group-${g}` });
      if ((i * GROUPS + g) % GROUPS === 0) items.push({ payload: { g: -1, i: items.length } });
    }
  const total = items.length;
  for (let from = 0, b = 0; from < total; from += 1000, b++) {
    const part = items.slice(from, from + 1000);
    const server = servers[0];
    if (b % 2 === 0) {
      const res = await restOf(server)("POST", "/v1/queues/orders/batch", { messages: part });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    } else {
      const c = server.client(QueueService, app.token);
      await c.putMessages({
        queue: "orders",
        messages: part.map((m) => ({
          payload: {
            kind: {
              case: "structValue" as const,
              value: {
                fields: {
                  g: { kind: { case: "numberValue" as const, value: m.payload.g } },
                  i: { kind: { case: "numberValue" as const, value: m.payload.i } },
                },
              },
            },
          },
          ...(m.groupKey === undefined ? {} : { groupKey: m.groupKey }),
        })),
      });
    }
  }

  const deliveries: Delivery[][] = Array.from({ length: GROUPS }, () => []);
  const completed: number[][] = Array.from({ length: GROUPS }, () => []);
  /** When the ack that completed each message of each group was sent. */
  const ackSentAt: number[][] = Array.from({ length: GROUPS }, () => []);
  let ungroupedDone = 0;
  let done = 0;
  let nacks = 0;
  let lapses = 0;
  const finished = () => done === total;

  type Got = { g: number; i: number; receipt: string; leaseExpiresAt: number };
  const consumer = async (k: number) => {
    const server = servers[k % servers.length];
    const viaRest = k % 2 === 0;
    const rest = restOf(server);
    const c = server.client(QueueService, app.token);
    const rnd = random(k + 1);
    while (!finished()) {
      const claimStart = Date.now();
      let got: Got[];
      if (viaRest) {
        const res = await rest("POST", "/v1/queues/orders/consume", {
          waitSeconds: 1,
          max: MAX,
          leaseSeconds: LEASE_SECONDS,
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        got = (
          res.body.messages as { payload: { g: number; i: number }; receipt: string; leaseExpiresAt: number }[]
        ).map((m) => ({ ...m.payload, receipt: m.receipt, leaseExpiresAt: m.leaseExpiresAt }));
      } else {
        const res = await c.consumeMessage({ queue: "orders", waitSeconds: 1, max: MAX, leaseSeconds: LEASE_SECONDS });
        got = res.messages.map((m) => {
          const fields = m.payload?.kind.case === "structValue" ? m.payload.kind.value.fields : {};
          return {
            g: fields.g?.kind.value as number,
            i: fields.i?.kind.value as number,
            receipt: m.receipt,
            leaseExpiresAt: Number(m.leaseExpiresAt!.seconds) * 1000 + Math.floor(m.leaseExpiresAt!.nanos / 1e6),
          };
        });
      }
      const claimEnd = Date.now();
      for (const m of got) {
        const d: Delivery | undefined =
          m.g >= 0 ? { group: m.g, index: m.i, claimStart, claimEnd, leaseExpiresAt: m.leaseExpiresAt } : undefined;
        if (d) deliveries[m.g].push(d);
        const roll = rnd();
        if (d && roll < 0.01) {
          lapses++;
          continue; // left to lapse: it comes back once its lease ends
        }
        const settleStart = Date.now();
        let ok: boolean;
        if (d && roll < 0.06) {
          nacks++;
          // Mostly straight back; some held back a moment, which holds the group back too.
          const delaySeconds = roll < 0.02 ? 1 : 0;
          ok = viaRest
            ? (await rest("POST", "/v1/queues/_nack", { receipt: m.receipt, delaySeconds })).body.nacked === true
            : (await c.nackMessage({ receipt: m.receipt, delaySeconds })).nacked;
        } else {
          ok = viaRest
            ? (await rest("POST", "/v1/queues/_ack", { receipt: m.receipt })).body.acked === true
            : (await c.ackMessage({ receipt: m.receipt })).acked;
          if (ok) {
            done++;
            if (d) {
              completed[m.g].push(m.i);
              ackSentAt[m.g][m.i] = settleStart;
            } else ungroupedDone++;
          }
        }
        if (d) Object.assign(d, { settleStart, settled: ok });
      }
    }
  };
  await Promise.all(Array.from({ length: CONSUMERS }, (_, k) => consumer(k)));

  expect(ungroupedDone).toBe(UNGROUPED);
  expect(total).toBe(GROUPS * EACH + UNGROUPED);
  expect(nacks).toBeGreaterThan(0);
  expect(lapses).toBeGreaterThan(0);
  for (let g = 0; g < GROUPS; g++) {
    // Completed exactly once each.
    expect(
      [...completed[g]].sort((x, y) => x - y),
      `group ${g}`,
    ).toEqual(Array.from({ length: EACH }, (_, i) => i));
    // In put order: no message was handed out before the ack that completed each one put before it in its group
    // was sent. (The order in which the acks' answers arrive here is not the order they committed in: the
    // instances share this process's event loop, so the next message can be claimed and acked on another before
    // the first ack's answer is read.)
    let lastAckSent = -Infinity;
    const byIndex = [...deliveries[g]].sort((x, y) => x.index - y.index);
    for (let i = 0, k = 0; i < EACH; i++) {
      for (; k < byIndex.length && byIndex[k].index === i; k++)
        expect(
          byIndex[k].claimEnd > lastAckSent,
          `group ${g}: message ${i} handed out before the ack of one put before it was sent`,
        ).toBe(true);
      lastAckSent = Math.max(lastAckSent, ackSentAt[g][i]);
    }
    // Never handed out while another delivery of the group held its lease: `b` was claimed after `a`
    // was, and answered before `a`'s lease could have ended, i.e. before `a` was settled (a settle that
    // succeeded held the lease until it was sent) or, for a lapse, before its lease's end.
    const list = deliveries[g];
    for (const a of list) {
      const heldUntil = a.settled === true ? a.settleStart! : a.settled === undefined ? a.leaseExpiresAt - 250 : -1;
      for (const b of list) {
        if (b === a || b.claimStart <= a.claimEnd) continue;
        expect(
          b.claimEnd < heldUntil,
          `group ${g}: message ${b.index} handed out while message ${a.index} was leased`,
        ).toBe(false);
      }
    }
  }
}, 300_000);
