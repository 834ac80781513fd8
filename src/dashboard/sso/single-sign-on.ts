/**
 * The dashboard's single sign-on: the OpenID Connect authorization code flow
 * with PKCE (`openid-client`) against the platform's identity provider, and
 * the session cookie it ends in (docs/operators.md#single-sign-on).
 *
 * - `GET /dashboard/sso/login` starts a sign-in: a fresh state, nonce and PKCE
 *   verifier go into a short-lived flow cookie (HttpOnly, SameSite=Lax: it must
 *   come back on the provider's redirect, a navigation from another site), and
 *   the browser goes to the provider.
 * - `GET /dashboard/sso/callback` takes the provider's answer only with the
 *   state this browser started; openid-client checks the code with the PKCE
 *   verifier, the ID token's signature, issuer, audience and nonce. The
 *   identity (a verified e-mail or the subject) must be mapped to an operator
 *   (`OIDC_OPERATORS`); an unknown one gets a page saying so. A session is one
 *   random 256-bit value in an HttpOnly, SameSite=Strict cookie (Secure when
 *   the dashboard is served over https), stored only as its SHA-256.
 * - `POST /dashboard/sso/logout` ends the session, from the dashboard's own
 *   origin only.
 * - `GET /dashboard/sso/status` tells the dashboard whether to offer it and
 *   whether this browser is signed in.
 *
 * The session's role is the operator's at each call (`core/auth.ts`), so what a
 * signed-in browser may do follows the operator's role as it is now.
 */
import crypto from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import * as oidcClient from "openid-client";
import { parseCookie, stringifySetCookie } from "cookie";
import type { OidcConfig } from "../../core/config.ts";
import { OWNER, hashToken } from "../../core/auth.ts";
import type { AuditEntryInput } from "../../admin/index.ts";
import type { SessionStore } from "../../core/operators/session-store.ts";
import type { HousekeepingTask } from "../../core/housekeeping.ts";
import { HOUR_MS } from "../../core/time.ts";
import { PlatformError, toEnvelope } from "../../core/errors.ts";
import { registerSecurityHeaders, type CspDirectives } from "../../core/http/security-headers.ts";

/** How long a started sign-in may take at the provider. */
const FLOW_SECONDS = 600;

/** The cookies of single sign-on and the one origin the session's calls may come from. */
export interface SingleSignOnCookies {
  /** Whether the dashboard is served over https (the redirect URL's scheme): the cookies are then Secure. */
  secure: boolean;
  /** The session's cookie: `__Host-` prefixed when Secure (only this host, path `/`, never set over http). */
  sessionCookie: string;
  flowCookie: string;
  /** The dashboard's origin, from the redirect URL: the `Origin` a call with the session cookie must carry. */
  origin: string;
}

/** The operator `OIDC_OPERATORS` maps an identity to: by subject first, else by its verified e-mail. */
export function mappedOperator(
  oidc: OidcConfig,
  identity: { subject: string; email: string | null },
): string | undefined {
  return (
    oidc.operators.get(`sub:${identity.subject}`) ??
    (identity.email !== null ? oidc.operators.get(identity.email) : undefined)
  );
}

export function singleSignOnCookies(oidc: OidcConfig): SingleSignOnCookies {
  const redirect = new URL(oidc.redirectUrl);
  const secure = redirect.protocol === "https:";
  const prefix = secure ? "__Host-" : "";
  return {
    secure,
    sessionCookie: `${prefix}pb-session`,
    flowCookie: `${prefix}pb-sso-flow`,
    origin: redirect.origin,
  };
}

export interface SingleSignOnOptions {
  /** Undefined: single sign-on is off; only `status` is served (it says so). */
  oidc: OidcConfig | undefined;
  sessions: SessionStore;
  logger: Logger;
  /** Writes an audit entry (the admin facility's audit log): sign-ins and sign-outs are recorded there. */
  audit?: (entry: AuditEntryInput) => Promise<void>;
}

/** What the flow cookie holds between the redirect to the provider and its answer. */
interface Flow {
  state: string;
  nonce: string;
  verifier: string;
}

