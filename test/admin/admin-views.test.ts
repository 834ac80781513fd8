/**
 * The server side of the operator's screens (apps, mail, secrets, overview and queues), over
 * Connect against the real server: ListApps with paging, sorting and a
 * filter (1,000 apps), ListMail search and pages with GetMail's raw message,
 * secret links listed and revoked, and GetOverview reacting to a dead
 * letter, a cap reached, a stopped app and a link about to expire.
 */
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { AppStatus, MailStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { useTestServer } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer({ env: { MAIL_DOMAIN: "apps.example.net" } });

describe("ListApps paging", () => {
  it("pages 1,000 apps by name, filters case-insensitively by name and status, sorts by created_at", async () => {
    const db = tables(t.server.deps.db);
    await db
      .insertInto("apps")
      .values(
        Array.from({ length: 1000 }, (_, i) => ({
          name: `bulk-${String(i).padStart(4, "0")}`,
          status: i % 10 === 0 ? ("stopped" as const) : ("running" as const),
          mail_from: "",
          limits: "{}",
          created_at: new Date(Date.UTC(2026, 0, 1) + i * 1000),
        })),
      )
      .execute();

    const seen: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const page = await t.admin.listApps({ pageSize: 300, pageToken, filter: "BULK-" });
      expect(page.totalSize).toBe(1000);
      expect(page.apps.length).toBeLessThanOrEqual(300);
      seen.push(...page.apps.map((a) => a.name));
      pageToken = page.nextPageToken;
      pages++;
    } while (pageToken);
    expect(pages).toBe(4);
    expect(seen).toHaveLength(1000);
    expect(new Set(seen).size).toBe(1000);
    expect(seen).toEqual([...seen].sort());

    const stopped = await t.admin.listApps({ pageSize: 5, filter: "bulk", status: AppStatus.STOPPED });
    expect(stopped.totalSize).toBe(100);
    expect(stopped.apps.every((a) => a.status === AppStatus.STOPPED)).toBe(true);

    const newest = await t.admin.listApps({ pageSize: 2, filter: "bulk-", orderBy: "-created_at" });
    expect(newest.apps.map((a) => a.name)).toEqual(["bulk-0999", "bulk-0998"]);
    const byName = await t.admin.listApps({ pageSize: 1, filter: "bulk-", orderBy: "-name" });
    expect(byName.apps[0].name).toBe("bulk-0999");

    // Without a page size, every app, as before paging existed.
    const everything = await t.admin.listApps({});
    expect(everything.apps.length).toBeGreaterThanOrEqual(1000);
    expect(everything.nextPageToken).toBe("");

    // A filter matching nothing, and a % that is matched literally.
    expect((await t.admin.listApps({ pageSize: 10, filter: "%" })).totalSize).toBe(0);
    await expect(t.admin.listApps({ pageSize: 10, orderBy: "size" })).rejects.toThrow(/order_by: must be one of/);
    await expect(t.admin.listApps({ pageSize: 10, pageToken: "nonsense" })).rejects.toThrow(/page_token/);
  });

  it("a page starts right after the previous page's last app, whatever was deleted or created meanwhile", async () => {
    const names = Array.from({ length: 7 }, (_, i) => `shift-${i}`);
    const ids = new Map<string, string>();
    for (const name of names) ids.set(name, (await t.admin.createApp({ name })).app!.id);
    const first = await t.admin.listApps({ pageSize: 3, filter: "shift-" });
    expect(first.apps.map((a) => a.name)).toEqual(["shift-0", "shift-1", "shift-2"]);
    // Deleted from the first page: an offset would now start at shift-4 and never show shift-3.
    await t.admin.deleteApp({ appId: ids.get("shift-1")! });
    const second = await t.admin.listApps({ pageSize: 3, filter: "shift-", pageToken: first.nextPageToken });
    expect(second.apps.map((a) => a.name)).toEqual(["shift-3", "shift-4", "shift-5"]);
    expect(second.totalSize).toBe(6);

    // Newest first: an app created meanwhile sorts before the page read, and shows nothing twice.
    const newestPage = (pageSize: number, pageToken = "") =>
      t.admin.listApps({ pageSize, filter: "shift-", orderBy: "-created_at", pageToken });
    const newest = await newestPage(2);
    expect(newest.apps.map((a) => a.name)).toEqual(["shift-6", "shift-5"]);
    await t.admin.createApp({ name: "shift-7" });
    const next = await newestPage(2, newest.nextPageToken);
    expect(next.apps.map((a) => a.name)).toEqual(["shift-4", "shift-3"]);
    // The last page says so; a token of one order is refused for another.
    const rest = await newestPage(5, next.nextPageToken);
    expect(rest.apps.map((a) => a.name)).toEqual(["shift-2", "shift-0"]);
    expect(rest.nextPageToken).toBe("");
    await expect(
      t.admin.listApps({ pageSize: 2, filter: "shift-", orderBy: "name", pageToken: newest.nextPageToken }),
    ).rejects.toThrow(/page_token: was made for another order_by/);
  });
});

