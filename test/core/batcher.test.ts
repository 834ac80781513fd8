/**
 * The batcher that lets concurrent puts, claims and acks share one statement:
 * calls of one turn go together, batches are bounded, a key never has more
 * than `maxInFlight` statements running, and a failed statement fails exactly
 * its own callers.
 */
import { expect, it } from "vitest";
import { createBatcher } from "../../src/core/batcher.ts";
import { currentTenant, runAsTenant } from "../../src/core/tenant.ts";

function recorder(maxBatch: number, maxInFlight: number) {
  const batches: { key: string; items: number[] }[] = [];
  let running = 0;
  let maxRunning = 0;
  const gates: (() => void)[] = [];
  const batcher = createBatcher<number, string>({
    maxBatch,
    maxInFlight,
    async run(key, items) {
      batches.push({ key, items });
      running++;
      maxRunning = Math.max(maxRunning, running);
      // Each statement stays "in flight" until the test opens its gate.
      await new Promise<void>((resolve) => gates.push(resolve));
      running--;
      if (items.includes(-1)) throw new Error("statement failed");
      return items.map((i) => `${key}:${i}`);
    },
  });
  /** Lets every statement, including those started by finishing ones, run to the end. */
  const openAll = async () => {
    do {
      await new Promise((r) => setImmediate(r));
      gates.splice(0).forEach((open) => open());
    } while (gates.length > 0 || running > 0);
  };
  return { batcher, batches, openAll, maxRunning: () => maxRunning };
}

it("sends the calls of one turn as one batch and answers each caller with its own result", async () => {
  const { batcher, batches, openAll } = recorder(100, 1);
  const calls = [1, 2, 3].map((i) => batcher.call("a", i));
  await openAll();
  expect(await Promise.all(calls)).toEqual(["a:1", "a:2", "a:3"]);
  expect(batches).toEqual([{ key: "a", items: [1, 2, 3] }]);
});

it("calls of one turn share a statement also when they come from separate callbacks, on an idle key", async () => {
  // As requests read from two connections in one turn: the second call is made after the first's
  // microtasks ran. An idle key used to send the first call at once, alone, and the second waited
  // for that statement to finish.
  const { batcher, batches, openAll } = recorder(100, 1);
  const first = batcher.call("a", 1);
  await Promise.resolve();
  await Promise.resolve();
  const second = batcher.call("a", 2);
  await openAll();
  expect(await Promise.all([first, second])).toEqual(["a:1", "a:2"]);
  expect(batches).toEqual([{ key: "a", items: [1, 2] }]);
});

it("keeps keys apart, bounds a batch by maxBatch, and never runs more than maxInFlight per key", async () => {
  const { batcher, batches, openAll, maxRunning } = recorder(2, 1);
  const calls = [1, 2, 3, 4, 5].map((i) => batcher.call("a", i));
  const other = batcher.call("b", 9);
  await new Promise((r) => setImmediate(r));
  // One statement of "a" and one of "b" run; the rest of "a" waits for the first.
  expect(batches).toEqual([
    { key: "a", items: [1, 2] },
    { key: "b", items: [9] },
  ]);
  await openAll();
  expect(await Promise.all(calls)).toEqual(["a:1", "a:2", "a:3", "a:4", "a:5"]);
  expect(await other).toBe("b:9");
  expect(batches.filter((b) => b.key === "a").map((b) => b.items)).toEqual([[1, 2], [3, 4], [5]]);
  expect(maxRunning()).toBe(2); // one per key
});

it("calls arriving while a statement runs go together in the next one", async () => {
  const { batcher, batches, openAll } = recorder(100, 1);
  const first = batcher.call("a", 1);
  await new Promise((r) => setImmediate(r));
  const later = [2, 3, 4].map((i) => batcher.call("a", i));
  await openAll();
  await Promise.all([first, ...later]);
  expect(batches.map((b) => b.items)).toEqual([[1], [2, 3, 4]]);
});

it("a failed statement rejects its own callers only; the next batch still runs", async () => {
  const { batcher, openAll } = recorder(2, 1);
  const settling = Promise.allSettled([1, -1, 3].map((i) => batcher.call("a", i)));
  await openAll();
  const settled = await settling;
  expect(settled.map((s) => s.status)).toEqual(["rejected", "rejected", "fulfilled"]);
  expect((settled[2] as PromiseFulfilledResult<string>).value).toBe("a:3");
});

it("takes the calls of waiting apps in turn, not in arrival order: one app's flood costs another a place in the next batch", async () => {
  const { batcher, batches, openAll } = recorder(4, 1);
  // App A floods 20 calls on a shared key, then app B makes one, in the same turn.
  const flood = Array.from({ length: 20 }, (_, i) => batcher.call("", 100 + i, "app-a"));
  const b = batcher.call("", 1, "app-b");
  const c = [2, 3].map((i) => batcher.call("", i, "app-c"));
  await openAll();
  expect(await b).toBe(":1");
  await Promise.all([...flood, ...c]);
  // In arrival order B's call was in the sixth statement; in turn it is in the first, with C's.
  expect(batches[0].items).toEqual([100, 1, 2, 101]);
  expect(batches[1].items).toEqual([3, 102, 103, 104]);
  // Each app's own calls keep their order.
  expect(batches.flatMap((x) => x.items).filter((i) => i >= 100)).toEqual(flood.map((_, i) => 100 + i));
});

it("runs a batch of one app's calls as that app's work, and a mixed one as no app's", async () => {
  const seen: (string | undefined)[] = [];
  const batcher = createBatcher<number, number>({
    maxBatch: 10,
    maxInFlight: 1,
    run: async (_key, items) => {
      seen.push(currentTenant());
      return items;
    },
  });
  await runAsTenant("app-a", () => Promise.all([batcher.call("k", 1), batcher.call("k", 2)]));
  await Promise.all([batcher.call("k", 3, "app-a"), batcher.call("k", 4, "app-b")]);
  expect(seen).toEqual(["app-a", undefined]);
});

it("a call on a quiet key goes at once, before the rest of the turn; calls made together still share its statement", async () => {
  const order: string[] = [];
  const batches: number[][] = [];
  const batcher = createBatcher<number, number>({
    maxBatch: 100,
    maxInFlight: 1,
    quietMs: 60_000,
    run(_key, items) {
      order.push(`statement ${items.join(",")}`);
      batches.push(items);
      return Promise.resolve(items);
    },
  });
  // The rest of the turn: what other requests read in this turn would do before the end of it.
  setImmediate(() => order.push("end of turn"));
  const first = [batcher.call("q", 1), batcher.call("q", 2)];
  expect(await Promise.all(first)).toEqual([1, 2]);
  expect(order).toEqual(["statement 1,2"]);
  // Called again within `quietMs`, the key is not quiet: its calls wait for the end of the turn, to share it.
  const second = batcher.call("q", 3);
  await Promise.resolve();
  const third = batcher.call("q", 4);
  expect(await Promise.all([second, third])).toEqual([3, 4]);
  expect(order).toEqual(["statement 1,2", "end of turn", "statement 3,4"]);
  expect(batches).toEqual([
    [1, 2],
    [3, 4],
  ]);
});
