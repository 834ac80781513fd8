/**
 * Who is calling, decided once per request by one function used by both the
 * REST routes and the Connect interceptor, so the rules are written once:
 *
 * - MetaService (and gRPC reflection) is public.
 * - AdminService takes only an operator's token: the bootstrap admin token
 *   (the built-in operator "owner", role admin) or a named operator's `pbo_`
 *   token (migration 0016); what a role may do is the admin API's rule.
 * - Every facility takes only a service token; a stopped app gets 403
 *   `app_stopped` on every operation except three reads that neither change
 *   state nor spend allowance (`OPEN_WHEN_STOPPED`, docs/api.md#authentication).
 *
 * - A dashboard signed in through single sign-on calls AdminService with its
 *   session cookie instead of a token (no Authorization header): accepted
 *   only from the dashboard's own origin (the `Origin` header), so another
 *   site cannot make a signed-in browser change anything (docs/operators.md).
 *
 * Service tokens are `pbt_` + 256 random bits (base64url) and are stored only
 * as their SHA-256; the admin token is compared in constant time.
 */
import crypto from "node:crypto";
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { DescMethod } from "@bufbuild/protobuf";
import { PlatformError } from "./errors.ts";
import { appFromRow, type AppRecord } from "./apps/apps.ts";
import { createAppStore, type AppStore, type TokenRow } from "./apps/app-store.ts";
import { createBatcher } from "./batcher.ts";
import { createRefreshingCache } from "./refreshing-cache.ts";
import type { Db } from "./database/index.ts";
import { createOperatorStore, type OperatorRole } from "./operators/operator-store.ts";
import { createSessionStore, type SessionStore } from "./operators/session-store.ts";
import { parseCookie } from "cookie";

/** The operator calling the admin API. */
export interface OperatorIdentity {
  /** "owner" for the bootstrap admin token, else the operator's UUID. */
  id: string;
  name: string;
  role: OperatorRole;
}

/** The bootstrap `ADMIN_TOKEN`'s operator: not a row, always an admin. */
export const OWNER: Readonly<OperatorIdentity> = Object.freeze({ id: "owner", name: "owner", role: "admin" });

export type Principal =
  { kind: "public" } | { kind: "admin"; operator: OperatorIdentity } | { kind: "app"; app: AppRecord; tokenId: string };

/** Where the Connect interceptor and the REST routes leave the caller for the implementations. */
export const principalKey = createContextKey<Principal>({ kind: "public" }, { description: "principal" });

/**
 * The principal the call's head was authenticated as, before its body was read (`registerConnectRoutes`'
 * `authenticate`): the interceptor takes it rather than authenticating the call a second time, as the REST
 * routes do (a call that lasts still asks again before each claim, `reauthenticateKey`).
 */
export const headPrincipalKey = createContextKey<Principal | undefined>(undefined, {
  description: "principal authenticated at the call's head",
});

/**
 * Authenticates the call's credentials once more, as a new request would be:
 * a call that lasts (a stream, a waiting consume) asks before each claim, so a
 * stopped app, a revoked token or a deleted app ends it (the authenticator's
 * cache is cleared on every instance when one of these changes).
 */
export const reauthenticateKey = createContextKey<(() => Promise<Principal>) | undefined>(undefined, {
  description: "reauthenticate",
});

/** The id of the HTTP request carrying a Connect call (as in its log line and `x-request-id`), for the audit log. */
export const requestIdKey = createContextKey<string>("", { description: "request id" });

const PUBLIC_SERVICES = new Set([
  "platform.meta.v1.MetaService",
  "grpc.reflection.v1.ServerReflection",
  "grpc.reflection.v1alpha.ServerReflection",
  "grpc.health.v1.Health",
]);
const ADMIN_SERVICE = "platform.admin.v1.AdminService";

/**
 * Operations a stopped app may still call (docs/api.md#authentication): the
 * reads that neither change state nor spend allowance. Embed is not one of
 * them: a stopped app should not spend its allowance.
 */
const OPEN_WHEN_STOPPED: ReadonlySet<string> = new Set([
  "platform.analytics.v1.AnalyticsService/ListEventTypes",
  "platform.analytics.v1.AnalyticsService/QueryEvents",
  "platform.inference.v1.InferenceService/ListModels",
]);

const SERVICE_TOKEN_PREFIX = "pbt_";
const OPERATOR_TOKEN_PREFIX = "pbo_";

export function generateServiceToken(): string {
  return SERVICE_TOKEN_PREFIX + crypto.randomBytes(32).toString("base64url");
}

export function generateOperatorToken(): string {
  return OPERATOR_TOKEN_PREFIX + crypto.randomBytes(32).toString("base64url");
}

export function hashToken(token: string): string {
  // Every authenticated call hashes its token: the one-shot form costs half of createHash().update().digest().
  return crypto.hash("sha256", token, "hex");
}

/** What a browser sends besides a token: its cookies and the origin of the page that made the call. */
interface BrowserCredentials {
  cookie?: string | null;
  origin?: string | null;
}