describe("ListMail search and GetMail", () => {
  it("searches recipient and subject, filters by status, pages newest first; GetMail gives raw and headers", async () => {
    const app = await t.createApp("mailer");
    for (let i = 0; i < 7; i++) {
      const res = await t.request("POST", "/v1/mail/send", {
        token: app.token,
        body: {
          to: i % 2 ? `ops${i}@Example.com` : `user${i}@other.net`,
          subject: `Invoice ${i}`,
          text: `line 1\nline ${i}`,
        },
      });
      expect(res.status).toBe(200);
    }
    const ops = await t.admin.listMail({ appId: app.id, query: "EXAMPLE.COM" });
    expect(ops.mails.map((m) => m.to)).toEqual(["ops5@Example.com", "ops3@Example.com", "ops1@Example.com"]);
    expect((await t.admin.listMail({ appId: app.id, query: "invoice 4" })).mails.map((m) => m.subject)).toEqual([
      "Invoice 4",
    ]);
    expect((await t.admin.listMail({ appId: app.id, status: MailStatus.FAILED })).mails).toEqual([]);
    expect((await t.admin.listMail({ appId: app.id, status: MailStatus.STORED })).mails).toHaveLength(7);

    const first = await t.admin.listMail({ appId: app.id, limit: 3 });
    const second = await t.admin.listMail({ appId: app.id, limit: 3, pageToken: first.nextPageToken });
    const third = await t.admin.listMail({ appId: app.id, limit: 3, pageToken: second.nextPageToken });
    expect([...first.mails, ...second.mails, ...third.mails].map((m) => m.subject)).toEqual(
      [6, 5, 4, 3, 2, 1, 0].map((i) => `Invoice ${i}`),
    );
    expect(third.nextPageToken).toBe("");

    const got = await t.admin.getMail({ appId: app.id, mailId: first.mails[0].id });
    expect(got.mail?.subject).toBe("Invoice 6");
    expect(got.headers.map(({ name, value }) => ({ name, value }))).toEqual(
      expect.arrayContaining([
        { name: "To", value: "user6@other.net" },
        { name: "From", value: "mailer@apps.example.net" },
        { name: "Subject", value: "Invoice 6" },
      ]),
    );
    expect(got.raw).toContain("Subject: Invoice 6\r\n");
    expect(got.raw.endsWith("\r\n\r\nline 1\r\nline 6")).toBe(true);
  });
});

describe("secret links and the overview", () => {
  it("lists and revokes outstanding links; the overview shows dead letters, caps, stopped apps and expiring links", async () => {
    const app = await t.createApp("watched");
    await t.admin.updateApp({ appId: app.id, limits: { mailPerDay: 1, linkTtlSeconds: 600 } });
    await t.admin.addSecretNames({ appId: app.id, names: ["KEY"] });
    const link = await t.admin.createSecretLink({ appId: app.id, name: "KEY" });
    const { links } = await t.admin.listSecretLinks({ appId: app.id });
    expect(links).toHaveLength(1);
    expect(links[0]).toMatchObject({ name: "KEY" });
    expect(JSON.stringify(links[0].id)).not.toContain(new URL(link.url).pathname.split("/").pop()!);

    const res = await t.request("POST", "/v1/mail/send", {
      token: app.token,
      body: { to: "a@example.com", subject: "s", text: "t" },
    });
    expect(res.status).toBe(200);
    await tables(t.server.deps.db)
      .insertInto("queue_dead_letters")
      .values({
        id: "00000000-0000-4000-8000-000000000001",
        app_id: app.id,
        queue: "jobs",
        payload: "{}",
        enqueued_at: new Date(),
        deliveries: 3,
        expires_at: sql`now() + interval '1 day'`,
      } as never)
      .execute();
    const stopped = await t.createApp("resting");
    await stopped.stop();

    const overview = await t.admin.getOverview({});
    expect(overview.uptimeSeconds).toBeGreaterThanOrEqual(0n);
    expect(overview.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(overview.readiness.find((r) => r.name === "database")).toMatchObject({ ok: true, detail: "ok" });
    const mine = overview.attention.filter((a) => a.appId === app.id || a.appId === stopped.id);
    expect(mine.map((a) => `${a.kind}:${a.appName}:${a.subject}`).sort()).toEqual([
      "app_stopped:resting:",
      "cap_reached:watched:mail",
      "dead_letters:watched:jobs",
      "link_expiring:watched:KEY",
    ]);

    const linkPage = new URL(new URL(link.url).pathname, t.url);
    expect((await fetch(linkPage)).status).toBe(200);
    await t.admin.revokeSecretLink({ appId: app.id, linkId: links[0].id });
    expect((await t.admin.listSecretLinks({ appId: app.id })).links).toEqual([]);
    // The revoked link no longer opens its page.
    expect((await fetch(linkPage)).status).toBe(404);
    await expect(t.admin.revokeSecretLink({ appId: app.id, linkId: links[0].id })).rejects.toThrow(
      /no outstanding link/,
    );
    const after = await t.admin.getOverview({});
    expect(after.attention.some((a) => a.kind === "link_expiring" && a.appId === app.id)).toBe(false);
  });
});
