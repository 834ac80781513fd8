/**
 * The app client (client/src/platform-error.ts) keeps its own copy of the
 * service's closed set of error codes, so that it has no dependency on the
 * server's code: this test ties the copy to the original (src/core/errors.ts),
 * so a code added on one side without the other fails here.
 */
import { describe, expect, it } from "vitest";
import { ERROR_CODES as CLIENT_CODES } from "../../client/src/platform-error.ts";
import { ERROR_CODES, statusOf } from "../../src/core/errors.ts";

describe("error codes", () => {
  it("the client knows exactly the service's codes", () => {
    expect([...CLIENT_CODES].sort()).toEqual([...ERROR_CODES].sort());
    for (const code of ERROR_CODES) expect(statusOf(code)).toBeGreaterThanOrEqual(400);
  });
});
