/**
 * An applied migration's text never changes: a database migrated by one
 * version must be what the next version's migrations describe. This pins the
 * SHA-256 of every migration file, and refuses a migration that imports
 * another migration (editing the imported one would change both silently).
 * A new migration fails here until its checksum is added to `pinned`; the
 * failure message prints the exact line to add.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { migrations } from "../../src/core/database/migrations/index.ts";

const folder = path.resolve(import.meta.dirname, "../../src/core/database/migrations");

/** File name → SHA-256 of its text (line ends as LF). Append new migrations; never edit a line. */
const pinned = new Map<string, string>([
  ["0001-foundation.ts", "ec46b27245d592071a21fafc3c8fbdee5957d8ce04093fb4a9d6eda510d48e5c"],
  ["0002-queues.ts", "fd8fdc17a130ec99e6dca9efc2d14d0a68211f705dc09a7165fc0397f593ae4f"],
  ["0003-analytics.ts", "f6548d493a946690d5d6e965f47a34c55d44354f49b2d7d5b323c3671b9c9557"],
  ["0004-secrets.ts", "3721e4bd574209371924b410d77ddbf168d9de7ae889ec008add934067bdf330"],
  ["0005-mail.ts", "a473a851ad998578cb1d8b0756af13546da0078f498683bd434b4236636208c2"],
  ["0006-auth-changes.ts", "f3cbd45e84efbdcedcfeb53036be5fc9c900ebf0fcd4dbda615c6d43a0308aa1"],
  ["0007-token-last-used.ts", "1c5f850113b245d17c7c8505148d8c24ac23a034ffb8c91ba2f4a5a53b538641"],
  ["0008-platform-settings.ts", "46e0db0829d16adf9c6b9d57c37c0a256232a1b41098329757b31a5da85313cd"],
  ["0009-dead-letters.ts", "1e9c898e20a74cf96f8c99c84d7e008849371821b16d3c9312d665abc5d0570f"],
  ["0010-analytics-day-rollups.ts", "c7d6da4cae6b007be5578976d980d6f041117f3638734b084e4be656c4cd60f8"],
  ["0011-queue-controls.ts", "8efaeea529d4ded36de71db5c8e05d5c829ad7c24b79477e68733b8365cb10fc"],
  ["0012-queue-counts.ts", "0b5ff465acf91b710c1234d6b317e3dff99e3eeffbb77b65583e69bd2b785d82"],
  ["0014-event-feed.ts", "9f8064a4205d57fef94b92bd8c2e8c48e58e0bf13b8f7389b7c73df93bdea650"],
  ["0015-app-revision.ts", "8104b4acabc826987102df967baa49e5b3718dc5447c240d11c434bc1b1ab098"],
  ["0016-operators.ts", "e19e76a50578c3a5c0aaba5752c5047f0976677598391fcf199d13cc26e2e4d3"],
  ["0017-audit-log.ts", "da5b1db38492add028845dbaef07498463d063157a1c48488ee421b36bb14380"],
  ["0018-idempotency-keys.ts", "90c305bdea6fd00ce7398186ac948d15c6691eb303302bf8a19dfc76359a3d57"],
  ["0019-queue-activity.ts", "6dddb5569856927e65e5f59450d176b5a025d856d393988b0b5f4fb3253d1dc2"],
  ["0020-queue-depth.ts", "15cfc0d762f56147de36d63c8e3721d64db5050af7f429fad27a6581b9c9eecb"],
  ["0021-secret-version-floors.ts", "a3fa2bb3dfea9dcebdaef39816d7117466cb30adacf9e00fb56fd01a57996ea8"],
  ["0022-queue-claims.ts", "b7a066edb520651b6e628ead730a1f07b36d5add482c4d7acb832bc4cbccf56e"],
  ["0023-mail-unconfirmed.ts", "6664a8a937f44d352a6cafd1dd2f8b7ae5b4dd204c9d14bb0e9d1b81a57bd263"],
  ["0024-queue-depth-exclusive.ts", "b3ed107bdee84304737dd9e84a418f8f462ee7e095abab2db9913fa0b4c08ced"],
  ["0025-limit-exchange.ts", "7158493eba7b8b52e243bc1b1f7e06625c78d7cd02d7f031545e6e7c04c84525"],
  ["0026-quota-reservations.ts", "df84ffafb80a1220beff0dbf5b6579ee692344c859036bc81ab62d17fbc4039c"],
  ["0027-message-trace.ts", "6de68f7d2793ebd5230d08af6c7e4b5fe3e7e4e0005e99079d4e2ede34302182"],
  ["0028-overview-rollups.ts", "fffbf19cee074e8ca15452db0a3bce75b04dfd2bdd0bfc15ea1e6a5bdd1d1664"],
  ["0029-operator-sessions.ts", "e28045c51c6a822f1bb69472b4b805edc48d6c62cf961152495144b062c816b9"],
  ["0030-queue-jitter-and-reasons.ts", "051cc3613732258bd80b0a637dc7df8b6c8b061ead5ec7d09abed41f3f5e9f9d"],
  ["0031-queue-priorities.ts", "68cd3084c4c05899e6e565d1ae1d4f2015125f8b01565c2f97420b1ba1559849"],
  ["0032-analytics-identity.ts", "a3c4b32f1a16bfe0f7189f260b2fb1959ad0072c81a342582909aed6d2554775"],
  ["0033-queue-schedules.ts", "e52de8fb68902faf18752bd37707e154833d76c122f30e1a788a414bfc9d55e6"],
  ["0034-queue-rate-limits.ts", "b803ab7e9d4182c7850903c43a0111fe8bd974e828e0ce720fc88f5f49592c69"],
  ["0035-queue-groups.ts", "9e1315e67c6b5d4ecb83583a0b75ff2bc706a3f47777fb7099eaafb0db89b865"],
  ["0036-analytics-events-by-type.ts", "b6dd2aa6d1abaaa8ab85fea0fdb0e84cb14bc704a2439e9b36256a15da238650"],
  ["0037-analytics-events-one-index.ts", "f5d42a1be9c0d1f3c9e79559bae8b7b192e050ba2bd5e7302e75a397013c9f3c"],
  ["0038-queue-depth-within.ts", "4b5a4409b3e797c1cb5b37e6d81d7a1799a3e2b945f88f8ba387635127c382db"],
]);

