/**
 * The short memory of database reads shared by the tokens, operator tokens and queue policies
 * (`refreshing-cache.ts`), on a fake clock and a read the test answers by hand.
 */
import { describe, expect, it } from "vitest";
import { createRefreshingCache } from "../../src/core/refreshing-cache.ts";

/** A read whose calls wait until the test answers them, in order. */
function manualRead<V>() {
  const calls: { key: string; answer: (v: V) => void; fail: (e: Error) => void }[] = [];
  const read = (key: string) =>
    new Promise<V>((answer, fail) => {
      calls.push({ key, answer, fail });
    });
  return { calls, read };
}
const settled = () => new Promise((r) => setImmediate(r));

describe("createRefreshingCache", () => {
  it("shares one read among callers that miss together, then serves it until its lifetime ends", async () => {
    let now = 0;
    const { calls, read } = manualRead<string>();
    const cache = createRefreshingCache({ lifetimeMs: 100, read, clock: () => now });
    const a = cache.get("k");
    const b = cache.get("k");
    expect(cache.peek("k")).toBeUndefined();
    expect(calls).toHaveLength(1);
    calls[0].answer("one");
    expect(await Promise.all([a, b])).toEqual(["one", "one"]);
    expect(cache.peek("k")).toBe("one");
    now = 49;
    expect(await cache.get("k")).toBe("one");
    expect(calls).toHaveLength(1);
    // Its lifetime counts from when its read began: at 100 it is read again, and the caller waits for it.
    now = 100;
    expect(cache.peek("k")).toBeUndefined();
    const c = cache.get("k");
    expect(calls).toHaveLength(2);
    calls[1].answer("two");
    expect(await c).toBe("two");
  });

  it("reads a key in use again in the last half of its lifetime, beside its callers, once", async () => {
    let now = 0;
    const { calls, read } = manualRead<string>();
    const cache = createRefreshingCache({ lifetimeMs: 100, read, clock: () => now });
    const first = cache.get("k");
    calls[0].answer("old");
    await first;
    now = 60;
    // Served at once from memory, and read again beside it, once however many callers come.
    expect(await cache.get("k")).toBe("old");
    expect(cache.peek("k")).toBe("old");
    expect(calls).toHaveLength(2);
    calls[1].answer("new");
    await settled();
    expect(cache.peek("k")).toBe("new");
    // The new value counts from when its read began (60): fresh until 160.
    now = 159;
    expect(cache.peek("k")).toBe("new");
    expect(calls).toHaveLength(3);
  });

  it("keeps only what `keeps` accepts: a key not found is read every time, and a refresh that no longer finds it forgets it", async () => {
    let now = 0;
    const { calls, read } = manualRead<string | undefined>();
    const cache = createRefreshingCache({ lifetimeMs: 100, read, clock: () => now, keeps: (v) => v !== undefined });
    const miss = cache.get("gone");
    calls[0].answer(undefined);
    expect(await miss).toBeUndefined();
    const again = cache.get("gone");
    expect(calls).toHaveLength(2);
    calls[1].answer("found");
    expect(await again).toBe("found");
    now = 70;
    expect(cache.peek("gone")).toBe("found");
    calls[2].answer(undefined);
    await settled();
    expect(cache.peek("gone")).toBeUndefined();
  });

  it("does not keep a failed read, and a failed refresh keeps serving until the lifetime ends", async () => {
    let now = 0;
    const { calls, read } = manualRead<string>();
    const cache = createRefreshingCache({ lifetimeMs: 100, read, clock: () => now });
    const failing = cache.get("k");
    calls[0].fail(new Error("database unreachable"));
    await expect(failing).rejects.toThrow("database unreachable");
    const retried = cache.get("k");
    expect(calls).toHaveLength(2);
    calls[1].answer("v");
    await retried;
    now = 60;
    expect(cache.peek("k")).toBe("v");
    calls[2].fail(new Error("database unreachable"));
    await settled();
    expect(cache.peek("k")).toBe("v");
    // The next caller in the last half tries again.
    expect(cache.peek("k")).toBe("v");
    expect(calls).toHaveLength(4);
  });

  it("a set or clear made while a read runs wins over what that read finds", async () => {
    let now = 0;
    const { calls, read } = manualRead<string>();
    const cache = createRefreshingCache({ lifetimeMs: 100, read, clock: () => now });
    const first = cache.get("k");
    cache.set("k", "written here");
    calls[0].answer("read before the write");
    expect(await first).toBe("read before the write");
    expect(cache.peek("k")).toBe("written here");
    now = 60;
    expect(cache.peek("k")).toBe("written here");
    cache.clear();
    calls[1].answer("stale");
    await settled();
    expect(cache.peek("k")).toBeUndefined();
  });

  it("remembers nothing with a lifetime of 0, and empties itself at its bound", async () => {
    const { calls, read } = manualRead<string>();
    const none = createRefreshingCache({ lifetimeMs: 0, read });
    none.set("k", "v");
    expect(none.peek("k")).toBeUndefined();
    const a = none.get("k");
    const b = none.get("k");
    expect(calls).toHaveLength(2);
    calls.forEach((c) => c.answer("v"));
    await Promise.all([a, b]);

    const bounded = createRefreshingCache({ lifetimeMs: 1_000, read: async (k) => k, maxEntries: 2 });
    bounded.set("a", "a");
    bounded.set("b", "b");
    bounded.set("b", "b2");
    expect([bounded.peek("a"), bounded.peek("b")]).toEqual(["a", "b2"]);
    bounded.set("c", "c");
    expect([bounded.peek("a"), bounded.peek("b"), bounded.peek("c")]).toEqual([undefined, undefined, "c"]);
  });
});