/** Where the dashboard's single sign-on sessions are found: the cookie's name and the one origin allowed to use it. */
interface SessionCookies {
  cookieName: string;
  origin: string;
  /** The session store; default one on the authenticator's `db`. */
  store?: SessionStore;
  /**
   * The operator an identity is mapped to now (`OIDC_OPERATORS`): a session whose identity is no longer
   * mapped to its operator (the mapping removed or changed, and the service restarted) ends.
   */
  operatorOf: (identity: { subject: string; email: string | null }) => string | undefined;
}

export interface Authenticator {
  authenticate(
    authorization: string | null | undefined,
    method: DescMethod,
    browser?: BrowserCredentials,
  ): Promise<Principal>;
  /**
   * The caller, when it is known without waiting: a public service, or a service token remembered (and
   * its app allowed to call `method`). Undefined otherwise, for `authenticate` to decide (a lookup, an
   * operator, a refusal and its error). Why: most requests are a remembered token, and the promises of
   * `authenticate` were a measurable part of a light request's cost (docs/benchmarks.md).
   */
  authenticateNow?(authorization: string | null | undefined, method: DescMethod): Principal | undefined;
  /** Forgets every remembered token; called whenever apps or tokens change. */
  invalidate(): void;
}

/** Where the database announces that an app or a token changed (a trigger, see migration 0006). */
export const AUTH_CHANGED_CHANNEL = "pb_auth_changed";

function bearer(authorization: string | null | undefined): string | undefined {
  if (!authorization) return undefined;
  const match = /^Bearer[ ]+([^\s]+)\s*$/i.exec(authorization);
  return match?.[1];
}

const unauthenticated = () =>
  new PlatformError("unauthenticated", "missing or invalid token", {
    details: ["send Authorization: Bearer <token>"],
  });

/**
 * Token lookups of concurrent requests share one query (through the shared
 * batcher): a lookup goes at once when none is running; those that arrive
 * while one runs go together in the next, as `token_hash = ANY(...)`.
 * Nothing is cached here: every lookup reads the database after its request
 * arrived, so without the cache below a revoked token or a stopped app is
 * refused by the very next request; under load it saves a round trip per
 * request. One query at a time: fewer, larger queries cost the database and
 * this process less than more, smaller ones (measured), and a lookup waits at
 * most for the one running.
 */
function createTokenLookup(apps: AppStore): (hash: string) => Promise<TokenRow | undefined> {
  const batcher = createBatcher<string, TokenRow | undefined>({
    maxBatch: 256,
    maxInFlight: 1,
    async run(_key, hashes) {
      const rows = await apps.lookupTokens([...new Set(hashes)]);
      const byHash = new Map(rows.map((r) => [r.token_hash, r]));
      return hashes.map((hash) => byHash.get(hash));
    },
  });
  return (hash) => batcher.call("", hash);
}

export interface AuthenticatorOptions {
  db: Db;
  /** The app store to read tokens through; default one on `db`. */
  apps?: AppStore;
  adminToken: string;
  /**
   * How long a found token (with its app's status, flags and limits) is
   * remembered. Every change to apps or tokens clears the memory at once: on
   * this instance synchronously (`invalidate()` from the admin API) and on
   * every other through `AUTH_CHANGED_CHANNEL`. The lifetime only bounds how
   * stale an entry can get if a notification is lost. 0 turns it off.
   */
  cacheMs?: number;
  clock?: () => number;
  /** Told of every token found in the database (not of remembered ones): the coarse last-use mark. */
  onTokenLookedUp?: (tokenId: string) => void;
  /** The same for operator tokens. */
  onOperatorTokenLookedUp?: (tokenId: string) => void;
  /**
   * Services anyone may call, beyond meta, reflection and health: only the test-only services a
   * test server adds (the Connect conformance suite's, whose reference client sends no token).
   */
  publicServices?: readonly string[];
  /** The dashboard's single sign-on sessions; undefined when single sign-on is off (no cookie is read). */
  sessions?: SessionCookies;
}

