/**
 * The OpenAPI 3.1 document of the REST API, generated from the route tables:
 * request bodies, queries and path parameters come from the same zod schemas
 * the router validates with (`z.toJSONSchema`), 200 bodies from each route's
 * `responseSchema`, and statuses from the closed set of error codes, so the
 * document cannot drift from what the server does. Only prose and examples
 * are written by hand, next to each route (`RouteDoc`).
 */
import { z } from "zod";
import { statusOf, type ErrorCode } from "../errors.ts";
import type { AnyRestRoute } from "./rest-router.ts";

type Json = Record<string, unknown>;

export interface OpenApiInfo {
  title: string;
  version: string;
  description?: string;
}

/** Codes every route with a token can answer, whatever it does. */
const AUTHENTICATED_ERRORS: readonly ErrorCode[] = ["unauthenticated", "rate_limited", "unavailable", "internal"];
/** Codes every route can answer. */
const COMMON_ERRORS: readonly ErrorCode[] = ["internal"];
/** Codes every route that reads a JSON body can answer. */
const BODY_ERRORS: readonly ErrorCode[] = ["invalid_argument", "payload_too_large"];

const MEANING: Record<number, string> = {
  400: "Invalid input: the message names the field and the rule.",
  401: "Missing or invalid service token.",
  403: "The app is stopped, or the operation is not permitted.",
  404: "Not found (a secret the app's blueprint does not declare).",
  409: "The secret is declared but not set yet, or a request with the same `Idempotency-Key` is still running (`Retry-After`).",
  413: "The body is larger than the server accepts.",
  422: "The `Idempotency-Key` was used for another request within 24 hours.",
  429: "A cap is spent, or the app is past one of its rate or concurrency limits (`rate_limited`); `Retry-After` says when to try again.",
  500: "An unexpected failure; the message carries no internals.",
  501: "Not configured for this app or deployment.",
  502: "An upstream provider or the analytics cluster failed.",
  503: "The database or analytics store cannot be reached right now; `Retry-After` says when to try again.",
};

/** The error envelope of docs/api.md#errors, whatever the status. */
const ErrorEnvelope = z
  .object({
    error: z.object({
      code: z.string().meta({ description: "One of the closed set of codes (docs/api.md#errors)." }),
      message: z.string(),
      details: z.array(z.string()).optional(),
    }),
  })
  .meta({ description: "Every error body." });

/** JSON Schema (2020-12) of a request schema, as a client sends it. */
function inputSchema(schema: z.ZodType): Json {
  const json = z.toJSONSchema(schema, { io: "input", unrepresentable: "any", target: "draft-2020-12" }) as Json;
  delete json.$schema;
  return json;
}

/** JSON Schema (2020-12) of a response schema, as the server sends it. */
function outputSchema(schema: z.ZodType): Json {
  const json = z.toJSONSchema(schema, { io: "output", unrepresentable: "any", target: "draft-2020-12" }) as Json;
  delete json.$schema;
  return json;
}

/** `/v1/queues/:queue` as OpenAPI writes it: `/v1/queues/{queue}`. */
function openApiPath(url: string): string {
  return url.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
}

function parameters(route: AnyRestRoute): Json[] {
  const out: Json[] = [];
  for (const [where, schema] of [
    ["path", route.params],
    ["query", route.query],
  ] as const) {
    if (!schema) continue;
    const json = inputSchema(schema);
    const props = (json.properties ?? {}) as Record<string, Json>;
    const required = new Set((json.required ?? []) as string[]);
    for (const [name, property] of Object.entries(props)) {
      out.push({ name, in: where, required: where === "path" || required.has(name), schema: property });
    }
  }
  return out;
}

/** The headers of the IETF httpapi ratelimit-headers draft, on the answers of every route with a token. */
const RATE_LIMIT_HEADERS: Json = {
  RateLimit: { $ref: "#/components/headers/RateLimit" },
  "RateLimit-Policy": { $ref: "#/components/headers/RateLimitPolicy" },
};

