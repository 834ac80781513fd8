/**
 * Read RPCs are marked `idempotency_level = NO_SIDE_EFFECTS`, so a Connect
 * client may call them with a (cacheable) GET: the generated client with
 * `useHttpGet: true` sends GET for exactly those and the server answers them.
 * A method that writes, or reads a secret's value, keeps POST only.
 */
import { fromJson } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel, ValueSchema } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { describe, expect, it } from "vitest";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

/**
 * A Connect transport (connect-web over the platform's `fetch`) that sends GET where the method
 * allows it, recording the HTTP method each call went out with.
 */
function getTransport(token: string, methods: string[]) {
  const recordingFetch: typeof fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : input);
    methods.push(`${init?.method ?? "GET"} ${url.pathname.split("/").pop()}`);
    return fetch(input, init);
  };
  return createConnectTransport({
    baseUrl: t.url,
    useHttpGet: true,
    fetch: recordingFetch,
    interceptors: [
      (next) => (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      },
    ],
  });
}

describe("read RPCs over GET", () => {
  it("QueueService reads go as GET and are answered", async () => {
    const methods: string[] = [];
    const queues = createClient(QueueService, getTransport(app.token, methods));
    await queues.putMessage({ queue: "jobs", payload: fromJson(ValueSchema, { n: 1 }) });
    const listed = await queues.listQueues({});
    expect(listed.queues.map((q) => q.name)).toContain("jobs");
    const policy = await queues.getQueuePolicy({ queue: "jobs" });
    expect(policy.policy).toBeDefined();
    const dead = await queues.listQueueDeadLetters({ queue: "jobs" });
    expect(dead.deadLetters).toEqual([]);
    expect(methods).toEqual(["POST PutMessage", "GET ListQueues", "GET GetQueuePolicy", "GET ListQueueDeadLetters"]);
  });

  it("AdminService reads go as GET and are answered", async () => {
    const methods: string[] = [];
    const admin = createClient(AdminService, getTransport(t.adminToken, methods));
    const got = await admin.getApp({ appId: app.id });
    expect(got.app?.name).toBe(app.name);
    const apps = await admin.listApps({});
    expect(apps.apps.map((a) => a.id)).toContain(app.id);
    await admin.whoAmI({});
    expect(methods).toEqual(["GET GetApp", "GET ListApps", "GET WhoAmI"]);
  });

  it("a raw GET in the Connect protocol's form is answered like the POST", async () => {
    await createClient(QueueService, getTransport(app.token, [])).putMessage({
      queue: "raw",
      payload: fromJson(ValueSchema, "x"),
    });
    const message = encodeURIComponent(JSON.stringify({}));
    const res = await fetch(
      `${t.url}/platform.queues.v1.QueueService/ListQueues?connect=v1&encoding=json&message=${message}`,
      { headers: { authorization: `Bearer ${app.token}` } },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect((await res.json()).queues.map((q: { name: string }) => q.name)).toContain("raw");
  });

  it("only reads are marked: GetSecret (a value) and every write keep POST", () => {
    const marked = (methods: readonly { name: string; idempotency: MethodOptions_IdempotencyLevel }[]) =>
      methods.filter((m) => m.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS).map((m) => m.name);
    expect(marked(SecretsService.methods)).toEqual(["ListSecrets"]);
    expect(marked(QueueService.methods)).toEqual([
      "ListQueues",
      "GetQueuePolicy",
      "ListQueueDeadLetters",
      "GetMessage",
      "ListQueueSchedules",
    ]);
    const admin = marked(AdminService.methods);
    for (const name of [
      "GetApp",
      "ListApps",
      "GetUsage",
      "ListMail",
      "GetMail",
      "WhoAmI",
      "ListAuditEntries",
      "ListQueues",
      "PeekMessages",
      "GetQueueActivity",
    ])
      expect(admin).toContain(name);
    for (const name of admin) expect(name).toMatch(/^(Get|List|WhoAmI|QueryAnalytics|PeekMessages)/);
  });
});
