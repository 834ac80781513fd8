/**
 * Rules that used to be written twice, each now with one source; these tie
 * every other place to it, so that a second copy fails here instead of
 * drifting (one copy ignored case, another did not).
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { Interval } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { INTERVAL_OF } from "../../src/analytics/enum-names.ts";
import { isUuid } from "../../src/core/apps/apps.ts";
import { ERROR_CODES, PlatformError, toConnectError, toPlatformError } from "../../src/core/errors.ts";

const root = path.resolve(import.meta.dirname, "../..");
const sources = execFileSync("git", ["ls-files", "src"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((file) => /\.tsx?$/.test(file) && fs.existsSync(path.join(root, file)));
const text = new Map(sources.map((file) => [file, fs.readFileSync(path.join(root, file), "utf8")]));

/** The source files whose text matches `pattern`. */
function filesMatching(pattern: RegExp): string[] {
  return sources.filter((file) => pattern.test(text.get(file)!));
}

describe("rules written once", () => {
  it("the UUID shape: one pattern (core/apps/apps.ts `isUuid`), either case", () => {
    expect(filesMatching(/\[0-9a-f\]\{8\}-/i)).toEqual(["src/core/apps/apps.ts"]);
    expect(isUuid("0196a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b")).toBe(true);
    expect(isUuid("0196A3C4-5B6D-7E8F-9A0B-1C2D3E4F5A6B")).toBe(true);
    expect(isUuid("0196a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6")).toBe(false);
  });

  it("a token's last use: one statement (core/apps/app-store.ts `markTokenUsedIn`) for app and operator tokens", () => {
    expect(filesMatching(/SET last_used_at|set\(\{ last_used_at/)).toEqual(["src/core/apps/app-store.ts"]);
    expect(text.get("src/core/operators/operator-store.ts")).toMatch(/markTokenUsedIn\(db, "operator_tokens"/);
  });

  it("the interval names: one table (analytics/enum-names.ts), which the CLI's --interval reads too", () => {
    expect(filesMatching(/Interval\.(HOUR|WEEK|MONTH)\b/)).toEqual(["src/analytics/enum-names.ts"]);
    expect(text.get("src/cli.ts")).toMatch(/INTERVAL_OF/);
    expect(INTERVAL_OF).toEqual({ hour: Interval.HOUR, day: Interval.DAY, week: Interval.WEEK, month: Interval.MONTH });
  });

  it("the readiness checks: built once in platform-server.ts, for /ready, the admin overview and gRPC health", () => {
    const server = text.get("src/platform-server.ts")!;
    expect(server.match(/pingDatabase\(/g)).toHaveLength(1);
    expect(server.match(/\.readiness\?\.\(\)/g)).toHaveLength(1);
  });

  it("what an error answer does besides the answer: once (errors.ts `noteAnswered`), for REST and Connect", () => {
    expect(filesMatching(/"unexpected error"/)).toContain("src/core/errors.ts");
    for (const file of ["src/core/http/error-handler.ts", "src/core/http/connect-interceptor.ts"]) {
      expect(text.get(file)).toMatch(/noteAnswered\(/);
      expect(text.get(file)).not.toMatch(/"unexpected error"|health\.failed\(/);
    }
  });

  it("the code a bare Connect code stands for: derived from errors.ts's one table, one per Connect code", () => {
    const table = text.get("src/core/errors.ts")!;
    const bare = [...table.matchAll(/connect: Code\.(\w+), bare: true/g)].map((m) => m[1]);
    expect(new Set(bare).size).toBe(bare.length);
    for (const code of ERROR_CODES.filter((c) => c !== "internal")) {
      const connect = toConnectError(new PlatformError(code, "m")).code;
      const read = toPlatformError(new ConnectError("m", connect)).code;
      // A bare Connect code is read as a code of the same Connect code (and FailedPrecondition as the generic one).
      expect([code, toConnectError(new PlatformError(read, "m")).code]).toEqual([code, connect]);
    }
    expect(toPlatformError(new ConnectError("m", Code.FailedPrecondition)).code).toBe("failed_precondition");
    expect(toPlatformError(new ConnectError("m", Code.PermissionDenied)).code).toBe("permission_denied");
    expect(toPlatformError(new ConnectError("m", Code.ResourceExhausted)).code).toBe("quota_exceeded");
  });
});
