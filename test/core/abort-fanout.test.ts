import { expect, it } from "vitest";
import { createAbortFanout } from "../../src/core/abort-fanout.ts";

it("calls every waiter still added when the signal aborts, once, and a waiter added after at once", () => {
  const controller = new AbortController();
  const fanout = createAbortFanout(controller.signal);
  const called: string[] = [];
  const a = () => called.push("a");
  const b = () => called.push("b");
  const c = () => called.push("c");
  fanout.add(a);
  fanout.add(b);
  fanout.add(c);
  fanout.delete(b);
  expect(called).toEqual([]);
  controller.abort();
  expect(called).toEqual(["a", "c"]);
  controller.abort();
  expect(called).toEqual(["a", "c"]);
  fanout.add(b);
  expect(called).toEqual(["a", "c", "b"]);
});
