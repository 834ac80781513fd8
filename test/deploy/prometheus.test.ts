/**
 * The alerting rules (`deploy/prometheus/alerts.yaml`): `promtool check rules`
 * accepts them, `promtool test rules` runs alerts.test.yaml (each alert fires
 * on its series and stays quiet on its near miss), every alert has such a
 * case and a paragraph in docs/operations.md, and every metric the rules read
 * is one a live server's /metrics exports (the pools' only on PostgreSQL).
 * The promtool checks are skipped, saying why, only where promtool is not
 * installed (`.ci/run` installs Debian's prometheus package).
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { useTestServer } from "../support/harness.ts";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const DIR = path.join(root, "deploy/prometheus");
const PROMTOOL = ["/usr/bin/promtool", "/usr/local/bin/promtool"].find((p) => fs.existsSync(p));

interface Rule {
  alert: string;
  expr: string;
}
const rules = (parse(fs.readFileSync(path.join(DIR, "alerts.yaml"), "utf8")) as { groups: { rules: Rule[] }[] })
  .groups[0].rules;
const cases = parse(fs.readFileSync(path.join(DIR, "alerts.test.yaml"), "utf8")) as {
  tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
};

async function promtool(...args: string[]): Promise<{ code: number; output: string }> {
  return run(PROMTOOL!, args, { cwd: DIR }).then(
    ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
    (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, output: err.stdout + err.stderr }),
  );
}

/** PromQL words that are not metric names. */
const PROMQL = new Set(
  "sum max min avg count rate irate increase delta deriv avg_over_time max_over_time min_over_time by without on ignoring group_left group_right and or unless bool offset absent".split(
    " ",
  ),
);

/** The metric names an expression reads: identifiers outside label matchers, strings and durations. */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\((?:[a-z_, ]*)\)/g, (m) => (/^\((?:[a-z_]+, ?)*[a-z_]+\)$/.test(m) ? " " : m)); // by (job, pool)
  return [...new Set(bare.match(/[a-zA-Z_:][a-zA-Z0-9_:]*/g) ?? [])].filter((w) => !PROMQL.has(w));
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "pb-prometheus-"));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

describe.skipIf(!PROMTOOL)(
  `deploy/prometheus/alerts.yaml with promtool${PROMTOOL ? "" : " (skipped: promtool is not installed)"}`,
  () => {
    it("passes promtool check rules, which refuses a rule that does not parse", async () => {
      const checked = await promtool("check", "rules", "alerts.yaml");
      expect(checked.code, checked.output).toBe(0);
      expect(checked.output).toContain(`SUCCESS: ${rules.length} rules found`);

      const broken = path.join(scratch, "broken.yaml");
      fs.writeFileSync(broken, fs.readFileSync(path.join(DIR, "alerts.yaml"), "utf8").replace("> 900", "> > 900"));
      expect((await promtool("check", "rules", broken)).code).not.toBe(0);
    });

    it("passes promtool test rules: each alert fires on its series and not on its near miss", async () => {
      const tested = await promtool("test", "rules", "alerts.test.yaml");
      expect(tested.code, tested.output).toBe(0);
      expect(tested.output).toContain("SUCCESS");
    });
  },
);

describe("deploy/prometheus/alerts.yaml, against the server and the docs", () => {
  const t = useTestServer();

  it("has a firing case in alerts.test.yaml and a paragraph in docs/operations.md for every alert", () => {
    const firing = new Set(
      cases.tests.flatMap((c) => c.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname)),
    );
    const docs = fs.readFileSync(path.join(root, "docs/operations.md"), "utf8");
    for (const { alert } of rules) {
      expect(firing, alert).toContain(alert);
      expect(docs, alert).toContain(alert);
    }
  });

  it("reads only metrics the server exports", async () => {
    expect((await t.request("GET", "/health")).status).toBe(200); // so http_requests_total has a sample
    const exported = new Set(
      ((await t.request("GET", "/metrics")).body as string)
        .split("\n")
        .filter((line) => line.startsWith("# TYPE "))
        .map((line) => line.split(" ")[2]),
    );
    const used = rules.flatMap((r) => metricNames(r.expr));
    expect(used).toContain("queue_oldest_waiting_seconds"); // the names were found
    const postgresOnly = (name: string) => name.startsWith("database_pool_");
    for (const name of used) {
      if (name === "up") continue; // Prometheus's own, per scraped target
      if (postgresOnly(name) && t.server.deps.database.kind === "pglite") continue;
      expect(exported, name).toContain(name);
    }
  });
});
