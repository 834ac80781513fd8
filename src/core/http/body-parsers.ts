/**
 * How request bodies are read, for every route outside Connect (whose plugin
 * parses its own): JSON with bounded depth and only numbers a JSON number keeps
 * exactly, an empty body of any type as "no body" (fetch sends `text/plain`
 * with `body: ""`, and a consume needs none), forms for the link page, and
 * anything else refused as not JSON.
 */
import type { FastifyInstance } from "fastify";
import { PlatformError } from "../errors.ts";

/** Largest body, for REST and Connect alike. */
export const BODY_LIMIT_BYTES = 32 * 1024 * 1024;
/** JSON nested deeper than this is refused before anything walks it recursively. */
const MAX_JSON_DEPTH = 64;

/** Replaces fastify's parsers by ours; call after the Connect routes (`connect-routes.ts`) are registered. */
export function registerBodyParsers(fastify: FastifyInstance): void {
  fastify.removeContentTypeParser(["application/json", "text/plain"]);
  fastify.addContentTypeParser("application/json", { parseAs: "buffer" }, (_req, bytes, done) => {
    const body = utf8(bytes as Buffer);
    if (body === undefined) return done(refused(NOT_UTF8_JSON), undefined);
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
    const shape = jsonShape(value);
    if (shape.depth > MAX_JSON_DEPTH) {
      return done(
        new PlatformError("invalid_argument", `body: nested deeper than ${MAX_JSON_DEPTH} levels`),
        undefined,
      );
    }
    const inexact = shape.inexact ? inexactNumber(body, value) : undefined;
    if (inexact) return done(refused(inexact), undefined);
    done(null, value);
  });
  fastify.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "buffer" }, (req, bytes, done) => {
    // curl -d sends this type by default: a JSON body sent so to /v1 was read as one odd form field, and a
    // consume's { waitSeconds } was ignored without a word.
    if ((req.routeOptions.config as { acceptsForm?: boolean }).acceptsForm !== true)
      return done((bytes as Buffer).toString("latin1").trim() === "" ? null : notJson(), undefined);
    const body = utf8(bytes as Buffer);
    if (body === undefined || !percentEncodedUtf8(body))
      return done(refused("body: a form field is not UTF-8 (send the form as UTF-8)"), undefined);
    done(null, Object.fromEntries(new URLSearchParams(body)));
  });
  fastify.addContentTypeParser("*", { parseAs: "string" }, (_req, text, done) => {
    if (String(text).trim() === "") return done(null, undefined);
    done(notJson(), undefined);
  });
}

