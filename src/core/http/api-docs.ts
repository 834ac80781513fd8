/**
 * The machine-readable and the browsable description of the REST API, on the
 * service's own port and without a token: `GET /openapi.json` (the document
 * `openapi.ts` generates from the route tables) and `GET /docs` (the Scalar
 * API reference, whose script is served from the installed package, so the
 * page works offline and loads nothing from another origin; a
 * Content-Security-Policy holds it to that).
 */
import { createHash } from "node:crypto";
import type { FastifyInstance, RouteHandlerMethod, RouteOptions } from "fastify";
import { cspHeader, registerSecurityHeaders, type CspDirectives } from "./security-headers.ts";

const OPENAPI_PATH = "/openapi.json";
const DOCS_PATH = "/docs";

/** `'sha256-…'` of every inline `<script>` of the page, so the policy admits exactly those. */
function inlineScriptHashes(html: string): string[] {
  const hashes: string[] = [];
  for (const match of html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)) {
    hashes.push(
      `'sha256-${createHash("sha256")
        .update(match[1] ?? "")
        .digest("base64")}'`,
    );
  }
  return hashes;
}

/** The reference page's policy; `script-src` also admits the page's inline scripts, by hash, once the page is known. */
const DOCS_CSP: CspDirectives = {
  "default-src": ["'self'"],
  "script-src": ["'self'"],
  // The reference sets style attributes and injects style sheets at run time.
  "style-src": ["'self'", "'unsafe-inline'"],
  "img-src": ["'self'", "data:", "blob:"],
  "font-src": ["'self'", "data:"],
  "connect-src": ["'self'"],
  "worker-src": ["'self'", "blob:"],
  "object-src": ["'none'"],
  "base-uri": ["'none'"],
};

function contentSecurityPolicy(html: string): string {
  return cspHeader({ ...DOCS_CSP, "script-src": [...DOCS_CSP["script-src"], ...inlineScriptHashes(html)] });
}

/** The routes a Fastify plugin registers, collected instead of registered: method + url -> route options. */
type CollectedRoutes = Map<string, RouteOptions>;

/**
 * The Scalar plugin's routes, made on first use. Its module holds the whole
 * reference page's script (4 MB of source) and pulls in an OpenAPI parser,
 * YAML and JSON-schema validators: a third of a second of start-up and tens of
 * MB for a page an operator may never open. So `/docs` is served by routes of
 * our own that load the plugin at the first request, let it declare its
 * routes into a stand-in (it only calls `route`), and hand each request to
 * the one it declared for that path.
 */
function lazyScalarRoutes(options: object): () => Promise<CollectedRoutes> {
  let collected: Promise<CollectedRoutes> | undefined;
  return () =>
    (collected ??= import("@scalar/fastify-api-reference").then(({ default: plugin }) => {
      const routes: CollectedRoutes = new Map();
      const standIn = {
        route: (route: RouteOptions) => void routes.set(`${String(route.method)} ${route.url}`, route),
        hasPlugin: () => false,
        initialConfig: {},
        log: { warn: () => {} },
      };
      (plugin as unknown as (instance: object, opts: object, next: () => void) => void)(standIn, options, () => {});
      return routes;
    }));
}

/** Serves `document()` (made at the first request, then kept) at `/openapi.json` and the reference page at `/docs`. */
export async function registerApiDocs(fastify: FastifyInstance, document: () => object): Promise<void> {
  let body: string | undefined;
  fastify.get(OPENAPI_PATH, async (_req, reply) => {
    body ??= JSON.stringify(document());
    void reply.header("cache-control", "no-cache");
    return reply.type("application/json; charset=utf-8").send(body);
  });

  const scalarRoutes = lazyScalarRoutes({
    routePrefix: DOCS_PATH,
    logLevel: "warn",
    configuration: {
      url: OPENAPI_PATH,
      pageTitle: "Platform Batteries API",
      // Offline: no web fonts from a CDN, no request proxy, no telemetry.
      withDefaultFonts: false,
      telemetry: false,
      hideClientButton: true,
      defaultOpenAllTags: true,
      showDeveloperTools: "never",
      agent: { disabled: true },
    },
  });

  await fastify.register(async (scope) => {
    await registerSecurityHeaders(scope, DOCS_CSP);
    scope.addHook("onSend", async (_req, reply, payload) => {
      const type = String(reply.getHeader("content-type") ?? "");
      // helmet set the policy before the page was made; the page's own inline scripts are known only now.
      if (typeof payload === "string" && type.startsWith("text/html"))
        reply.raw.setHeader("content-security-policy", contentSecurityPolicy(payload));
      return payload;
    });
    // The paths the plugin serves: the page (and its redirect) and its script.
    for (const url of [DOCS_PATH, `${DOCS_PATH}/`, `${DOCS_PATH}/js/scalar.js`]) {
      scope.get(url, { logLevel: "warn" }, async function (request, reply) {
        const route = (await scalarRoutes()).get(`GET ${url}`);
        if (!route) return reply.callNotFound();
        return (route.handler as RouteHandlerMethod).call(this, request, reply);
      });
    }
  });
}