const files = fs
  .readdirSync(folder)
  .filter((name) => /^\d{4}-.*\.ts$/.test(name))
  .sort();

function checksum(name: string): string {
  const text = fs.readFileSync(path.join(folder, name), "utf8").replaceAll("\r\n", "\n");
  return createHash("sha256").update(text).digest("hex");
}

describe("migration files", () => {
  it("are each listed in migrations/index.ts, and index.ts lists no other", () => {
    expect(Object.keys(migrations).map((name) => `${name}.ts`)).toEqual(files);
  });

  it("keep the text they were applied with (pinned by checksum)", () => {
    const problems: string[] = [];
    for (const name of files) {
      const actual = checksum(name);
      const expected = pinned.get(name);
      if (expected === undefined)
        problems.push(
          `${name} is not pinned: if it is a new migration, add this line at the end of \`pinned\` in ` +
            `test/core/migration-checksums.test.ts: ["${name}", "${actual}"],`,
        );
      else if (expected !== actual)
        problems.push(
          `${name} changed (checksum ${actual}, pinned ${expected}): an applied migration is never edited; ` +
            `put the change in a new migration instead (and restore this file with \`git checkout -- ${path.relative(path.resolve(folder, "../../../.."), path.join(folder, name))}\`)`,
        );
    }
    for (const name of pinned.keys())
      if (!files.includes(name)) problems.push(`${name} is pinned but gone: an applied migration is never removed`);
    expect(problems, problems.join("\n")).toEqual([]);
  });

  it("are self-contained: none imports another migration", () => {
    const importing = files.filter((name) =>
      /\bfrom\s+["']\.\.?\//.test(fs.readFileSync(path.join(folder, name), "utf8")),
    );
    expect(importing).toEqual([]);
  });
});
