/**
 * The outage bookkeeping (src/core/database/health.ts `createDatabaseHealth`):
 * one warning when an outage begins, one line when it is over, and an answer
 * to a statement sent as the server was going down (before the outage or just
 * after its first failure) does not end it.
 */
import { describe, expect, it } from "vitest";
import { createDatabaseHealth } from "../../src/core/database/health.ts";

const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });

describe("createDatabaseHealth", () => {
  it("an answer to a statement sent within a second of the first failure does not end the outage", () => {
    const lines: string[] = [];
    const health = createDatabaseHealth({
      warn: (_f, message) => void lines.push(`warn: ${message}`),
      info: (_f, message) => void lines.push(`info: ${message}`),
    });
    expect(health.failed(refused)).toBe(true);
    const began = Date.now();
    // Sent just after the first failure, answered by a server still ending its connections.
    health.succeeded(began + 5);
    expect(health.reachable).toBe(false);
    // The next failure is the same outage: no second warning.
    expect(health.failed(refused)).toBe(true);
    health.succeeded(began + 2000);
    expect(health.reachable).toBe(true);
    expect(lines).toEqual([
      "warn: database unreachable: answering 503 until it is back",
      "info: database reachable again",
    ]);
    expect(health.failed(new Error("syntax error"))).toBe(false);
  });
});