const PAGE_STYLE =
  "body{font:16px/1.5 system-ui,sans-serif;margin:0;display:grid;place-items:center;min-height:100vh;background:#f6f7f9;color:#1c2430}" +
  "main{max-width:34rem;margin:1rem;padding:2rem;background:#fff;border:1px solid #d8dde4;border-radius:8px}" +
  "h1{font-size:1.3rem;margin-top:0}code{background:#eef1f5;padding:0 .25rem;border-radius:3px}" +
  "@media (prefers-color-scheme:dark){body{background:#11161d;color:#e4e8ee}main{background:#1a212b;border-color:#2c3541}code{background:#2c3541}a{color:#8ab4f8}}";

/** The refusal pages: nothing but this one inline style (by its hash), no script, no form, no frame. */
const PAGE_CSP: CspDirectives = {
  "default-src": ["'none'"],
  "style-src": [`'sha256-${crypto.createHash("sha256").update(PAGE_STYLE).digest("base64")}'`],
  "base-uri": ["'none'"],
  "form-action": ["'none'"],
};

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] ?? c);

function page(reply: FastifyReply, status: number, title: string, paragraphs: string[]): FastifyReply {
  const body = paragraphs.map((p) => `<p>${p}</p>`).join("");
  return reply
    .code(status)
    .type("text/html; charset=utf-8")
    .send(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">` +
        `<title>${escapeHtml(title)} · Platform Batteries</title><style>${PAGE_STYLE}</style></head>` +
        `<body><main><h1>${escapeHtml(title)}</h1>${body}<p><a href="/dashboard/">Back to sign-in</a></p></main></body></html>`,
    );
}

const sameText = (a: string, b: string) => {
  const x = Buffer.from(hashToken(a));
  const y = Buffer.from(hashToken(b));
  return crypto.timingSafeEqual(x, y);
};

