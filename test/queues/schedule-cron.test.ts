/**
 * The next-run function of queue schedules (docs/queues.md "Schedules") across the daylight-saving
 * transitions of Europe/Berlin, on a fixed clock (the `after` given): a local time skipped in spring fires
 * once, after the jump; a local time repeated in autumn fires once; a seconds field ticks every second
 * through the jump; and the checks name the field at fault.
 */
import { describe, expect, it } from "vitest";
import { checkCron, nextRun } from "../../src/queues/schedule-cron.ts";
import { firstRun } from "../../src/queues/queue-schedule-store.ts";

const iso = (d: Date | null) => d?.toISOString();

describe("nextRun in Europe/Berlin", () => {
  it("a daily 02:30 before, on and after the spring transition (2026-03-29, 02:00 CET -> 03:00 CEST)", () => {
    let at = new Date("2026-03-27T12:00:00Z");
    const runs: (string | undefined)[] = [];
    for (let i = 0; i < 4; i++) {
      const next = nextRun("30 2 * * *", "Europe/Berlin", at);
      runs.push(iso(next));
      at = next!;
    }
    expect(runs).toEqual([
      "2026-03-28T01:30:00.000Z", // 02:30 CET
      "2026-03-29T01:30:00.000Z", // 02:30 does not exist: once, at 03:30 CEST
      "2026-03-30T00:30:00.000Z", // 02:30 CEST
      "2026-03-31T00:30:00.000Z",
    ]);
  });

  it("a daily 02:30 on the autumn transition (2026-10-25, 03:00 CEST -> 02:00 CET) fires once", () => {
    let at = new Date("2026-10-24T12:00:00Z");
    const runs: (string | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      const next = nextRun("30 2 * * *", "Europe/Berlin", at);
      runs.push(iso(next));
      at = next!;
    }
    expect(runs[0]).toBe("2026-10-25T00:30:00.000Z"); // the first 02:30 (CEST)
    expect(runs[1]).toBe("2026-10-26T01:30:00.000Z"); // not the repeated 02:30 CET of the 25th
    expect(runs[2]).toBe("2026-10-27T01:30:00.000Z");
  });

  it("an hourly schedule counts real hours through the spring jump", () => {
    let at = new Date("2026-03-28T23:30:00Z"); // 00:30 CET
    const runs: (string | undefined)[] = [];
    for (let i = 0; i < 4; i++) {
      const next = nextRun("0 * * * *", "Europe/Berlin", at);
      runs.push(iso(next));
      at = next!;
    }
    expect(runs).toEqual([
      "2026-03-29T00:00:00.000Z", // 01:00 CET
      "2026-03-29T01:00:00.000Z", // 03:00 CEST (02:00 skipped)
      "2026-03-29T02:00:00.000Z",
      "2026-03-29T03:00:00.000Z",
    ]);
  });

  it("a seconds field ticks every second across the jump, with no gap and no repeat", () => {
    let at = new Date("2026-03-29T00:59:57Z");
    const runs: number[] = [];
    for (let i = 0; i < 6; i++) {
      const next = nextRun("* * * * * *", "Europe/Berlin", at)!;
      runs.push(next.getTime());
      at = next;
    }
    expect(runs.map((t, i) => (i === 0 ? 0 : t - runs[i - 1]))).toEqual([0, 1000, 1000, 1000, 1000, 1000]);
  });

  it("stops at endAt and starts at startAt", () => {
    const after = new Date("2026-01-01T00:00:00Z");
    expect(nextRun("0 * * * *", "UTC", after, new Date("2026-01-01T00:30:00Z"))).toBeNull();
    const first = firstRun(
      {
        cron: "0 * * * *",
        timezone: "UTC",
        payload: "1",
        startAt: new Date("2026-01-01T05:00:00Z"),
        endAt: null,
        catchUp: "none",
      },
      after,
    );
    expect(iso(first)).toBe("2026-01-01T05:00:00.000Z");
  });
});

describe("checkCron", () => {
  it("names the field at fault", () => {
    expect(() => checkCron("not a cron", "UTC")).toThrow(/cron/);
    expect(() => checkCron("* * *", "UTC")).toThrow(/cron/);
    expect(() => checkCron("61 * * * *", "UTC")).toThrow(/cron/);
    expect(() => checkCron("* * * * *", "Mars/Olympus")).toThrow(/timezone/);
    expect(() => checkCron("*/5 * * * * *", "Europe/Berlin")).not.toThrow();
  });
});
