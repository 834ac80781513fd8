/**
 * The SES v2 provider through the real `@aws-sdk/client-sesv2` client:
 * against `aws-ses-v2-local` (started here as a child process, mail read back
 * from its `GET /store`), and against a small HTTP server that answers the way
 * SES does when it refuses or fails, to check the 502 and that a refused
 * request consumes none of the allowance.
 */
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createRequire } from "node:module";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { MailStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { createTestDatabase, startServer, type TestDatabase, type TestServer } from "../support/harness.ts";

const DOMAIN = "mail.test.example";

interface StoredMail {
  messageId: string;
  from: string;
  destination: { to: string[]; cc: string[]; bcc: string[] };
  subject: string;
  body: { text?: string; html?: string };
}

/** Starts `aws-ses-v2-local` on a free port chosen by the OS; resolves with its base URL once it listens. */
async function startSesLocal(): Promise<{ url: string; child: ChildProcess }> {
  const require = createRequire(import.meta.url);
  const pkg = require.resolve("aws-ses-v2-local/package.json");
  const cli = path.join(path.dirname(pkg), (require(pkg) as { bin: Record<string, string> }).bin["aws-ses-v2-local"]);
  const child = spawn(process.execPath, [cli, "--host", "127.0.0.1", "--port", "0"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const m = /server running at http:\/\/[^:\s]+:(\d+)/.exec(out);
      if (m) resolve(`http://127.0.0.1:${m[1]}`);
    });
    child.once("exit", (code) => reject(new Error(`aws-ses-v2-local exited (${code}): ${out}`)));
    child.once("error", reject);
  });
  return { url, child };
}

/** What the SES stand-in answers next, and every request it got. */
type Answer = "accept" | "reject" | "unverified" | "throttle" | "fail" | "hang-up" | "cut-after-200";

