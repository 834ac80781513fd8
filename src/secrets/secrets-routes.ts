/** The `/v1/secrets` routes (docs/api.md#secrets), mapped onto `SecretsService`. */
import { z } from "zod";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { epochMs } from "../core/http/validation.ts";

/** `/v1/secrets/:name` (the name's rule is the implementation's, shared with gRPC). */
const SecretPath = z.object({ name: z.string() });

const NullableMs = z.number().int().nullable().meta({ description: "Epoch milliseconds, or null." });

/** The 200 bodies of the routes below, as `response` builds them (the OpenAPI document's response shapes). */
const SecretListResponse = z.object({
  secrets: z.array(
    z.object({ name: z.string(), set: z.boolean(), version: z.number().int().nullable(), setAt: NullableMs }),
  ),
});
const SecretResponse = z.object({
  name: z.string(),
  value: z.string(),
  version: z.number().int(),
  setAt: NullableMs,
});
const SecretLinkResponse = z.object({ url: z.string(), name: z.string(), expiresAt: NullableMs });

export const secretsRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/secrets",
    rpc: SecretsService.method.listSecrets,
    responseSchema: SecretListResponse,
    doc: {
      summary: "List the secrets the app may read (never values)",
      errors: ["app_stopped", "not_configured"],
      responseExample: {
        secrets: [
          { name: "STRIPE_KEY", set: true, version: 2, setAt: 1763892000000 },
          { name: "SMTP_PASSWORD", set: false, version: null, setAt: null },
        ],
      },
    },
    response: (res) => ({
      secrets: res.secrets.map((s) => ({
        name: s.name,
        set: s.set,
        version: s.version === undefined ? null : Number(s.version),
        setAt: epochMs(s.setAt),
      })),
    }),
  }),
  defineRoute({
    method: "GET",
    url: "/v1/secrets/:name",
    rpc: SecretsService.method.getSecret,
    responseSchema: SecretResponse,
    doc: {
      summary: "Read a secret",
      errors: ["app_stopped", "not_found", "secret_not_set", "not_configured"],
      responseExample: { name: "STRIPE_KEY", value: "sk_live_…", version: 2, setAt: 1763892000000 },
    },
    params: SecretPath,
    request: ({ params }) => ({ name: params.name }),
    response: (res) => ({ name: res.name, value: res.value, version: Number(res.version), setAt: epochMs(res.setAt) }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/secrets/:name/link",
    rpc: SecretsService.method.createSecretLink,
    idempotent: true,
    responseSchema: SecretLinkResponse,
    doc: {
      summary: "Create a single-use link that sets this secret",
      errors: ["app_stopped", "not_found", "too_many_links", "not_configured"],
      responseExample: {
        url: "https://platform.example/secret-links/3q2-7wE…",
        name: "STRIPE_KEY",
        expiresAt: 1763895600000,
      },
    },
    params: SecretPath,
    request: ({ params }) => ({ name: params.name }),
    response: (res) => ({
      url: res.url,
      name: res.name,
      expiresAt: epochMs(res.expiresAt),
    }),
  }),
];
