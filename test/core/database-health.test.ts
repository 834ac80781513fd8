/**
 * The outage bookkeeping (src/core/database/health.ts `createDatabaseHealth`):
 * one warning when an outage begins, one line when it is over, and an answer
 * to a statement sent as the server was going down (before the outage or just
 * after its first failure) does not end it.
 */
import { describe, expect, it } from "vitest";
import { createDatabaseHealth, isDatabaseUnreachable, isFailover } from "../../src/core/database/health.ts";
import { toPlatformError } from "../../src/core/errors.ts";

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

/** A PostgreSQL error as node-postgres makes it: the server's message and its SQLSTATE. */
const pgError = (code: string, message: string) => Object.assign(new Error(message), { code, severity: "ERROR" });

describe("a failover is an outage (isFailover, isDatabaseUnreachable, toPlatformError)", () => {
  const outages = [
    pgError("25006", "cannot execute INSERT in a read-only transaction"),
    pgError("57P01", "terminating connection due to administrator command"),
    pgError("57P02", "terminating connection due to crash of another server process"),
    pgError("57P03", "the database system is starting up"),
    pgError("40001", "canceling statement due to conflict with recovery"),
    pgError("40P01", "canceling statement due to conflict with recovery"),
  ];
  for (const err of outages) {
    it(`${(err as { code: string }).code} "${err.message}": 503 unavailable with Retry-After, connection discarded`, () => {
      expect(isFailover(err)).toBe(true);
      expect(isDatabaseUnreachable(err)).toBe(true);
      expect(isFailover(new Error("wrapped", { cause: err }))).toBe(true);
      expect(toPlatformError(err)).toMatchObject({ code: "unavailable", retryAfterSeconds: 2 });
    });
  }

  it("a serialisation failure or a deadlock of the service's own statements stays a 409 conflict", () => {
    for (const err of [
      pgError("40001", "could not serialize access due to concurrent update"),
      pgError("40P01", "deadlock detected"),
    ]) {
      expect(isFailover(err)).toBe(false);
      expect(isDatabaseUnreachable(err)).toBe(false);
      expect(toPlatformError(err).code).toBe("conflict");
    }
    expect(isFailover(pgError("23505", "duplicate key value violates unique constraint"))).toBe(false);
  });

  it("a read-only outage (a failover) is over when a write answers, not a read or a new connection", () => {
    const lines: string[] = [];
    const health = createDatabaseHealth({
      warn: (_f, message) => void lines.push(`warn: ${message}`),
      info: (_f, message) => void lines.push(`info: ${message}`),
    });
    expect(health.failed(pgError("25006", "cannot execute INSERT in a read-only transaction"))).toBe(true);
    const later = Date.now() + 2000;
    health.succeeded(later, "SELECT 1");
    health.succeeded(later);
    expect(health.reachable).toBe(false);
    health.succeeded(later, "WITH q AS (SELECT 1) INSERT INTO queue_messages SELECT 1 FROM q");
    expect(health.reachable).toBe(true);
    expect(lines).toEqual([
      "warn: database unreachable: answering 503 until it is back",
      "info: database reachable again",
    ]);
  });
});
