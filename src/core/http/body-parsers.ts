/**
 * How request bodies are read, for every route outside Connect (whose plugin
 * parses its own): JSON with bounded depth, an empty body of any type as "no
 * body" (fetch sends `text/plain` with `body: ""`, and a consume needs none),
 * forms for the link page, and anything else refused as not JSON.
 */
import type { FastifyInstance } from "fastify";
import { PlatformError } from "../errors.ts";

/** Largest body, for REST and Connect alike. */
export const BODY_LIMIT_BYTES = 32 * 1024 * 1024;
/** JSON nested deeper than this is refused before anything walks it recursively. */
export const MAX_JSON_DEPTH = 64;

/** Replaces fastify's parsers by ours; call after the Connect routes (`connect-routes.ts`) are registered. */
export function registerBodyParsers(fastify: FastifyInstance): void {
  fastify.removeContentTypeParser(["application/json", "text/plain"]);
  fastify.addContentTypeParser("application/json", { parseAs: "string" }, (_req, text, done) => {
    const body = String(text);
    if (body.trim() === "") return done(null, undefined);
    let value: unknown;
    try {
      value = JSON.parse(body);
    } catch {
      return done(
        new PlatformError("invalid_argument", "body: malformed JSON", { details: ["body: is not valid JSON"] }),
        undefined,
      );
    }
    if (jsonDepth(value) > MAX_JSON_DEPTH) {
      return done(
        new PlatformError("invalid_argument", `body: nested deeper than ${MAX_JSON_DEPTH} levels`),
        undefined,
      );
    }
    done(null, value);
  });
  fastify.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_req, text, done) => {
    done(null, Object.fromEntries(new URLSearchParams(String(text))));
  });
  fastify.addContentTypeParser("*", { parseAs: "string" }, (_req, text, done) => {
    if (String(text).trim() === "") return done(null, undefined);
    done(
      new PlatformError("invalid_argument", "content-type: must be application/json", {
        details: ["content-type: must be application/json"],
      }),
      undefined,
    );
  });
}

/**
 * Depth of a parsed JSON value, walked without recursion so no input can
 * overflow the stack. Only objects and arrays are pushed: a body of millions
 * of numbers (32 MiB of `[0,0,…]`) pushed a pair per number and held the event
 * loop for seconds, for any client, before its token was looked at.
 */
export function jsonDepth(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  let max = 0;
  const stack: [object, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (d > max) max = d;
    if (max > MAX_JSON_DEPTH) return max;
    const children: unknown[] = Array.isArray(v) ? v : Object.values(v);
    for (let i = 0; i < children.length; i++) {
      const child = children[i];
      if (child !== null && typeof child === "object") stack.push([child, d + 1]);
    }
  }
  return max;
}
