/**
 * The single sign-on cookies follow the scheme the dashboard is served on
 * (src/dashboard/sso/single-sign-on.ts): over https they are Secure and
 * `__Host-` prefixed (the browser then keeps them to this host and path `/`,
 * and refuses them over http); over http (local use) they are neither, or the
 * browser would drop them.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/core/config.ts";
import { singleSignOnCookies } from "../../src/dashboard/sso/single-sign-on.ts";

const env = {
  OIDC_ISSUER: "https://id.example.com",
  OIDC_CLIENT_ID: "dashboard",
  OIDC_OPERATORS: "a@example.com=alice",
};

describe("single sign-on cookies", () => {
  it("are Secure and __Host- prefixed when the dashboard is served over https", () => {
    const cookies = singleSignOnCookies(loadConfig({ ...env, PUBLIC_URL: "https://ops.example.com" }).oidc!);
    expect(cookies).toEqual({
      secure: true,
      sessionCookie: "__Host-pb-session",
      flowCookie: "__Host-pb-sso-flow",
      origin: "https://ops.example.com",
    });
  });

  it("are plain over http, and calls must come from the redirect URL's origin", () => {
    const cookies = singleSignOnCookies(
      loadConfig({
        ...env,
        PUBLIC_URL: "https://ignored.example.com",
        OIDC_REDIRECT_URL: "http://127.0.0.1:8080/dashboard/sso/callback",
      }).oidc!,
    );
    expect(cookies).toEqual({
      secure: false,
      sessionCookie: "pb-session",
      flowCookie: "pb-sso-flow",
      origin: "http://127.0.0.1:8080",
    });
  });
});