export async function registerSingleSignOn(fastify: FastifyInstance, options: SingleSignOnOptions): Promise<void> {
  const { oidc, sessions, logger, audit } = options;
  /** An audit entry for a session opened or ended; its loss is logged, never a reason to refuse the browser. */
  const auditSession = async (
    req: FastifyRequest,
    action: "operator.sign_in" | "operator.sign_out",
    operator: { operatorId: string | null; name: string },
    detail: Record<string, unknown>,
  ) => {
    if (!audit) return;
    try {
      await audit({
        operatorId: operator.operatorId ?? OWNER.id,
        operatorName: operator.name,
        action,
        requestId: String(req.id),
        outcome: "ok",
        detail: { via: "single sign-on", ...detail },
      });
    } catch (err) {
      logger.warn({ err: err instanceof Error ? err.message : String(err), action }, "audit entry lost");
    }
  };
  const cookies = oidc ? singleSignOnCookies(oidc) : undefined;
  // Read by the dashboard before it shows anything: whether to offer single sign-on, and whether this
  // browser is signed in (its cookie is HttpOnly: the page cannot tell). Another site cannot read the answer.
  fastify.get("/dashboard/sso/status", async (req, reply) => {
    void reply.header("cache-control", "no-store");
    const value = cookies && req.headers.cookie ? parseCookie(req.headers.cookie)[cookies.sessionCookie] : undefined;
    const found = value && oidc ? await sessions.lookup(hashToken(value)) : undefined;
    const signedIn = found !== undefined && oidc !== undefined && mappedOperator(oidc, found) === found.name;
    return { enabled: oidc !== undefined, signedIn };
  });
  if (!oidc || !cookies) return;
  const issuer = new URL(oidc.issuer);

  // The provider's metadata and keys, fetched at the first sign-in (a provider down at start does not stop
  // the service) and kept; a failed fetch is tried again at the next sign-in.
  let discovered: Promise<oidcClient.Configuration> | undefined;
  const configuration = () => {
    discovered ??= oidcClient
      .discovery(
        issuer,
        oidc.clientId,
        oidc.clientSecret,
        oidc.clientSecret === undefined ? oidcClient.None() : undefined,
        {
          timeout: 10,
          // http is accepted by the configuration only for a provider on this machine (config.ts).
          ...(issuer.protocol === "http:" ? { execute: [oidcClient.allowInsecureRequests] } : {}),
        },
      )
      .catch((err: unknown) => {
        discovered = undefined;
        throw err;
      });
    return discovered;
  };

  const setCookie = (
    reply: FastifyReply,
    name: string,
    value: string,
    maxAge: number,
    sameSite: "lax" | "strict",
  ): void => {
    void reply.header(
      "set-cookie",
      stringifySetCookie({ name, value, maxAge, path: "/", httpOnly: true, secure: cookies.secure, sameSite }),
    );
  };
  const cookieOf = (req: FastifyRequest, name: string): string | undefined =>
    req.headers.cookie ? parseCookie(req.headers.cookie)[name] : undefined;

  await fastify.register(async (scope) => {
    await registerSecurityHeaders(scope, PAGE_CSP);
    scope.addHook("onSend", async (_req, reply) => {
      void reply.header("cache-control", "no-store");
    });

    scope.get("/dashboard/sso/login", async (_req, reply) => {
      let config: oidcClient.Configuration;
      try {
        config = await configuration();
      } catch (err) {
        logger.warn(
          { reason: reasonOf(err), issuer: oidc.issuer },
          "single sign-on: the identity provider cannot be reached",
        );
        return page(reply, 503, "The identity provider cannot be reached", [
          `Its discovery document at <code>${escapeHtml(oidc.issuer)}</code> did not answer. Try again shortly, or sign in with a token.`,
        ]);
      }
      const flow: Flow = {
        state: oidcClient.randomState(),
        nonce: oidcClient.randomNonce(),
        verifier: oidcClient.randomPKCECodeVerifier(),
      };
      const url = oidcClient.buildAuthorizationUrl(config, {
        redirect_uri: oidc.redirectUrl,
        scope: oidc.scopes,
        code_challenge: await oidcClient.calculatePKCECodeChallenge(flow.verifier),
        code_challenge_method: "S256",
        state: flow.state,
        nonce: flow.nonce,
      });
      setCookie(
        reply,
        cookies.flowCookie,
        Buffer.from(JSON.stringify(flow)).toString("base64url"),
        FLOW_SECONDS,
        "lax",
      );
      return reply.redirect(url.href, 303);
    });

    scope.get("/dashboard/sso/callback", async (req, reply) => {
      // The flow is used once, whatever happens next.
      const flow = readFlow(cookieOf(req, cookies.flowCookie));
      setCookie(reply, cookies.flowCookie, "", 0, "lax");
      const query = req.query as Record<string, unknown>;
      if (typeof query.error === "string") {
        const description = typeof query.error_description === "string" ? `: ${query.error_description}` : "";
        return page(reply, 400, "The identity provider did not sign you in", [
          `It answered <code>${escapeHtml(query.error)}</code>${escapeHtml(description)}.`,
        ]);
      }
      if (!flow) {
        return page(reply, 400, "This sign-in was not started here", [
          "The sign-in was not started in this browser, or took longer than 10 minutes. Start it again from the sign-in screen.",
        ]);
      }
      if (typeof query.state !== "string" || !sameText(query.state, flow.state)) {
        logger.warn("single sign-on: a callback with a state this browser did not start was refused");
        return page(reply, 400, "Sign-in refused", [
          "The answer's state is not the one this browser started: a forged or replayed sign-in link. Nobody was signed in.",
        ]);
      }
      const current = new URL(oidc.redirectUrl);
      current.search = req.url.includes("?") ? req.url.slice(req.url.indexOf("?")) : "";
      let subject: string;
      let email: string | undefined;
      try {
        const config = await configuration();
        const tokens = await oidcClient.authorizationCodeGrant(config, current, {
          pkceCodeVerifier: flow.verifier,
          expectedState: flow.state,
          expectedNonce: flow.nonce,
          idTokenExpected: true,
        });
        const claims = tokens.claims();
        if (!claims) throw new Error("no ID token");
        subject = claims.sub;
        let source: Record<string, unknown> = claims;
        // A provider may keep the e-mail for the UserInfo endpoint (OpenID Connect Core 5.4).
        if (typeof claims.email !== "string" && !oidc.operators.has(`sub:${subject}`)) {
          source = await oidcClient.fetchUserInfo(config, tokens.access_token, subject);
        }
        // Only an address the provider verified names an operator: anyone can type an unverified one.
        if (typeof source.email === "string" && source.email_verified === true) email = source.email.toLowerCase();
      } catch (err) {
        // The reason only: an error's cause may hold the provider's answer (claims, codes).
        logger.warn({ reason: reasonOf(err) }, "single sign-on: the provider's answer was refused");
        return page(reply, 400, "Sign-in refused", [
          "The identity provider's answer could not be verified. Start the sign-in again.",
        ]);
      }
      const operatorName = mappedOperator(oidc, { subject, email: email ?? null });
      const who = escapeHtml(email ?? `subject ${subject}`);
      if (operatorName === undefined) {
        logger.warn({ subject }, "single sign-on: an identity no operator is mapped to was refused");
        return page(reply, 403, "Not an operator of this platform", [
          `You signed in at the identity provider as <code>${who}</code>, which is not one of this platform's operators.`,
          "An admin can map it to an operator in <code>OIDC_OPERATORS</code>. Meanwhile nothing here is open to you.",
        ]);
      }
      let operatorId: string | null = null;
      if (operatorName !== "owner") {
        const operator = await sessions.operatorByName(operatorName);
        if (!operator || operator.disabled) {
          logger.warn(
            { subject, operator: operatorName },
            "single sign-on: the mapped operator is missing or disabled",
          );
          return page(reply, 403, "Your operator account is not active", [
            `<code>${who}</code> is mapped to the operator <code>${escapeHtml(operatorName)}</code>, which ${operator ? "is disabled" : "does not exist"}. Ask an admin.`,
          ]);
        }
        operatorId = operator.id;
      }
      // A browser signing in again leaves no older session of its own behind.
      const previous = cookieOf(req, cookies.sessionCookie);
      if (previous) await sessions.delete(hashToken(previous));
      const value = crypto.randomBytes(32).toString("base64url");
      await sessions.create({
        hash: hashToken(value),
        operatorId,
        subject,
        email: email ?? null,
        expiresAt: new Date(Date.now() + oidc.sessionMinutes * 60_000),
      });
      logger.info({ operator: operatorName }, "single sign-on: operator signed in");
      await auditSession(
        req,
        "operator.sign_in",
        { operatorId, name: operatorName },
        { subject, email: email ?? null },
      );
      void reply.header(
        "set-cookie",
        stringifySetCookie({
          name: cookies.sessionCookie,
          value,
          maxAge: oidc.sessionMinutes * 60,
          path: "/",
          httpOnly: true,
          secure: cookies.secure,
          sameSite: "strict",
        }),
      );
      return reply.redirect("/dashboard/", 303);
    });

    scope.post("/dashboard/sso/logout", async (req, reply) => {
      // Only the dashboard's page may sign its browser out (no other site can end a session for a prank).
      if (req.headers.origin !== cookies.origin) {
        return reply
          .code(403)
          .send(
            toEnvelope(new PlatformError("permission_denied", "sign-out is accepted only from the dashboard's page")),
          );
      }
      const value = cookieOf(req, cookies.sessionCookie);
      if (value) {
        const ended = await sessions.lookup(hashToken(value));
        await sessions.delete(hashToken(value));
        if (ended) await auditSession(req, "operator.sign_out", ended, { subject: ended.subject, email: ended.email });
      }
      setCookie(reply, cookies.sessionCookie, "", 0, "strict");
      return reply.code(204).send();
    });
  });
}

function reasonOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" ? `${code}: ${err.message}` : err.message;
}

function readFlow(text: string | undefined): Flow | undefined {
  if (!text) return undefined;
  try {
    const flow = JSON.parse(Buffer.from(text, "base64url").toString("utf8")) as Partial<Flow>;
    return typeof flow.state === "string" && typeof flow.nonce === "string" && typeof flow.verifier === "string"
      ? { state: flow.state, nonce: flow.nonce, verifier: flow.verifier }
      : undefined;
  } catch {
    return undefined;
  }
}

/** Removes expired sessions hourly, a thousand at a time. */
export function sessionSweepTask(sessions: SessionStore): HousekeepingTask {
  return {
    name: "dashboard sessions",
    intervalMs: HOUR_MS,
    async run(signal) {
      let removed = 0;
      for (;;) {
        const n = await sessions.sweepExpired(1000);
        removed += n;
        if (n < 1000 || signal.aborted) return removed;
      }
    },
  };
}
