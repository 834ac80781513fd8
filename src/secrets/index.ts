/**
 * The secrets facility (docs/secrets.md): wires its store, its keyring, its
 * one implementation, its REST routes and its link page. Other facilities use
 * only what this file exports.
 */
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import type { PlatformEvents } from "../queues/index.ts";
import { keyringFromConfig, type Keyring } from "./keyring.ts";
import { registerLinkPage } from "./link-page.ts";
import { createSecretStore } from "./secret-store.ts";
import { secretsRoutes } from "./secrets-routes.ts";
import { createSecretsService, valueProblem, type SecretsOperations } from "./secrets-service.ts";
import { inBatches, type HousekeepingTask } from "../core/housekeeping.ts";

export type { SecretsOperations } from "./secrets-service.ts";
export { keyringFromConfig, createKeyring, keyIdOf } from "./keyring.ts";
export { keysNeeded } from "./key-check.ts";

export interface SecretsFacilityOptions {
  /** The queues facility's `_events` publisher. */
  events: PlatformEvents;
  /** Defaults to the keyring of `deps.config` (`SECRETS_KEY`, `SECRETS_OLD_KEYS`). */
  keyring?: Keyring;
}

/** How often used and expired links are deleted, for every app at once. */
const LINK_SWEEP_INTERVAL_MS = 60_000;

export type SecretsFacility = Facility<typeof SecretsService> & {
  /** What the admin API does to an app's secrets (each change on the caller's unit of work). */
  readonly operations: SecretsOperations;
};

export function createSecretsFacility(deps: Deps, options: SecretsFacilityOptions): SecretsFacility {
  const { config, logger } = deps;
  const keyring = options.keyring ?? keyringFromConfig(config);
  const store = createSecretStore(deps.db);
  const secrets = createSecretsService({ store, keyring, events: options.events, logger, publicUrl: config.publicUrl });

  return {
    service: SecretsService,
    impl: secrets.impl,
    routes: secretsRoutes,
    registerRoutes(fastify) {
      registerLinkPage(fastify, {
        findLink: (token) => secrets.findLink(token),
        useLink: (token, value) => secrets.useLink(token, value),
        csrfKeys: keyring.deriveKeys("secret-link-csrf"),
        valueProblem,
      });
    },
    async start() {
      const unknown = (await store.keyIds()).filter((id) => !keyring.has(id));
      if (unknown.length > 0) {
        logger.warn(
          { keyIds: unknown },
          "some secret values are sealed under keys that are not configured: add them to SECRETS_OLD_KEYS",
        );
      }
    },
    housekeeping: (): HousekeepingTask[] => [
      {
        name: "secret links",
        intervalMs: LINK_SWEEP_INTERVAL_MS,
        run: (signal) => inBatches(signal, (batch) => store.deleteDeadLinks(batch)),
      },
    ],
    operations: secrets.operations,
  };
}
