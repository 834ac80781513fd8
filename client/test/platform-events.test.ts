/**
 * Platform events across processes, against the real service: a process
 * never consumes an event kind it does not handle, and every replica learns
 * of `secret.set` at once (the events feed), while `delivery: "one-replica"`
 * keeps the `_events` queue's one-consumer semantics for the kinds handled
 * and gives the others back.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type PlatformEvent } from "../src/index.ts";

let t: TestServer;

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

const publish = (appId: string, kind: string, data: unknown) =>
  t.admin.publishEvent({ appId, kind, data: fromJson(ValueSchema, data as never) });

describe("platform events", () => {
  it("process A subscribed to deploy.finished, process B only watches secrets: A gets all 10 of its events", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["KEY"] });
    const a = createClient({ baseUrl: t.url, token: app.token });
    const b = createClient({ baseUrl: t.url, token: app.token });
    const seen: number[] = [];
    const all = new Promise<void>((resolve) =>
      a.events.on<{ n: number }>("deploy.finished", (e) => {
        seen.push(e.data.n);
        if (seen.length === 10) resolve();
      }),
    );
    const versions: number[] = [];
    const bSawAll = new Promise<void>((resolve) =>
      b.secrets.watch({
        onChange: (_name, version) => {
          versions.push(version);
          if (versions.length === 10) resolve();
        },
      }),
    );
    await Promise.all([a.events.ready(), b.events.ready()]);
    for (let n = 0; n < 10; n++) {
      await publish(app.id, "deploy.finished", { n });
      await t.admin.setSecret({ appId: app.id, name: "KEY", value: `v${n}` });
    }
    await Promise.all([all, bSawAll]);
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(versions).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    await Promise.all([a.close(), b.close()]);
    // Neither consumed anything of the _events queue: all 20 events still wait for its consumers.
    const c = createClient({ baseUrl: t.url, token: app.token });
    const q = (await c.queues.list()).find((e) => e.name === "_events");
    expect([q?.depth, q?.inFlight]).toEqual([20, 0]);
    await c.close();
  });

  it("two replicas watching secrets both serve the new value as soon as it is set", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["DB_PASSWORD"] });
    await t.admin.setSecret({ appId: app.id, name: "DB_PASSWORD", value: "old" });
    // A long cache age: without the event each replica would serve "old" for an hour.
    const replicas = [0, 1].map(() =>
      createClient({ baseUrl: t.url, token: app.token, secrets: { maxAgeMs: 3_600_000 } }),
    );
    for (const r of replicas) expect((await r.secrets.get("DB_PASSWORD")).value).toBe("old");
    const changed = replicas.map(
      (r) => new Promise<number>((resolve) => r.secrets.watch({ onChange: (_n, version) => resolve(version) })),
    );
    await Promise.all(replicas.map((r) => r.events.ready()));
    const { version } = await t.admin.setSecret({ appId: app.id, name: "DB_PASSWORD", value: "new" });
    expect(await Promise.all(changed)).toEqual([Number(version), Number(version)]);
    for (const r of replicas) expect((await r.secrets.get("DB_PASSWORD")).value).toBe("new");
    await Promise.all(replicas.map((r) => r.close()));
  });

  it("a read under way when the secret is set does not leave the old value cached", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "old" });
    // The first read of the secret gets its answer (the old value) and is held there until released.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let answered!: () => void;
    const oldAnswered = new Promise<void>((resolve) => (answered = resolve));
    let held = false;
    const holdingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const url = input instanceof Request ? input.url : input.toString();
      if (!held && url.endsWith("/v1/secrets/API_KEY")) {
        held = true;
        answered();
        await released;
      }
      return response;
    };
    const replica = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: holdingFetch,
      secrets: { maxAgeMs: 3_600_000 },
    });
    const changed = new Promise<number>((resolve) => replica.secrets.watch({ onChange: (_n, v) => resolve(v) }));
    await replica.events.ready();
    const first = replica.secrets.get("API_KEY");
    await oldAnswered;
    const { version } = await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "new" });
    expect(await changed).toBe(Number(version));
    release();
    // The caller asked before the set: it may get either; the cache must not keep the old one.
    expect(["old", "new"]).toContain((await first).value);
    expect((await replica.secrets.get("API_KEY")).value).toBe("new");
    await replica.close();
  });

  it('delivery "one-replica" consumes _events for the kinds handled, and gives the others back unacked', async () => {
    const app = await t.createApp();
    const a = createClient({ baseUrl: t.url, token: app.token });
    a.events.configure({ leaseSeconds: 1, unhandledDelaySeconds: 0 });
    const handled = new Promise<PlatformEvent>((resolve) =>
      a.events.on("deploy.finished", (e) => resolve(e), { delivery: "one-replica" }),
    );
    await publish(app.id, "billing.changed", { plan: "pro" });
    await publish(app.id, "deploy.finished", { n: 1 });
    expect((await handled).data).toEqual({ n: 1 });
    await a.events.stop();
    // The unhandled kind is still on the queue for a process that handles it.
    const b = createClient({ baseUrl: t.url, token: app.token });
    const back = await b.queues.consume<PlatformEvent>("_events", { waitSeconds: 10 });
    expect(back?.payload.kind).toBe("billing.changed");
    expect(await b.queues.ack(back!.receipt)).toBe(true);
    const q = (await b.queues.list()).find((e) => e.name === "_events");
    expect([q?.depth ?? 0, q?.inFlight ?? 0]).toEqual([0, 0]);
    await Promise.all([a.close(), b.close()]);
  });
});
