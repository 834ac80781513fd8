/**
 * Calendar arithmetic behind the 1000-bucket limit and the reference count,
 * and the JSON time parser of the REST routes.
 */
import { describe, expect, it } from "vitest";
import { bucketCount, checkTimezone, utcBucketStart } from "../../src/analytics/buckets.ts";
import { parseTime } from "../../src/analytics/analytics-routes.ts";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { T } from "./store-cases.ts";

describe("bucketCount", () => {
  it("counts every bucket the range touches, the partial first and last included", () => {
    expect(bucketCount(T("2024-03-10T10:30:00Z"), T("2024-03-10T12:00:00Z"), "hour")).toBe(2);
    expect(bucketCount(T("2024-03-10T10:30:00Z"), T("2024-03-10T12:00:00.001Z"), "hour")).toBe(3);
    expect(bucketCount(T("2024-02-28T23:00:00Z"), T("2024-03-01T01:00:00Z"), "day")).toBe(3);
    // 2024-03-10 is a Sunday, 2024-03-11 a Monday.
    expect(bucketCount(T("2024-03-10T00:00:00Z"), T("2024-03-11T00:00:00Z"), "week")).toBe(1);
    expect(bucketCount(T("2024-03-10T00:00:00Z"), T("2024-03-11T00:00:01Z"), "week")).toBe(2);
    expect(bucketCount(T("2024-01-31T00:00:00Z"), T("2024-03-01T00:00:00Z"), "month")).toBe(2);
    expect(bucketCount(T("2023-12-31T00:00:00Z"), T("2024-01-01T00:00:01Z"), "month")).toBe(2);
  });

  it("counts local calendar buckets in a zone", () => {
    // 2024-03-31 00:00 in Berlin is 2024-03-30T23:00Z.
    expect(bucketCount(T("2024-03-30T23:00:00Z"), T("2024-03-31T22:00:00Z"), "day", "Europe/Berlin")).toBe(1);
    expect(bucketCount(T("2024-03-30T23:00:00Z"), T("2024-03-31T22:00:00Z"), "day")).toBe(2);
    expect(bucketCount(T("2024-03-01T04:59:00Z"), T("2024-03-01T05:01:00Z"), "month", "America/New_York")).toBe(2);
  });

  it("puts exactly 1000 hour buckets in 1000 hours", () => {
    expect(bucketCount(T("2024-01-01T00:00:00Z"), T("2024-01-01T00:00:00Z") + 1000 * 3_600_000, "hour")).toBe(1000);
  });
});

describe("utcBucketStart", () => {
  it("starts weeks on Monday, before and after 1970", () => {
    expect(new Date(utcBucketStart(T("2024-03-17T23:59:59Z"), "week")).toISOString()).toBe("2024-03-11T00:00:00.000Z");
    expect(new Date(utcBucketStart(T("1969-12-31T12:00:00Z"), "week")).toISOString()).toBe("1969-12-29T00:00:00.000Z");
    expect(new Date(utcBucketStart(T("2024-02-29T12:00:00Z"), "month")).toISOString()).toBe("2024-02-01T00:00:00.000Z");
  });
});

describe("checkTimezone", () => {
  it("takes IANA names and refuses offsets, POSIX strings and unknown zones", () => {
    expect(checkTimezone("Europe/Berlin")).toBe("Europe/Berlin");
    expect(checkTimezone("America/Argentina/Buenos_Aires")).toBe("America/Argentina/Buenos_Aires");
    for (const bad of ["+03:00", "UTC+3", "Mars/Olympus", "", "../etc/passwd", "x".repeat(100)]) {
      expect(() => checkTimezone(bad), bad).toThrow(/^timezone: /);
    }
  });
});

describe("parseTime", () => {
  const ms = (v: unknown) => {
    const t = parseTime(v);
    return t ? timestampMs(t) : undefined;
  };
  it("takes epoch ms integers and ISO 8601 date-times ending in Z", () => {
    expect(ms(0)).toBe(0);
    expect(ms(-1)).toBe(-1);
    expect(ms("2024-02-29T12:00:00Z")).toBe(T("2024-02-29T12:00:00Z"));
    expect(ms("2024-02-29T12:00Z")).toBe(T("2024-02-29T12:00:00Z"));
    expect(ms("2024-02-29T12:00:00.123456789Z")).toBe(T("2024-02-29T12:00:00.123Z"));
    expect(ms("0099-01-01T00:00:00Z")).toBe(new Date("0099-01-01T00:00:00Z").getTime());
  });
  it("refuses everything else", () => {
    for (const bad of [
      1.5,
      Number.MAX_SAFE_INTEGER + 2,
      "2024-02-29",
      "2024-02-29T12:00:00+00:00",
      "2023-02-29T00:00:00Z",
      "2024-02-29T24:00:00Z",
      "2024-02-29T12:00:60Z",
      "1709208000000",
      true,
      null,
      {},
    ]) {
      expect(ms(bad), JSON.stringify(bad)).toBeUndefined();
    }
  });
});
