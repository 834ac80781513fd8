/**
 * The Grafana dashboard (`deploy/grafana/platform-batteries.json`): it parses, has the form Grafana
 * imports (a uid, a schema version, panels placed on the 24-column grid, each query on the dashboard's
 * data source variable), and every metric its queries read is one a live server's /metrics exports
 * (the pools' only on PostgreSQL), so a renamed metric cannot leave a panel silently empty.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { useTestServer } from "../support/harness.ts";

const root = path.resolve(import.meta.dirname, "../..");
const FILE = path.join(root, "deploy/grafana/platform-batteries.json");

interface Panel {
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { uid: string };
  targets?: { expr: string; datasource: { uid: string } }[];
}
interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown }[] };
}

/** PromQL and Grafana words that are not metric names. */
const WORDS = new Set(
  "sum max min avg count rate irate increase histogram_quantile topk bottomk by without on ignoring group_left group_right and or unless bool offset le".split(
    " ",
  ),
);

/** The metric names an expression reads: identifiers outside label matchers, ranges, strings and `by (…)`. */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"[^"]*"/g, " ")
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without)\s*\([^)]*\)/g, " ")
    .replace(/\b\d+(\.\d+)?\b/g, " ");
  return [...new Set(bare.match(/[a-zA-Z_:][a-zA-Z0-9_:]*/g) ?? [])].filter((w) => !WORDS.has(w));
}

const dashboard = JSON.parse(fs.readFileSync(FILE, "utf8")) as Dashboard;
const queries = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, ...t })));

describe("deploy/grafana/platform-batteries.json", () => {
  const t = useTestServer();

  it("has the form Grafana imports, every query on the data source variable", () => {
    expect(dashboard.uid).toMatch(/^[a-z0-9-]{1,40}$/);
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(["datasource", "job"]);
    expect(queries.length).toBeGreaterThan(15);
    for (const panel of dashboard.panels) {
      const { x, w, h } = panel.gridPos;
      expect(x + w, panel.title).toBeLessThanOrEqual(24);
      expect(h, panel.title).toBeGreaterThan(0);
      if (panel.type === "row") continue;
      expect(panel.datasource?.uid, panel.title).toBe("${datasource}");
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
    }
    for (const q of queries) {
      expect(q.datasource.uid, q.panel).toBe("${datasource}");
      expect(q.expr, q.panel).toContain('job=~"$job"');
    }
  });

  it("reads only metrics the server exports, the per-app ones among them", async () => {
    expect((await t.request("GET", "/health")).status).toBe(200); // so http_requests_total has a sample
    const exported = new Map(
      ((await t.request("GET", "/metrics")).body as string)
        .split("\n")
        .filter((line) => line.startsWith("# TYPE "))
        .map((line) => [line.split(" ")[2], line.split(" ")[3]] as const),
    );
    const read = (name: string) => {
      // A histogram is read through its _bucket, _sum and _count series.
      const base = name.replace(/_(bucket|sum|count)$/, "");
      return exported.get(name) !== undefined || exported.get(base) === "histogram";
    };
    const used = [...new Set(queries.flatMap((q) => metricNames(q.expr)))];
    for (const name of ["app_queue_messages", "app_queue_oldest_waiting_seconds", "app_queue_dead_letters"]) {
      expect(used).toContain(name);
    }
    expect(used).toContain("app_quota_cap_used_ratio");
    expect(used).toContain("http_request_duration_seconds_bucket");
    for (const name of used) {
      if (name.startsWith("database_pool_") && t.server.deps.database.kind === "pglite") continue;
      expect(read(name), name).toBe(true);
    }
  });
});