function startSesFixture() {
  const requests: { url: string; headers: http.IncomingHttpHeaders; body: any }[] = []; // eslint-disable-line @typescript-eslint/no-explicit-any
  let answer: Answer = "accept";
  let n = 0;
  const error = (res: http.ServerResponse, status: number, type: string, message: string) => {
    res.writeHead(status, {
      "content-type": "application/json",
      "x-amzn-errortype": type,
      "x-amzn-requestid": "req-1",
    });
    res.end(JSON.stringify({ message }));
  };
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString()));
    req.on("end", () => {
      requests.push({ url: req.url ?? "", headers: req.headers, body: JSON.parse(text || "{}") });
      switch (answer) {
        case "accept":
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify({ MessageId: `fixture-${++n}` }));
          return;
        case "reject":
          return error(
            res,
            400,
            "MessageRejected",
            "Email address is not verified. The following identities failed the check in region US-EAST-1: arn:aws:ses:us-east-1:123456789012:identity/secret.example",
          );
        case "unverified":
          return error(
            res,
            400,
            "MailFromDomainNotVerifiedException",
            "MAIL FROM domain secret.example not verified for account 123456789012",
          );
        case "throttle":
          return error(res, 429, "TooManyRequestsException", "Maximum sending rate exceeded for account 123456789012");
        case "fail":
          return error(res, 500, "InternalServiceErrorException", "internal failure at host ip-10-0-0-1");
        case "hang-up":
          req.socket.destroy();
          return;
        case "cut-after-200":
          // Accepted, but the answer's body is cut short.
          res.writeHead(200, { "content-type": "application/json", "content-length": "40" });
          res.write('{"MessageId":"ab');
          setTimeout(() => res.socket?.destroy(), 30);
          return;
      }
    });
  });
  return {
    requests,
    set(next: Answer) {
      answer = next;
      requests.length = 0;
    },
    async listen(): Promise<string> {
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const savedEnv = { ...process.env };
let sesLocal: { url: string; child: ChildProcess };
let fixture: ReturnType<typeof startSesFixture>;
let local: TestServer; // MAIL_PROVIDER=ses against aws-ses-v2-local
let refusing: TestServer; // MAIL_PROVIDER=ses against the fixture
let database: TestDatabase;

beforeAll(async () => {
  // The SDK takes credentials from the standard chain; the environment is its first link.
  process.env.AWS_ACCESS_KEY_ID = "AKIDTESTTESTTEST";
  process.env.AWS_SECRET_ACCESS_KEY = "test-secret";
  process.env.AWS_EC2_METADATA_DISABLED = "true";
  delete process.env.AWS_PROFILE;
  delete process.env.AWS_SESSION_TOKEN;
  fixture = startSesFixture();
  const [ses, fixtureUrl] = await Promise.all([startSesLocal(), fixture.listen()]);
  sesLocal = ses;
  const env = (endpoint: string) => ({
    MAIL_PROVIDER: "ses",
    MAIL_DOMAIN: DOMAIN,
    AWS_REGION: "us-east-1",
    AWS_ENDPOINT_URL_SES: endpoint,
  });
  // One database for both servers keeps this file to one fresh database.
  database = await createTestDatabase();
  local = await startServer({ env: env(sesLocal.url), database });
  // The second server shares the first one's open database: two embedded (PGlite) instances must never open
  // one directory (one process passes its own DATA_DIR lock).
  refusing = await startServer({ env: env(fixtureUrl), database, openDatabase: local.server.deps.database });
});

afterAll(async () => {
  await refusing?.close();
  await local?.close();
  await database?.drop();
  await fixture?.close();
  sesLocal?.child.kill();
  process.env = savedEnv;
});

async function store(): Promise<StoredMail[]> {
  const res = await fetch(`${sesLocal.url}/store`);
  return ((await res.json()) as { emails: StoredMail[] }).emails;
}

describe("SES v2 against aws-ses-v2-local", () => {
  it("delivers over REST from the app's address; the stand-in stores exactly that mail", async () => {
    const a = await local.createApp();
    const text = "Hello,\r\nthis is plain text — ünïcödé 😀\n";
    const res = await local.request("POST", "/v1/mail/send", {
      token: a.token,
      body: { to: "reader@example.com", subject: "Welcome ✓", text },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ sent: true, from: `${a.name}@${DOMAIN}`, remainingToday: 99 });

    const { mails } = await local.admin.listMail({ appId: a.id });
    expect(mails).toHaveLength(1);
    const logged = mails[0];
    expect(logged).toMatchObject({
      to: "reader@example.com",
      from: `${a.name}@${DOMAIN}`,
      subject: "Welcome ✓",
      status: MailStatus.SENT,
      text: "",
    });
    const stored = (await store()).find((m) => m.messageId === logged.providerMessageId);
    expect(stored, "the provider message id of the log is the one SES gave").toBeDefined();
    expect(stored).toMatchObject({
      from: `${a.name}@${DOMAIN}`,
      destination: { to: ["reader@example.com"], cc: [], bcc: [] },
      subject: "Welcome ✓",
    });
    expect(stored!.body.text).toBe(text);
    expect(stored!.body.html).toBeUndefined();
  });

  it("delivers over gRPC", async () => {
    const a = await local.createApp();
    const res = await local
      .client(MailService, a.token, "grpc")
      .sendMail({ to: "grpc@example.com", subject: "Over gRPC", text: "hi" });
    expect(res).toMatchObject({ sent: true, from: `${a.name}@${DOMAIN}`, remainingToday: 99n });
    const { mails } = await local.admin.listMail({ appId: a.id });
    const stored = (await store()).find((m) => m.messageId === mails[0].providerMessageId);
    expect(stored).toMatchObject({ subject: "Over gRPC", destination: { to: ["grpc@example.com"] } });
  });
});

describe("SES v2 request and refusals (SES stand-in)", () => {
  it("sends SendEmail with simple content, the app id as an email tag, and a SigV4 signature", async () => {
    fixture.set("accept");
    const a = await refusing.createApp();
    const res = await refusing.request("POST", "/v1/mail/send", {
      token: a.token,
      body: { to: "x@example.com", subject: "Tagged", text: "body" },
    });
    expect(res.status).toBe(200);
    expect(fixture.requests).toHaveLength(1);
    const req = fixture.requests[0];
    expect(req.url).toBe("/v2/email/outbound-emails");
    expect(req.headers.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDTESTTESTTEST\/\d{8}\/us-east-1\/ses\/aws4_request/,
    );
    expect(req.body).toEqual({
      FromEmailAddress: `${a.name}@${DOMAIN}`,
      Destination: { ToAddresses: ["x@example.com"] },
      Content: {
        Simple: { Subject: { Data: "Tagged", Charset: "UTF-8" }, Body: { Text: { Data: "body", Charset: "UTF-8" } } },
      },
      EmailTags: [{ Name: "app_id", Value: a.id }],
    });
    expect((await refusing.admin.listMail({ appId: a.id })).mails[0].providerMessageId).toBe("fixture-1");
  });

  // The last column: whether SES may have taken the message all the same, so that it stays counted.
  const refusals: [Answer, RegExp, number, boolean][] = [
    ["reject", /rejected this message; check the recipient address and the content/, 1, false],
    ["unverified", /does not accept this app's sender address yet; ask the platform operator/, 1, false],
    // Only throttling (SES took nothing) is tried again; after a 5xx or a dropped connection SES
    // may have taken the message, and sending it again could send it twice.
    ["throttle", /throttling sends; retry later/, 3, false],
    ["fail", /the mail provider failed; retry later/, 1, true],
    ["hang-up", /could not be reached or did not answer; retry later/, 1, true],
  ];
  for (const [answer, message, attempts, mayHaveLeft] of refusals) {
    it(`${answer}: 502 upstream_error with a helpful message, no provider internals, ${mayHaveLeft ? "counted (it may have left)" : "nothing consumed"}`, async () => {
      const a = await refusing.createApp();
      await refusing.admin.updateApp({ appId: a.id, limits: { mailPerDay: 1 } });
      fixture.set(answer);
      const res = await refusing.request("POST", "/v1/mail/send", {
        token: a.token,
        body: { to: "x@example.com", subject: "s", text: "t" },
      });
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe("upstream_error");
      expect(res.body.error.message).toMatch(message);
      expect(JSON.stringify(res.body)).not.toMatch(
        /123456789012|arn:|secret\.example|US-EAST-1|ip-10|Exception|MessageRejected/,
      );
      expect(fixture.requests).toHaveLength(attempts);

      // A refusal is logged as failed and leaves the whole allowance; a failure after which SES may have sent
      // the mail is logged as unconfirmed (an operator must not read it as not sent) and keeps it counted
      // (released, a cap of 1 could send 2).
      const { mails } = await refusing.admin.listMail({ appId: a.id });
      expect(mails).toHaveLength(1);
      expect(mails[0]).toMatchObject({
        status: mayHaveLeft ? MailStatus.UNCONFIRMED : MailStatus.FAILED,
        providerMessageId: "",
        subject: "s",
      });
      const unconfirmed = await refusing.admin.listMail({ appId: a.id, status: MailStatus.UNCONFIRMED });
      expect(unconfirmed.mails).toHaveLength(mayHaveLeft ? 1 : 0);
      expect(Number((await refusing.admin.getUsage({ appId: a.id })).mail!.used)).toBe(mayHaveLeft ? 1 : 0);
      fixture.set("accept");
      const next = await refusing.request("POST", "/v1/mail/send", {
        token: a.token,
        body: { to: "x@example.com", subject: "s", text: "t" },
      });
      if (mayHaveLeft) expect([next.status, next.body.error.code]).toEqual([429, "quota_exceeded"]);
      else expect([next.status, next.body.remainingToday]).toEqual([200, 0]);
    });
  }

  it("with an Idempotency-Key, a send SES failed or went silent on is answered once: a repeat is that 502 again, not a second mail", async () => {
    const a = await refusing.createApp();
    const send = (key: string) =>
      refusing.request("POST", "/v1/mail/send", {
        token: a.token,
        headers: { "idempotency-key": key },
        body: { to: "x@example.com", subject: "s", text: "t" },
      });
    // After a 5xx or a dropped connection SES may have taken the mail: the error is the key's answer.
    for (const answer of ["fail", "hang-up"] as const) {
      fixture.set(answer);
      const first = await send(`k-${answer}`);
      expect([first.status, first.body.error.code]).toEqual([502, "upstream_error"]);
      fixture.set("accept");
      const repeat = await send(`k-${answer}`);
      expect([repeat.status, repeat.body.error]).toEqual([502, first.body.error]);
      expect(repeat.headers.get("idempotent-replayed")).toBe("true");
      expect(fixture.requests, `${answer}: SES asked once`).toHaveLength(0);
    }
    // A refusal (4xx) says nothing was taken: the key is free again, and a repeat sends.
    fixture.set("reject");
    expect((await send("k-reject")).status).toBe(502);
    fixture.set("accept");
    const sent = await send("k-reject");
    expect([sent.status, sent.headers.get("idempotent-replayed")]).toEqual([200, null]);
    expect(fixture.requests).toHaveLength(1);
    // Over gRPC, the repeat is the same error.
    fixture.set("fail");
    const client = refusing.client(MailService, a.token, "grpc");
    const call = () =>
      client
        .sendMail({ to: "x@example.com", subject: "s", text: "t" }, { headers: { "idempotency-key": "k-grpc" } })
        .then(
          () => expect.unreachable("answered"),
          (e: unknown) => ConnectError.from(e),
        );
    const [one, two] = [await call(), await call()];
    expect([one.code, two.code]).toEqual([Code.Unavailable, Code.Unavailable]);
    expect(two.findDetails(ErrorDetailSchema)[0]?.code).toBe("upstream_error");
    expect(fixture.requests).toHaveLength(1);
  });

  it("an answer of 200 whose body cannot be read is a mail sent (SES took it), not a refusal to send again", async () => {
    const a = await refusing.createApp();
    fixture.set("cut-after-200");
    const res = await refusing.request("POST", "/v1/mail/send", {
      token: a.token,
      body: { to: "x@example.com", subject: "cut", text: "t" },
    });
    expect([res.status, res.body.sent]).toEqual([200, true]);
    expect(fixture.requests).toHaveLength(1);
    const { mails } = await refusing.admin.listMail({ appId: a.id });
    expect(mails[0]).toMatchObject({ status: MailStatus.SENT, providerMessageId: "", subject: "cut" });
    expect(Number((await refusing.admin.getUsage({ appId: a.id })).mail!.used)).toBe(1);
    fixture.set("accept");
  });

  it("SES never reached (nothing listens): nothing consumed, and a keyed repeat runs again", async () => {
    // A port nothing listens on.
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const unreachable = await startServer({
      env: {
        MAIL_PROVIDER: "ses",
        MAIL_DOMAIN: DOMAIN,
        AWS_REGION: "us-east-1",
        AWS_ENDPOINT_URL_SES: `http://127.0.0.1:${port}`,
      },
      database,
      openDatabase: local.server.deps.database,
    });
    try {
      const a = await unreachable.createApp();
      await unreachable.admin.updateApp({ appId: a.id, limits: { mailPerDay: 1 } });
      const send = () =>
        unreachable.request("POST", "/v1/mail/send", {
          token: a.token,
          headers: { "idempotency-key": "k-unreachable" },
          body: { to: "x@example.com", subject: "s", text: "t" },
        });
      const first = await send();
      expect([first.status, first.body.error.code]).toEqual([502, "upstream_error"]);
      expect(first.body.error.message).toMatch(/could not be reached/);
      expect(Number((await unreachable.admin.getUsage({ appId: a.id })).mail!.used)).toBe(0);
      // Not stored as the key's answer: the repeat is run (and fails again, SES still down), not replayed.
      const repeat = await send();
      expect([repeat.status, repeat.headers.get("idempotent-replayed")]).toEqual([502, null]);
      expect(Number((await unreachable.admin.getUsage({ appId: a.id })).mail!.used)).toBe(0);
    } finally {
      await unreachable.close();
    }
  });

  it("over gRPC a refusal is Unavailable with the upstream_error detail", async () => {
    const a = await refusing.createApp();
    fixture.set("reject");
    try {
      await refusing.client(MailService, a.token, "grpc").sendMail({ to: "x@example.com", subject: "s", text: "t" });
      expect.unreachable();
    } catch (err) {
      const e = err as ConnectError;
      expect(e.code).toBe(Code.Unavailable);
      expect(e.findDetails(ErrorDetailSchema)[0]?.code).toBe("upstream_error");
      expect(e.rawMessage).not.toMatch(/123456789012|US-EAST-1/);
    }
    expect(Number((await refusing.admin.getUsage({ appId: a.id })).mail!.used)).toBe(0);
  });
});
