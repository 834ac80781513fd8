/**
 * The dashboard's single sign-on settings (`OIDC_*`, src/core/config.ts): off
 * unless `OIDC_ISSUER` is set; then a client id and at least one mapped
 * identity are needed, an `http:` issuer only on this machine, the secret may
 * come from a file, and the redirect URL follows `PUBLIC_URL`.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/core/config.ts";

const base = {
  OIDC_ISSUER: "https://id.example.com",
  OIDC_CLIENT_ID: "dashboard",
  OIDC_OPERATORS: "a@example.com=alice",
};

function refusal(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error("accepted");
}

describe("OIDC_* settings", () => {
  it("are off without OIDC_ISSUER", () => {
    expect(loadConfig({}).oidc).toBeUndefined();
  });

  it("map e-mails (case-insensitively) and subjects to operators, with the defaults", () => {
    const oidc = loadConfig({
      ...base,
      PUBLIC_URL: "https://ops.example.com/",
      OIDC_OPERATORS: " Alice@Example.com = alice , sub:248289761001=vera,root@example.com=owner",
    }).oidc!;
    expect([...oidc.operators]).toEqual([
      ["alice@example.com", "alice"],
      ["sub:248289761001", "vera"],
      ["root@example.com", "owner"],
    ]);
    expect(oidc.redirectUrl).toBe("https://ops.example.com/dashboard/sso/callback");
    expect(oidc.scopes).toBe("openid email");
    expect(oidc.sessionMinutes).toBe(480);
    expect(oidc.clientSecret).toBeUndefined();
    expect(loadConfig({ ...base, OIDC_REDIRECT_URL: "https://x.example.com/cb" }).oidc!.redirectUrl).toBe(
      "https://x.example.com/cb",
    );
  });

  it("refuse what could not work, naming the variable", () => {
    expect(refusal({ ...base, OIDC_CLIENT_ID: "" }).variable).toBe("OIDC_CLIENT_ID");
    expect(refusal({ ...base, OIDC_OPERATORS: "" }).variable).toBe("OIDC_OPERATORS");
    expect(refusal({ ...base, OIDC_OPERATORS: "alice" }).variable).toBe("OIDC_OPERATORS");
    expect(refusal({ ...base, OIDC_OPERATORS: "not-an-email=alice" }).variable).toBe("OIDC_OPERATORS");
    expect(refusal({ ...base, OIDC_SCOPES: "email" }).variable).toBe("OIDC_SCOPES");
    expect(refusal({ ...base, OIDC_SESSION_MINUTES: "0" }).variable).toBe("OIDC_SESSION_MINUTES");
    expect(refusal({ ...base, OIDC_ISSUER: "http://id.example.com" }).message).toBe(
      "OIDC_ISSUER: must be https (http only for a provider on localhost)",
    );
    expect(loadConfig({ ...base, OIDC_ISSUER: "http://localhost:9000" }).oidc!.issuer).toBe("http://localhost:9000");
    expect(loadConfig({ ...base, OIDC_ISSUER: "http://127.0.0.1:9000/realm" }).oidc).toBeDefined();
  });

  it("take the client secret from OIDC_CLIENT_SECRET_FILE", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pb-oidc-config-"));
    try {
      const file = path.join(dir, "secret");
      fs.writeFileSync(file, "s3cret-value\n");
      expect(loadConfig({ ...base, OIDC_CLIENT_SECRET_FILE: file }).oidc!.clientSecret).toBe("s3cret-value");
      expect(refusal({ ...base, OIDC_CLIENT_SECRET: "x", OIDC_CLIENT_SECRET_FILE: file }).variable).toBe(
        "OIDC_CLIENT_SECRET_FILE",
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
