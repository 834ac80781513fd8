/**
 * The windows of `StreamMessages` (`stream-windows.ts`), held by message id: an ack frees exactly the
 * receipt it names (app, id and claim), a newer claim of a message replaces its older receipt, and a
 * closed window forgets what it held.
 */
import { describe, expect, it } from "vitest";
import { createStreamWindows } from "../../src/queues/stream-windows.ts";

const A = "7c0d8f3e-0b1a-4d5e-9f60-1a2b3c4d5e6f";
const B = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d";
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`;
const later = () => Date.now() + 60_000;

describe("stream windows", () => {
  it("an ack frees only the receipt it names: the app, the id and the claim must all match", async () => {
    const windows = createStreamWindows();
    const w = windows.open();
    w.add(A, id(1), 3, later());
    w.add(A, id(2), 1, later());
    windows.acked(B, id(1), 3);
    windows.acked(A, id(1), 2);
    windows.acked(A, id(3), 1);
    expect(w.size).toBe(2);
    const stop = new AbortController();
    const shrunk = w.shrunk(stop.signal);
    // An ack taken apart from a receipt is a new string, not the one the window was given.
    windows.acked(A, `${id(1)} `.slice(0, 36), 3);
    await shrunk;
    expect(w.size).toBe(1);
    expect(w.receipts()).toEqual([{ id: id(2), claim: 1, untilMs: expect.any(Number) }]);
    windows.acked(A, id(1), 3);
    expect(w.size).toBe(1);
    stop.abort();
  });

  it("a newer claim of a message replaces its older receipt, in the same window or another", async () => {
    const windows = createStreamWindows();
    const first = windows.open();
    const second = windows.open();
    first.add(A, id(1), 1, later());
    first.add(A, id(1), 2, later());
    expect(first.size).toBe(1);
    const stop = new AbortController();
    const shrunk = first.shrunk(stop.signal);
    second.add(A, id(1), 3, later());
    await shrunk;
    expect(first.size).toBe(0);
    expect(second.receipts().map((r) => r.claim)).toEqual([3]);
    // The older receipts no longer free anything; the newest does.
    windows.acked(A, id(1), 2);
    expect(second.size).toBe(1);
    windows.acked(A, id(1), 3);
    expect(second.size).toBe(0);
  });

  it("an older claim added late does not evict the newer claim's receipt", () => {
    const windows = createStreamWindows();
    const first = windows.open();
    const second = windows.open();
    second.add(A, id(1), 4, later());
    // The older claim arrives after the newer one (a slow give-back): the newer receipt stays where it is.
    first.add(A, id(1), 3, later());
    expect(first.size).toBe(0);
    expect(second.receipts().map((r) => r.claim)).toEqual([4]);
    windows.acked(A, id(1), 4);
    expect(second.size).toBe(0);
  });

  it("an extension moves the lease end of the receipt it names, and a closed window forgets its receipts", () => {
    const windows = createStreamWindows();
    const w = windows.open();
    const end = later();
    w.add(A, id(1), 1, end);
    windows.extended(A, id(1), 2, end + 5_000);
    expect(w.receipts()[0].untilMs).toBe(end);
    windows.extended(A, id(1), 1, end + 5_000);
    expect(w.receipts()[0].untilMs).toBe(end + 5_000);
    expect(windows.count).toBe(1);
    w.close();
    expect(windows.count).toBe(0);
    expect(w.size).toBe(0);
    // A window opened later holds the same message under a new claim; the closed one's ack does nothing to it.
    const next = windows.open();
    next.add(A, id(1), 2, later());
    windows.acked(A, id(1), 1);
    expect(next.size).toBe(1);
  });
});
