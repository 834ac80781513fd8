/** The SPEC.md `/v1/secrets` routes, mapped onto `SecretsService`. */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { epochMs } from "../core/http/validation.ts";

const ms = epochMs;

/** `/v1/secrets/:name` (the name's rule is the implementation's, shared with gRPC). */
export const SecretPath = z.object({ name: z.string() });

export const secretsRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/secrets",
    rpc: SecretsService.method.listSecrets,
    response: (res) => ({
      secrets: res.secrets.map((s) => ({
        name: s.name,
        set: s.set,
        version: s.version === undefined ? null : Number(s.version),
        setAt: ms(s.setAt),
      })),
    }),
  }),
  defineRoute({
    method: "GET",
    url: "/v1/secrets/:name",
    rpc: SecretsService.method.getSecret,
    params: SecretPath,
    request: ({ params }) => ({ name: params.name }),
    response: (res) => ({ name: res.name, value: res.value, version: Number(res.version), setAt: ms(res.setAt) }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/secrets/:name/link",
    rpc: SecretsService.method.createSecretLink,
    params: SecretPath,
    request: ({ params }) => ({ name: params.name }),
    response: (res) => ({ url: res.url, name: res.name, expiresAt: res.expiresAt ? timestampDate(res.expiresAt).getTime() : null }),
  }),
];
