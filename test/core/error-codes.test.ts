/**
 * The app client (client/src/platform-error.ts) keeps its own copy of the
 * service's closed set of error codes, so that it has no dependency on the
 * server's code: this test ties the copy to the original (src/core/errors.ts),
 * so a code added on one side without the other fails here. It also ties the
 * client's reading of a bare status (an answer without the envelope) to the
 * server's table: a code with that status, and the generic one when several share it.
 */
import { describe, expect, it } from "vitest";
import { ERROR_CODES as CLIENT_CODES, errorFromResponse } from "../../client/src/platform-error.ts";
import { ERROR_CODES, isBareCode, statusOf } from "../../src/core/errors.ts";

describe("error codes", () => {
  it("the client knows exactly the service's codes", () => {
    expect([...CLIENT_CODES].sort()).toEqual([...ERROR_CODES].sort());
    for (const code of ERROR_CODES) expect(statusOf(code)).toBeGreaterThanOrEqual(400);
  });

  it("the client reads a bare status as the server's table does", () => {
    const statuses = [...new Set(ERROR_CODES.map(statusOf))];
    for (const status of statuses) {
      const code = errorFromResponse(status, new Headers(), "<html>Bad gateway</html>").code;
      const sharing = ERROR_CODES.filter((c) => statusOf(c) === status);
      expect({ status, code, status_of_code: statusOf(code) }).toEqual({ status, code, status_of_code: status });
      if (sharing.length > 1) expect({ status, code, bare: isBareCode(code) }).toEqual({ status, code, bare: true });
    }
    // Two generic codes answer 409; without an envelope the broader one, never `secret_not_set`.
    expect(errorFromResponse(409, new Headers(), "").code).toBe("failed_precondition");
  });
});