/**
 * Bodies are decoded strictly. Node's `toString("utf8")` (fastify's `parseAs: "string"`) and
 * `URLSearchParams` replace bytes that are not UTF-8 with U+FFFD, so a Latin-1 client's `café` was
 * stored, with a 200, as `caf\ufffd`: a secret link used up on a wrong password, a payload changed.
 * A leading byte-order mark is kept, as before, so such a body stays malformed JSON.
 */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The body as text, or undefined when its bytes are not UTF-8 (also Connect's JSON bodies: `connect-routes.ts`). */
export function utf8(bytes: Uint8Array): string | undefined {
  try {
    return STRICT_UTF8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Whether every run of `%XX` escapes in a form body decodes as UTF-8 (`value=p%E4ss` is Latin-1). */
function percentEncodedUtf8(body: string): boolean {
  for (const [run] of body.matchAll(/(?:%[0-9a-fA-F]{2})+/g)) {
    const bytes = Buffer.from(run.replaceAll("%", ""), "hex");
    if (utf8(bytes) === undefined) return false;
  }
  return true;
}

/** Why a JSON body whose bytes are not UTF-8 is refused, over REST and Connect alike. */
export const NOT_UTF8_JSON = "body: is not UTF-8 (JSON is UTF-8 text)";

/** The `config` of a route that takes an HTML form's body (the secret link's page); other routes refuse forms. */
export const FORM_ROUTE_CONFIG = { acceptsForm: true };

const notJson = () => refused("content-type: must be application/json");

/** A 400 whose one detail is its message (it names the field or the body). */
export const refused = (message: string) => new PlatformError("invalid_argument", message, { details: [message] });

/**
 * Depth of a parsed JSON value, walked without recursion so no input can
 * overflow the stack. Only objects and arrays are pushed: a body of millions
 * of numbers (32 MiB of `[0,0,…]`) pushed a pair per number and held the event
 * loop for seconds, for any client, before its token was looked at.
 */
export function jsonDepth(value: unknown): number {
  return jsonShape(value).depth;
}

/** From this magnitude on, a parsed number may not be the one written (2^53; 1e400 parses as Infinity). */
const EXACT_LIMIT = 2 ** 53;

/**
 * The depth of a parsed JSON value (see `jsonDepth`), and whether it holds a number that may not have
 * survived `JSON.parse` as written (`inexact`: a magnitude of 2^53 or more, infinite included), found in the
 * same walk. Only such a body is parsed a second time, with the source of each number (`inexactNumber`).
 * Looking at the parsed numbers costs a comparison each; the scan of the text for 16 digits in a row or a
 * three-digit exponent it replaces cost more than `JSON.parse` on a batch of events with epoch times.
 */
function jsonShape(value: unknown): { depth: number; inexact: boolean } {
  if (typeof value === "number") return { depth: 0, inexact: !(value < EXACT_LIMIT && value > -EXACT_LIMIT) };
  if (value === null || typeof value !== "object") return { depth: 0, inexact: false };
  let max = 0;
  let inexact = false;
  const stack: [object, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (d > max) max = d;
    if (max > MAX_JSON_DEPTH) return { depth: max, inexact };
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const child: unknown = v[i];
        if (typeof child === "number") {
          if (!(child < EXACT_LIMIT && child > -EXACT_LIMIT)) inexact = true;
        } else if (child !== null && typeof child === "object") stack.push([child, d + 1]);
      }
    } else {
      for (const key in v) {
        const child: unknown = (v as Record<string, unknown>)[key];
        if (typeof child === "number") {
          if (!(child < EXACT_LIMIT && child > -EXACT_LIMIT)) inexact = true;
        } else if (child !== null && typeof child === "object") stack.push([child, d + 1]);
      }
    }
  }
  return { depth: max, inexact };
}

/**
 * Why a body holds a number that would not be kept as sent, or undefined. An integer beyond ±2^53
 * (a 64-bit id, say) parses to the nearest double: `12345678901234567890` would be stored, and
 * answered back, as `12345678901234567000`, another value with no word said. Such a body is
 * refused, naming the field, so that the sender can send the number as a string instead; one
 * written as it would come back (`12345678901234567000`) is kept. A fraction or an exponent is
 * taken as the double it denotes, as JSON numbers always are.
 */
function inexactNumber(body: string, parsed: unknown): string | undefined {
  let found: { key: string; value: number; source: string } | undefined;
  JSON.parse(body, (key, value: unknown, context?: { source?: string }) => {
    if (found || typeof value !== "number" || context?.source === undefined) return value;
    const source = context.source;
    if (!Number.isFinite(value) || (Math.abs(value) >= 2 ** 53 && /^-?\d+$/.test(source) && String(value) !== source))
      found = { key, value, source };
    return value;
  });
  if (!found) return undefined;
  const field = fieldPath(parsed, found.key, found.value);
  return Number.isFinite(found.value)
    ? `${field}: the integer ${found.source} cannot be kept exactly as a JSON number (beyond ±2^53 it would come back as ${String(found.value)}); send it as a string`
    : `${field}: the number ${found.source} is beyond the range of a JSON number`;
}

/** The path (`payload.ids[2]`) of the first number `value` under `key` in a parsed body, for messages. */
function fieldPath(root: unknown, key: string, value: number): string {
  const stack: [unknown, string][] = [[root, ""]];
  while (stack.length > 0) {
    const [node, path] = stack.pop()!;
    if (node === null || typeof node !== "object") continue;
    const entries: [string, unknown][] = Array.isArray(node)
      ? node.map((v, i) => [String(i), v])
      : Object.entries(node);
    for (const [k, v] of entries) {
      const at = Array.isArray(node) ? `${path}[${k}]` : path === "" ? k : `${path}.${k}`;
      if (k === key && v === value) return at;
      if (v !== null && typeof v === "object") stack.push([v, at]);
    }
  }
  return "body";
}
