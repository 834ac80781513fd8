/** `MetaService`: the public liveness probe and version report. */
import { createRequire } from "node:module";
import type { ServiceImpl } from "@connectrpc/connect";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";

const pkg = createRequire(import.meta.url)("../../package.json") as { name: string; version: string };

export const packageInfo: Readonly<{ name: string; version: string }> = Object.freeze({
  name: pkg.name,
  version: pkg.version,
});

export function createMetaService(): ServiceImpl<typeof MetaService> {
  return {
    getHealth: () => ({ status: "ok" }),
    getVersion: () => ({ ...packageInfo }),
  };
}