function errorResponses(codes: readonly ErrorCode[], rateLimited: boolean): Record<string, Json> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = statusOf(code);
    const list = byStatus.get(status) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(status, list);
  }
  const out: Record<string, Json> = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    const retry = status === 429 || status === 503 || list.includes("idempotency_key_in_use");
    out[String(status)] = {
      description: `${MEANING[status] ?? "Error."} Codes: ${list.map((c) => `\`${c}\``).join(", ")}.`,
      headers: {
        "x-request-id": { $ref: "#/components/headers/RequestId" },
        ...(retry ? { "Retry-After": { $ref: "#/components/headers/RetryAfter" } } : {}),
        ...(rateLimited && status === 429 ? RATE_LIMIT_HEADERS : {}),
      },
      content: {
        "application/json": {
          schema: {
            allOf: [{ $ref: "#/components/schemas/ErrorEnvelope" }],
            properties: { error: { properties: { code: { enum: list } } } },
          },
          examples: Object.fromEntries(
            list.map((code) => [code, { value: { error: { code, message: `example ${code} message` } } }]),
          ),
        },
      },
    };
  }
  return out;
}

function operation(route: AnyRestRoute): Json {
  const doc = route.doc;
  const isPublic = doc?.public === true;
  const codes = [
    ...(doc?.errors ?? []),
    ...(route.body ? BODY_ERRORS : []),
    ...(isPublic ? COMMON_ERRORS : AUTHENTICATED_ERRORS),
  ];
  if (route.params || route.query || route.idempotent) codes.push("invalid_argument");
  if (route.idempotent) codes.push("idempotency_key_in_use", "idempotency_key_reused");
  const op: Json = {
    operationId: route.rpc.localName,
    summary: doc?.summary ?? route.rpc.name,
    ...(doc?.description ? { description: doc.description } : {}),
    tags: [route.url.split("/")[2] ?? "meta"].map((t) => (route.url.startsWith("/v1/") ? t : "meta")),
    security: isPublic ? [] : [{ serviceToken: [] }],
    responses: {
      "200": {
        description: "Success.",
        headers: {
          "x-request-id": { $ref: "#/components/headers/RequestId" },
          ...(route.idempotent ? { "Idempotent-Replayed": { $ref: "#/components/headers/IdempotentReplayed" } } : {}),
          ...(isPublic ? {} : RATE_LIMIT_HEADERS),
        },
        content: {
          "application/json": {
            ...(route.responseSchema ? { schema: outputSchema(route.responseSchema) } : {}),
            ...(doc ? { example: doc.responseExample } : {}),
          },
        },
      },
      ...errorResponses(codes, !isPublic),
    },
  };
  const params = parameters(route);
  if (route.idempotent) params.push({ $ref: "#/components/parameters/IdempotencyKey" });
  if (params.length > 0) op.parameters = params;
  if (route.body) {
    op.requestBody = {
      // A body that may be left out (consume) accepts `null`/absent too.
      required: !route.url.endsWith("/consume"),
      content: {
        "application/json": {
          schema: inputSchema(route.body),
          ...(doc?.requestExample !== undefined ? { example: doc.requestExample } : {}),
        },
      },
    };
  }
  return op;
}

/** Builds the document for the given route tables. */
export function createOpenApiDocument(info: OpenApiInfo, tables: readonly (readonly AnyRestRoute[])[]): Json {
  const paths: Record<string, Record<string, Json>> = {};
  for (const route of tables.flat()) {
    const path = openApiPath(route.url);
    paths[path] ??= {};
    paths[path][route.method.toLowerCase()] = operation(route);
  }
  return {
    openapi: "3.1.0",
    info,
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    servers: [{ url: "/" }],
    security: [{ serviceToken: [] }],
    paths,
    components: {
      securitySchemes: {
        serviceToken: {
          type: "http",
          scheme: "bearer",
          description: "The app's service token: `Authorization: Bearer <SERVICE_TOKEN>`.",
        },
      },
      schemas: { ErrorEnvelope: outputSchema(ErrorEnvelope) },
      parameters: {
        IdempotencyKey: {
          name: "Idempotency-Key",
          in: "header",
          required: false,
          description:
            "1 to 255 printable ASCII characters, new for each new request (e.g. a UUID). A repeat within 24 hours with the same key and the same request gets the first answer again (with `Idempotent-Replayed: true`) without doing the work or spending allowance; the same key with another request is 422 `idempotency_key_reused`; a repeat while the first runs is 409 `idempotency_key_in_use`. Error answers are not kept: a retry after one runs again.",
          schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x20-\\x7e]+$" },
        },
      },
      headers: {
        RequestId: {
          description: "Identifies the request; the same id appears in the server's log line for it.",
          schema: { type: "string" },
        },
        IdempotentReplayed: {
          description:
            "`true` when this answer is the stored answer of an earlier request with the same `Idempotency-Key`.",
          schema: { type: "string", enum: ["true"] },
        },
        RateLimit: {
          description:
            'The app\'s limit this call counted against (IETF httpapi ratelimit-headers draft): `"<class>";r=<remaining>;t=<seconds until the bucket is full again>`, the class `requests`, `events` or `puts`. See docs/api.md, rate limits.',
          schema: { type: "string", example: '"requests";r=997;t=1' },
        },
        RateLimitPolicy: {
          description:
            'The app\'s token bucket of that class: `"<class>";q=<burst>;w=<seconds the bucket takes to fill>` (the burst and, with the window, the rate a second).',
          schema: { type: "string", example: '"requests";q=1000;w=2' },
        },
        RetryAfter: {
          description: "Seconds until a retry may succeed (to the next UTC midnight for a daily cap).",
          schema: { type: "integer", minimum: 0 },
        },
      },
    },
  };
}
