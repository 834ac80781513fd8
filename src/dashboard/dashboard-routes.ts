/**
 * Serves the operator dashboard's build at `/dashboard/`, precompressed
 * (brotli or gzip, as the client accepts, made at build time). Hashed assets are
 * cached for good (a new build has new names); `index.html` is revalidated
 * every time so a new build is picked up at once. Every response carries a
 * strict CSP (`DASHBOARD_CSP`, with helmet's other headers, see
 * `core/http/security-headers.ts`). The page talks to the service only through Connect.
 */
import fs from "node:fs";
import path from "node:path";
import type { FastifyInstance, FastifyReply } from "fastify";
import fastifyStatic from "@fastify/static";
import { registerSecurityHeaders, type CspDirectives } from "../core/http/security-headers.ts";

/** The build `npm run build` (scripts/build-dashboard.ts) makes, with a `.br` and a `.gz` beside each text file. */
const DASHBOARD_DIST = path.resolve(import.meta.dirname, "../../dashboard/dist");

/** Scripts, styles and requests only to this origin, no inline script, no frames. */
const DASHBOARD_CSP: CspDirectives = {
  "default-src": ["'none'"],
  "script-src": ["'self'"],
  "style-src": ["'self'"],
  "img-src": ["'self'", "data:"],
  "font-src": ["'self'"],
  "connect-src": ["'self'"],
  "base-uri": ["'none'"],
  "form-action": ["'none'"],
};

export async function registerDashboard(fastify: FastifyInstance, root: string = DASHBOARD_DIST): Promise<void> {
  fastify.get("/dashboard", async (_req, reply) => reply.redirect("/dashboard/", 301));
  await fastify.register(async (scope) => {
    await registerSecurityHeaders(scope, DASHBOARD_CSP);
    await registerFiles(scope, root);
  });
}

async function registerFiles(fastify: FastifyInstance, root: string): Promise<void> {
  if (!fs.existsSync(path.join(root, "index.html"))) {
    // A server started without `npm start` (e.g. from a test that did not build it): say how to get it.
    fastify.get("/dashboard/*", async (_req, reply) => {
      return reply
        .code(503)
        .type("text/plain; charset=utf-8")
        .send(
          "The dashboard is not built. Run `npm run build` (npm start does it where dev dependencies are installed) and restart the service.\n",
        );
    });
    return;
  }
  await fastify.register(fastifyStatic, {
    root,
    prefix: "/dashboard/",
    index: ["index.html"],
    wildcard: true,
    decorateReply: false,
    cacheControl: false,
    etag: true,
    lastModified: true,
    // The build's brotli and gzip files, for clients that accept them: no compression per request.
    preCompressed: true,
    setHeaders(reply: FastifyReply, filePath: string) {
      const hashed = path.relative(root, filePath).startsWith(`assets${path.sep}`);
      reply.header("cache-control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
    },
  });
}
