/**
 * An app's rate limit holds across instances: three servers on one database,
 * flooded at once, let through the app's rate in total (within 15%), whether
 * the calls are spread evenly or mostly reach one instance. Each instance
 * decides in memory; the instances trade their demand through the database
 * once per LIMIT_EXCHANGE_MS. (Before, there was no limit: each instance let
 * everything through.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startInstances, type Instances, type TestServer } from "../support/harness.ts";

let instances: Instances;
let servers: TestServer[];

const RATE = 40;
const BURST = 10;

beforeAll(async () => {
  instances = await startInstances(3, { env: { LIMIT_EXCHANGE_MS: "200" } });
  servers = instances.servers;
  // Every instance knows of the other two before the flood.
  for (const s of servers) await s.server.limitExchange.exchangeNow();
  for (const s of servers) await s.server.limitExchange.exchangeNow();
  for (const s of servers) expect(s.server.limitExchange.instances()).toBe(3);
}, 60_000);
afterAll(() => instances?.close());

/**
 * Floods `/v1/queues` with `loops[i]` concurrent loops on server i for
 * `seconds`; the 200s answered from `settleSeconds` on, a second.
 */
async function flood(token: string, loops: number[], seconds: number, settleSeconds: number) {
  const started = Date.now();
  const end = started + seconds * 1000;
  const from = started + settleSeconds * 1000;
  let passed = 0;
  let refused = 0;
  const loop = async (server: TestServer) => {
    while (Date.now() < end) {
      const res = await fetch(`${server.url}/v1/queues`, { headers: { authorization: `Bearer ${token}` } });
      await res.arrayBuffer();
      if (Date.now() < from || Date.now() >= end) continue;
      if (res.status === 200) passed++;
      else if (res.status === 429) refused++;
      else throw new Error(`unexpected status ${res.status}`);
    }
  };
  await Promise.all(servers.flatMap((server, i) => Array.from({ length: loops[i] }, () => loop(server))));
  return { perSecond: passed / (seconds - settleSeconds), refused };
}

describe.each([
  ["spread evenly", [3, 3, 3]],
  ["mostly on one instance", [6, 1, 0]],
])("an app flooding three instances (%s)", (_name, loops) => {
  it(`gets its limit of ${RATE} a second in total, within 15%`, async () => {
    const app = await servers[0].createApp();
    await servers[0].admin.updateApp({ appId: app.id, limits: { requestsPerSecond: RATE, requestsBurst: BURST } });
    const { perSecond, refused } = await flood(app.token, loops, 6, 2);
    expect(refused).toBeGreaterThan(0);
    expect(perSecond).toBeGreaterThanOrEqual(RATE * 0.85);
    expect(perSecond).toBeLessThanOrEqual(RATE * 1.15);
  }, 60_000);
});
