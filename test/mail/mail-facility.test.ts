/**
 * The mail facility on the outbox provider (the embedded default), over REST
 * and over gRPC: the documented shape, every refusal, the daily cap under real
 * concurrency, and the mail log read back through AdminService.ListMail.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { MailStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { useTestApp, useTestServer } from "../support/harness.ts";

const DOMAIN = "mail.test.example";
const t = useTestServer({ env: { MAIL_DOMAIN: DOMAIN } });
const app = useTestApp(t);

const send = (token: string, body: unknown) => t.request("POST", "/v1/mail/send", { token, body });
const used = async (appId: string) => Number((await t.admin.getUsage({ appId })).mail!.used);

async function grpcError(
  promise: Promise<unknown>,
): Promise<{ code: Code; stringCode: string | undefined; message: string }> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    const e = err as ConnectError;
    return { code: e.code, stringCode: e.findDetails(ErrorDetailSchema)[0]?.code, message: e.rawMessage };
  }
  throw new Error("expected the call to fail");
}

describe("POST /v1/mail/send on the outbox", () => {
  it("sends from the app's platform-assigned address and answers the documented shape", async () => {
    const a = await t.createApp();
    const res = await send(a.token, {
      to: "reader@example.com",
      subject: "Welcome",
      text: "Hello there,\nthanks for signing up.",
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ sent: true, from: `${a.name}@${DOMAIN}`, remainingToday: 99 });
    const again = await send(a.token, { to: "reader@example.com", subject: "Again", text: "x" });
    expect(again.body.remainingToday).toBe(98);
    expect(await used(a.id)).toBe(2);
  });

  it("does not let the caller choose the sender: a `from` is refused, saying why (docs/api.md, unknown fields)", async () => {
    const a = await t.createApp();
    const res = await send(a.token, { to: "reader@example.com", subject: "s", text: "t", from: "ceo@bank.example" });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({
      code: "invalid_argument",
      message: `unknown field "from": not supported: mail is sent from the app's own address`,
    });
    expect((await t.admin.listMail({ appId: a.id })).mails).toEqual([]);
    const sent = await send(a.token, { to: "reader@example.com", subject: "s", text: "t" });
    expect(sent.body.from).toBe(`${a.name}@${DOMAIN}`);
    const { mails } = await t.admin.listMail({ appId: a.id });
    expect(mails[0].from).toBe(`${a.name}@${DOMAIN}`);
  });

  it("stores the message in the mail log with its text, never delivered (status stored)", async () => {
    const a = await t.createApp();
    const text = "Line one\r\nLine two — ünïcödé 😀";
    await send(a.token, { to: "first@example.com", subject: "First", text });
    await send(a.token, { to: "second@example.com", subject: "Second ✓", text: "2" });
    const { mails } = await t.admin.listMail({ appId: a.id });
    expect(mails.map((m) => m.subject)).toEqual(["Second ✓", "First"]);
    const first = mails[1];
    expect(first).toMatchObject({
      to: "first@example.com",
      from: `${a.name}@${DOMAIN}`,
      subject: "First",
      text,
      status: MailStatus.STORED,
    });
    expect(first.providerMessageId).toMatch(/^[0-9a-f-]{36}$/);
    const at = Number(first.at!.seconds) * 1000;
    expect(Math.abs(at - Date.now())).toBeLessThan(60_000);
  });

  it("answers 501 not_configured when the app has no sender address, and consumes nothing", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, mailFrom: "" });
    const res = await send(a.token, { to: "reader@example.com", subject: "s", text: "t" });
    expect(res.status).toBe(501);
    expect(res.body.error.code).toBe("not_configured");
    expect(res.body.error.message).toMatch(/no sender address/);
    expect(await used(a.id)).toBe(0);
    expect((await t.admin.listMail({ appId: a.id })).mails).toEqual([]);

    await t.admin.updateApp({ appId: a.id, mailFrom: "news@other.example" });
    const ok = await send(a.token, { to: "reader@example.com", subject: "s", text: "t" });
    expect(ok.status).toBe(200);
    expect(ok.body.from).toBe("news@other.example");
  });

  it("answers 403 app_stopped for a stopped app, and consumes nothing", async () => {
    const a = await t.createApp();
    await a.stop();
    const res = await send(a.token, { to: "reader@example.com", subject: "s", text: "t" });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe("app_stopped");
    expect(await used(a.id)).toBe(0);
  });

  it("answers 401 without a valid token", async () => {
    expect((await send("", { to: "a@example.com", subject: "s", text: "t" })).status).toBe(401);
    expect((await send("pbt_" + "A".repeat(43), { to: "a@example.com", subject: "s", text: "t" })).status).toBe(401);
  });
});

describe("validation over REST", () => {
  const cases: [string, unknown, RegExp][] = [
    ["a malformed address", { to: "not-an-address", subject: "s", text: "t" }, /^to: must be an email address/],
    [
      "a display-name address",
      { to: "Eve <eve@example.com>", subject: "s", text: "t" },
      /^to: must be an email address/,
    ],
    ["an address with a line break", { to: "a@example.com\r\nBcc: b@example.com", subject: "s", text: "t" }, /^to: /],
    ["a missing address", { subject: "s", text: "t" }, /^to: is required/],
    ["an empty subject", { to: "a@example.com", subject: "", text: "t" }, /^subject: is required/],
    [
      "a 201-character subject",
      { to: "a@example.com", subject: "s".repeat(201), text: "t" },
      /^subject: must be 1 to 200 characters/,
    ],
    [
      "CRLF in the subject",
      { to: "a@example.com", subject: "Hi\r\nBcc: victim@example.com", text: "t" },
      /^subject: must not contain CR or LF/,
    ],
    [
      "LF in the subject",
      { to: "a@example.com", subject: "Hi\nthere", text: "t" },
      /^subject: must not contain CR or LF/,
    ],
    ["NUL in the subject", { to: "a@example.com", subject: "a\u0000b", text: "t" }, /^subject: must not contain NUL/],
    ["an empty text", { to: "a@example.com", subject: "s", text: "" }, /^text: is required/],
    [
      "a 100001-character text",
      { to: "a@example.com", subject: "s", text: "t".repeat(100_001) },
      /^text: must be 1 to 100000 characters/,
    ],
    ["a number for to", { to: 42, subject: "s", text: "t" }, /^to: /],
    ["null for text", { to: "a@example.com", subject: "s", text: null }, /^text: /],
    ["an array body", [], /^body: must be a JSON object/],
  ];
  for (const [name, body, message] of cases) {
    it(`refuses ${name} with 400 invalid_argument`, async () => {
      const res = await send(app.token, body);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message).toMatch(message);
    });
  }

  it("refuses malformed JSON and a lone surrogate with 400", async () => {
    const bad = await t.request("POST", "/v1/mail/send", { token: app.token, body: "{not json" });
    expect(bad.status).toBe(400);
    const lone = await t.request("POST", "/v1/mail/send", {
      token: app.token,
      body: '{"to":"a@example.com","subject":"\\ud800","text":"t"}',
    });
    expect(lone.status).toBe(400);
    expect(lone.body.error.message).toMatch(/^subject: must be valid Unicode/);
  });

  it("accepts the bounds exactly: 200-character subject, 100000-character text", async () => {
    const a = await t.createApp();
    const res = await send(a.token, { to: "a@example.com", subject: "s".repeat(200), text: "😀".repeat(100_000) });
    expect(res.status).toBe(200);
    const { mails } = await t.admin.listMail({ appId: a.id, limit: 1 });
    expect(mails[0].text).toBe("😀".repeat(100_000));
  });

  it("a refused request consumes none of the allowance and is not logged", async () => {
    const a = await t.createApp();
    const refused = [
      { to: "nope", subject: "s", text: "t" },
      { to: "a@example.com", subject: "a\r\nBcc: b@example.com", text: "t" },
      { to: "a@example.com", subject: "s".repeat(201), text: "t" },
      { to: "a@example.com", subject: "s", text: "" },
      { to: "a@example.com", subject: "s", text: "t".repeat(100_001) },
    ];
    for (const body of refused) expect((await send(a.token, body)).status).toBe(400);
    await a.stop();
    expect((await send(a.token, { to: "a@example.com", subject: "s", text: "t" })).status).toBe(403);
    expect(await used(a.id)).toBe(0);
    expect((await t.admin.listMail({ appId: a.id })).mails).toEqual([]);

    // The same app's accepted request is counted and logged: the two checks above can see a send.
    await a.start();
    expect((await send(a.token, { to: "a@example.com", subject: "s", text: "t" })).status).toBe(200);
    expect(await used(a.id)).toBe(1);
    expect((await t.admin.listMail({ appId: a.id })).mails).toHaveLength(1);
  });
});

describe("MailService over gRPC", () => {
  it("sends, with the same answer as REST", async () => {
    const a = await t.createApp();
    const client = t.client(MailService, a.token, "grpc");
    const res = await client.sendMail({ to: "grpc@example.com", subject: "Over gRPC", text: "hello" });
    expect(res).toMatchObject({ sent: true, from: `${a.name}@${DOMAIN}`, remainingToday: 99n });
    const { mails } = await t.admin.listMail({ appId: a.id });
    expect(mails).toHaveLength(1);
    expect(mails[0]).toMatchObject({
      to: "grpc@example.com",
      subject: "Over gRPC",
      text: "hello",
      status: MailStatus.STORED,
    });
  });

  it("refuses the same inputs with InvalidArgument and the invalid_argument detail", async () => {
    const client = t.client(MailService, app.token, "grpc");
    const cases: [Record<string, string>, RegExp][] = [
      [{ to: "nope", subject: "s", text: "t" }, /^to: must be an email address/],
      [{ to: "", subject: "s", text: "t" }, /^to: is required/],
      [{ to: "a@example.com", subject: "a\r\nBcc: b@example.com", text: "t" }, /^subject: must not contain CR or LF/],
      [{ to: "a@example.com", subject: "s".repeat(201), text: "t" }, /^subject: must be 1 to 200/],
      [{ to: "a@example.com", subject: "s", text: "" }, /^text: is required/],
      [{ to: "a@example.com", subject: "s", text: "t".repeat(100_001) }, /^text: must be 1 to 100000/],
    ];
    for (const [req, message] of cases) {
      const e = await grpcError(client.sendMail(req));
      expect(e.code).toBe(Code.InvalidArgument);
      expect(e.stringCode).toBe("invalid_argument");
      expect(e.message).toMatch(message);
    }
    expect(await used(app.id)).toBe(0);
  });

  it("maps 501 to Unimplemented and 403 to PermissionDenied", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, mailFrom: "" });
    const client = t.client(MailService, a.token, "grpc");
    const e501 = await grpcError(client.sendMail({ to: "a@example.com", subject: "s", text: "t" }));
    expect([e501.code, e501.stringCode]).toEqual([Code.Unimplemented, "not_configured"]);
    await a.stop();
    const e403 = await grpcError(client.sendMail({ to: "a@example.com", subject: "s", text: "t" }));
    expect([e403.code, e403.stringCode]).toEqual([Code.PermissionDenied, "app_stopped"]);
  });
});

describe("the daily cap", () => {
  it("answers 429 quota_exceeded with Retry-After once mailPerDay is spent", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, limits: { mailPerDay: 2 } });
    const body = { to: "a@example.com", subject: "s", text: "t" };
    expect((await send(a.token, body)).body.remainingToday).toBe(1);
    expect((await send(a.token, body)).body.remainingToday).toBe(0);
    const over = await send(a.token, body);
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe("quota_exceeded");
    const retryAfter = Number(over.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(86_400);
    expect((await t.admin.listMail({ appId: a.id })).mails).toHaveLength(2);
    const grpc = await grpcError(t.client(MailService, a.token, "grpc").sendMail(body));
    expect([grpc.code, grpc.stringCode]).toEqual([Code.ResourceExhausted, "quota_exceeded"]);
  });

  it("is exact under 200 concurrent sends against a cap of 100", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, limits: { mailPerDay: 100 } });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => send(a.token, { to: `r${i}@example.com`, subject: `#${i}`, text: "t" })),
    );
    const accepted = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(accepted).toHaveLength(100);
    expect(refused.every((r) => r.status === 429 && r.body.error.code === "quota_exceeded")).toBe(true);
    // Each accepted send saw its own place in the allowance.
    expect(accepted.map((r) => r.body.remainingToday).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 100 }, (_, i) => i),
    );
    expect(await used(a.id)).toBe(100);
    expect((await t.admin.listMail({ appId: a.id, limit: 1000 })).mails).toHaveLength(100);
  });
});

describe("AdminService.ListMail", () => {
  it("lists newest first, honours limit, and is scoped to the app", async () => {
    const a = await t.createApp();
    const b = await t.createApp();
    for (let i = 0; i < 5; i++) await send(a.token, { to: `n${i}@example.com`, subject: `n${i}`, text: "t" });
    await send(b.token, { to: "b@example.com", subject: "b's", text: "t" });
    const all = await t.admin.listMail({ appId: a.id });
    expect(all.mails.map((m) => m.subject)).toEqual(["n4", "n3", "n2", "n1", "n0"]);
    const two = await t.admin.listMail({ appId: a.id, limit: 2 });
    expect(two.mails.map((m) => m.subject)).toEqual(["n4", "n3"]);
    expect((await t.admin.listMail({ appId: b.id })).mails.map((m) => m.subject)).toEqual(["b's"]);
  });

  it("refuses a bad limit, an unknown app and a service token", async () => {
    const bad = await grpcError(t.admin.listMail({ appId: app.id, limit: 0 }));
    expect(bad.code).toBe(Code.InvalidArgument);
    const unknown = await grpcError(t.admin.listMail({ appId: "00000000-0000-4000-8000-000000000000" }));
    expect(unknown.code).toBe(Code.NotFound);
    const res = await t.request("POST", "/platform.admin.v1.AdminService/ListMail", {
      token: app.token,
      body: { appId: app.id },
    });
    expect(res.status).toBe(401);
  });
});