export function createAuthenticator(options: AuthenticatorOptions): Authenticator {
  const lookup = createTokenLookup(options.apps ?? createAppStore(options.db));
  const operators = createOperatorStore(options.db);
  const cacheMs = options.cacheMs ?? 2000;
  const clock = options.clock ?? Date.now;
  const publicServices = new Set([...PUBLIC_SERVICES, ...(options.publicServices ?? [])]);
  // The app's record is made once per lookup, not per request: a busy app's requests share it (it is read,
  // never changed, downstream). Only found tokens are remembered (an unknown one is looked up every time, and a
  // background lookup that no longer finds one forgets it at once); both `authenticate` and `authenticateNow`
  // read through here.
  const tokens = createRefreshingCache<{ row: TokenRow; app: AppRecord } | undefined>({
    lifetimeMs: cacheMs,
    clock,
    keeps: (found) => found !== undefined,
    async read(hash) {
      const row = await lookup(hash);
      if (!row) return undefined;
      options.onTokenLookedUp?.(row.token_id);
      return { row, app: appFromRow(row) };
    },
  });
  const operatorTokens = createRefreshingCache<OperatorIdentity | undefined>({
    lifetimeMs: cacheMs,
    clock,
    keeps: (identity) => identity !== undefined,
    async read(hash) {
      const row = await operators.lookupToken(hash);
      if (!row) return undefined;
      options.onOperatorTokenLookedUp?.(row.tokenId);
      return { id: row.operatorId, name: row.name, role: row.role };
    },
  });
  // Sessions are not remembered: a sign-out ends one at the next call, on every instance, and the
  // dashboard's few calls cost one indexed read each.
  const sessions = options.sessions;
  const sessionStore = sessions ? (sessions.store ?? createSessionStore(options.db)) : undefined;
  const findSession = async (browser: BrowserCredentials | undefined): Promise<OperatorIdentity | undefined> => {
    if (!sessions || !sessionStore || !browser?.cookie) return undefined;
    const value = parseCookie(browser.cookie)[sessions.cookieName];
    if (!value) return undefined;
    // SameSite=Strict keeps the cookie off other sites' requests; the origin check holds even where a
    // browser sends it anyway (an old browser, a sibling site): a cookie call comes from the dashboard's page.
    if (browser.origin !== sessions.origin) {
      throw new PlatformError(
        "permission_denied",
        "a call signed in by the dashboard's cookie must come from its page",
        {
          details: [`the Origin header must be ${sessions.origin}; scripts and the CLI send a token instead`],
        },
      );
    }
    const found = await sessionStore.lookup(hashToken(value));
    if (!found || sessions.operatorOf(found) !== found.name) {
      throw new PlatformError("unauthenticated", "the dashboard session expired or was signed out", {
        details: ["sign in again"],
      });
    }
    return { id: found.operatorId ?? OWNER.id, name: found.name, role: found.role };
  };
  // Compared as hashes: equal lengths for timingSafeEqual, whatever was sent.
  const adminHash = Buffer.from(hashToken(options.adminToken));
  const isAdminToken = (token: string) => crypto.timingSafeEqual(Buffer.from(hashToken(token)), adminHash);

  return {
    async authenticate(authorization, method, browser) {
      const serviceName = method.parent.typeName;
      if (publicServices.has(serviceName)) return { kind: "public" };
      const token = bearer(authorization);
      if (token === undefined) {
        const operator = serviceName === ADMIN_SERVICE ? await findSession(browser) : undefined;
        if (operator) return { kind: "admin", operator };
        throw unauthenticated();
      }
      if (serviceName === ADMIN_SERVICE) {
        if (isAdminToken(token)) return { kind: "admin", operator: OWNER };
        if (!token.startsWith(OPERATOR_TOKEN_PREFIX) || token.length > 200) throw unauthenticated();
        const operator = await operatorTokens.get(hashToken(token));
        if (!operator) throw unauthenticated();
        return { kind: "admin", operator };
      }
      if (!token.startsWith(SERVICE_TOKEN_PREFIX) || token.length > 200) throw unauthenticated();
      const found = await tokens.get(hashToken(token));
      if (!found) throw unauthenticated();
      const { row, app } = found;
      if (app.status === "stopped" && !OPEN_WHEN_STOPPED.has(`${serviceName}/${method.name}`)) {
        throw new PlatformError("app_stopped", "the app is stopped");
      }
      return { kind: "app", app, tokenId: row.token_id };
    },
    authenticateNow(authorization, method) {
      const serviceName = method.parent.typeName;
      if (publicServices.has(serviceName)) return { kind: "public" };
      if (serviceName === ADMIN_SERVICE) return undefined;
      const token = bearer(authorization);
      if (token === undefined || !token.startsWith(SERVICE_TOKEN_PREFIX) || token.length > 200) return undefined;
      const hit = tokens.peek(hashToken(token));
      if (hit === undefined) return undefined;
      if (hit.app.status === "stopped" && !OPEN_WHEN_STOPPED.has(`${serviceName}/${method.name}`)) return undefined;
      return { kind: "app", app: hit.app, tokenId: hit.row.token_id };
    },
    invalidate() {
      tokens.clear();
      operatorTokens.clear();
    },
  };
}

/** The authenticated app of a facility call; the interceptor guarantees one is there. */
export function appOf(context: HandlerContext): AppRecord {
  const principal = context.values.get(principalKey);
  if (principal.kind !== "app") throw unauthenticated();
  return principal.app;
}

/**
 * The call's app as it is now (its status, limits): authenticated again
 * (`reauthenticateKey`). Throws as a new request would be refused: the app
 * stopped, the token revoked, the app deleted.
 */
export async function currentApp(context: HandlerContext): Promise<AppRecord> {
  const again = context.values.get(reauthenticateKey);
  if (!again) return appOf(context);
  const principal = await again();
  if (principal.kind !== "app") throw unauthenticated();
  return principal.app;
}
