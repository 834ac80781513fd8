/**
 * The machine-readable and the browsable description of the REST API, on the
 * service's own port and without a token: `GET /openapi.json` (the document
 * `openapi.ts` generates from the route tables) and `GET /docs` (the Scalar
 * API reference, whose script is served from the installed package, so the
 * page works offline and loads nothing from another origin; a
 * Content-Security-Policy holds it to that).
 */
import { createHash } from "node:crypto";
import apiReference from "@scalar/fastify-api-reference";
import type { FastifyInstance } from "fastify";

export const OPENAPI_PATH = "/openapi.json";
export const DOCS_PATH = "/docs";

/** `'sha256-…'` of every inline `<script>` of the page, so the policy admits exactly those. */
function inlineScriptHashes(html: string): string[] {
  const hashes: string[] = [];
  for (const match of html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)) {
    hashes.push(`'sha256-${createHash("sha256").update(match[1] ?? "").digest("base64")}'`);
  }
  return hashes;
}

function contentSecurityPolicy(html: string): string {
  return [
    "default-src 'self'",
    `script-src 'self' ${inlineScriptHashes(html).join(" ")}`.trim(),
    // The reference sets style attributes and injects style sheets at run time.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/** Serves `document` at `/openapi.json` and the reference page at `/docs`. */
export async function registerApiDocs(fastify: FastifyInstance, document: object): Promise<void> {
  const body = JSON.stringify(document);
  fastify.get(OPENAPI_PATH, async (_req, reply) => {
    void reply.header("cache-control", "no-cache");
    return reply.type("application/json; charset=utf-8").send(body);
  });

  await fastify.register(
    async (scope) => {
      scope.addHook("onSend", async (_req, reply, payload) => {
        const type = String(reply.getHeader("content-type") ?? "");
        if (typeof payload === "string" && type.startsWith("text/html")) {
          void reply.header("content-security-policy", contentSecurityPolicy(payload));
          void reply.header("referrer-policy", "no-referrer");
        }
        return payload;
      });
      await scope.register(apiReference, {
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
    },
  );
}
