/**
 * The lazy request logger (src/core/http/request-logger.ts): what it writes is
 * what an eagerly made pino child writes (bindings, redaction, levels), and a
 * call at a disabled level writes nothing.
 */
import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/core/logger.ts";
import { createRequestLogger } from "../../src/core/http/request-logger.ts";

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger(level, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

describe("createRequestLogger", () => {
  it("writes the lines an eager child writes, with the request id and the service's redaction", () => {
    const lazy = capture("info");
    const eager = capture("info");
    const log = createRequestLogger(lazy.logger, { reqId: "r-1" }, {});
    const child = eager.logger.child({ reqId: "r-1" });
    for (const l of [log, child]) {
      l.info({ route: "/v1/queues/:queue", token: "pbt_secret" }, "request");
      l.error({ value: "hunter2" }, "failed");
      l.debug("not written at info");
      l.child({ part: "nested" }).warn("from a child");
    }
    const strip = (ls: Record<string, unknown>[]) => ls.map(({ time: _t, pid: _p, hostname: _h, ...rest }) => rest);
    expect(strip(lazy.lines)).toEqual(strip(eager.lines));
    expect(strip(lazy.lines)).toEqual([
      {
        level: 30,
        service: "platform-batteries",
        reqId: "r-1",
        route: "/v1/queues/:queue",
        token: "[redacted]",
        msg: "request",
      },
      { level: 50, service: "platform-batteries", reqId: "r-1", value: "[redacted]", msg: "failed" },
      { level: 40, service: "platform-batteries", reqId: "r-1", part: "nested", msg: "from a child" },
    ]);
  });

  it("writes nothing at a disabled level, and follows a level set on it", () => {
    const { logger, lines } = capture("warn");
    const log = createRequestLogger(logger, { reqId: "r-2" }, {});
    log.info("request");
    log.debug("detail");
    expect([lines, log.level]).toEqual([[], "warn"]);
    log.level = "debug";
    log.debug("now written");
    expect(lines.map((l) => [l.reqId, l.msg])).toEqual([["r-2", "now written"]]);
    expect(logger.level).toBe("warn");
  });
});
