/**
 * Serves the operator dashboard's build at `/dashboard/`, precompressed
 * (brotli or gzip, as the client accepts, made at build time). Hashed assets are
 * cached for good (a new build has new names); `index.html` is revalidated
 * every time so a new build is picked up at once. Every response carries a
 * strict CSP: scripts, styles and requests only to this origin, no inline
 * script, no frames. The page talks to the service only through Connect.
 */
import fs from "node:fs";
import path from "node:path";
import type { FastifyInstance, FastifyReply } from "fastify";
import fastifyStatic from "@fastify/static";

/** The build `npm run build` (scripts/build-dashboard.ts) makes, with a `.br` and a `.gz` beside each text file. */
export const DASHBOARD_DIST = path.resolve(import.meta.dirname, "../../dashboard/dist");

export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy": DASHBOARD_CSP,
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
};

export async function registerDashboard(fastify: FastifyInstance, root: string = DASHBOARD_DIST): Promise<void> {
  if (!fs.existsSync(path.join(root, "index.html"))) {
    // A server started without `npm start` (e.g. from a test that did not build it): say how to get it.
    fastify.get("/dashboard/*", async (_req, reply) => {
      return reply
        .code(503)
        .headers(SECURITY_HEADERS)
        .type("text/plain; charset=utf-8")
        .send(
          "The dashboard is not built. Run `npm run build` (npm start does it where dev dependencies are installed) and restart the service.\n",
        );
    });
    fastify.get("/dashboard", async (_req, reply) => reply.redirect("/dashboard/", 301));
    return;
  }
  fastify.get("/dashboard", async (_req, reply) => reply.redirect("/dashboard/", 301));
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
      reply.headers(SECURITY_HEADERS);
      const hashed = path.relative(root, filePath).startsWith(`assets${path.sep}`);
      reply.header("cache-control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
    },
  });
}
