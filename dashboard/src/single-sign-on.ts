/**
 * Single sign-on as the dashboard sees it. The server keeps the session in an
 * HttpOnly cookie this page cannot read: a tab signed in that way holds no
 * token, and its Connect calls carry the cookie (same origin) instead of a
 * bearer header. Sign-in is a navigation to the server, which sends the
 * browser to the identity provider and back.
 */
export const SSO_LOGIN_PATH = "/dashboard/sso/login";

/**
 * Whether the server offers single sign-on (OIDC_ISSUER is set), and whether this browser holds a live
 * session: asked of the server, which reads the cookie the page cannot (and which answers without an error
 * either way, so a tab signed out logs no refused call).
 */
export async function singleSignOnStatus(): Promise<{ enabled: boolean; signedIn: boolean }> {
  try {
    const res = await fetch("/dashboard/sso/status", { cache: "no-store" });
    if (!res.ok) return { enabled: false, signedIn: false };
    const body = (await res.json()) as { enabled?: unknown; signedIn?: unknown };
    return { enabled: body.enabled === true, signedIn: body.signedIn === true };
  } catch {
    return { enabled: false, signedIn: false };
  }
}

/** Ends this browser's session on the server (its cookie is then cleared). */
export async function signOutOfSingleSignOn(): Promise<void> {
  await fetch("/dashboard/sso/logout", { method: "POST", cache: "no-store" });
}
