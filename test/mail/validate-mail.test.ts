import { describe, expect, it } from "vitest";
import { PlatformError } from "../../src/core/errors.ts";
import { addressProblem, validateMail } from "../../src/mail/validate-mail.ts";

const ok = { to: "someone@example.com", subject: "Hello", text: "Body" };

function problems(fields: Partial<typeof ok>): string[] {
  try {
    validateMail({ ...ok, ...fields });
    return [];
  } catch (err) {
    expect(err).toBeInstanceOf(PlatformError);
    expect((err as PlatformError).code).toBe("invalid_argument");
    return (err as PlatformError).details ?? [];
  }
}

describe("addressProblem: the WHATWG valid e-mail address, with SMTP lengths", () => {
  const valid = [
    "a@b",
    "user@localhost",
    "first.last@example.com",
    "x+tag@sub.example.co.uk",
    "UPPER@EXAMPLE.COM",
    ".leading@example.com", // allowed by WHATWG (a willful violation of RFC 5322)
    "a..b@example.com",
    "!#$%&'*+/=?^_`{|}~-@example.com",
    "a@1.2.3.4",
    "a@xn--bcher-kva.example",
    "a@a-b.c-d.example",
    `${"l".repeat(64)}@example.com`,
    `a@${"d".repeat(63)}.com`,
  ];
  for (const address of valid) {
    it(`accepts ${JSON.stringify(address)}`, () => expect(addressProblem(address)).toBeUndefined());
  }

  const invalid: [string, RegExp][] = [
    ["", /required/],
    ["plain", /email address/],
    ["@example.com", /email address/],
    ["a@", /email address/],
    ["a@b@c", /email address/],
    ["a b@example.com", /email address/],
    [" a@example.com", /email address/],
    ["a@example.com ", /email address/],
    ["a@-example.com", /email address/],
    ["a@example-.com", /email address/],
    ["a@example..com", /email address/],
    ["a@.example.com", /email address/],
    ["a@example.com.", /email address/],
    ["a@exa_mple.com", /email address/],
    ['"quoted"@example.com', /email address/],
    ["Name <a@example.com>", /email address/],
    ["a@example.com,b@example.com", /email address/],
    ["ü@example.com", /email address/],
    ["a@bücher.example", /email address/],
    ["a@[127.0.0.1]", /email address/],
    ["a@example.com\r\nBcc: x@example.com", /email address/],
    ["a@example.com\n", /email address/],
    [`a@${"d".repeat(64)}.com`, /email address/],
    [`${"l".repeat(65)}@example.com`, /64 characters before the @/],
    [`a@${Array.from({ length: 5 }, () => "d".repeat(60)).join(".")}`, /at most 254/],
    ["x".repeat(100_000), /at most 254/],
  ];
  for (const [address, rule] of invalid) {
    it(`refuses ${JSON.stringify(address.length > 40 ? address.slice(0, 40) + "…" : address)}`, () => {
      expect(addressProblem(address)).toMatch(rule);
    });
  }
});

describe("validateMail", () => {
  it("accepts the bounds: 200-character subject, 100000-character text", () => {
    expect(problems({ subject: "s".repeat(200), text: "t".repeat(100_000) })).toEqual([]);
  });

  it("counts characters, not UTF-16 units: 200 emoji are a valid subject, 201 are not", () => {
    expect(problems({ subject: "😀".repeat(200) })).toEqual([]);
    expect(problems({ subject: "😀".repeat(201) })).toEqual(["subject: must be 1 to 200 characters (got 201)"]);
    expect(problems({ text: "😀".repeat(100_000) })).toEqual([]);
  });

  it("refuses empty and too long subject and text", () => {
    expect(problems({ subject: "" })[0]).toMatch(/^subject: is required/);
    expect(problems({ subject: "s".repeat(201) })).toEqual(["subject: must be 1 to 200 characters (got 201)"]);
    expect(problems({ text: "" })[0]).toMatch(/^text: is required/);
    expect(problems({ text: "t".repeat(100_001) })).toEqual(["text: must be 1 to 100000 characters (got 100001)"]);
  });

  it("refuses CR or LF in the subject (header injection) but allows them in the text", () => {
    for (const subject of ["a\r\nBcc: victim@example.com", "a\nb", "a\rb", "\r\n"]) {
      expect(problems({ subject })[0], JSON.stringify(subject)).toMatch(/^subject: must not contain CR or LF/);
    }
    expect(problems({ subject: "tab\tis fine", text: "line 1\r\nline 2\n" })).toEqual([]);
  });

  it("refuses NUL and lone surrogates", () => {
    expect(problems({ subject: "a\0b" })[0]).toMatch(/^subject: must not contain NUL/);
    expect(problems({ text: "a\0b" })[0]).toMatch(/^text: must not contain NUL/);
    expect(problems({ subject: "a\ud800b" })[0]).toMatch(/^subject: must be valid Unicode/);
    expect(problems({ text: "\udc00" })[0]).toMatch(/^text: must be valid Unicode/);
  });

  it("names every bad field in details, the first in the message", () => {
    try {
      validateMail({ to: "nope", subject: "", text: "" });
      expect.unreachable();
    } catch (err) {
      const e = err as PlatformError;
      expect(e.details?.map((d) => d.split(":")[0])).toEqual(["to", "subject", "text"]);
      expect(e.message).toBe(e.details?.[0]);
    }
  });
});
