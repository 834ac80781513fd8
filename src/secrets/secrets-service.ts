/**
 * `SecretsService`, implemented once for Connect, gRPC and the REST routes
 * (docs/api.md#secrets, docs/secrets.md): values an app reads and a
 * person sets, through a set-only, single-use link; plus the operations the
 * admin API and the link page call.
 *
 * Terminology:
 * - **blueprint**: the app's list of declared secret names (admin
 *   `DeclareSecrets`); only declared names can be read, linked or set.
 * - **value**: the secret's plaintext; stored only sealed (AES-256-GCM, see
 *   `keyring.ts`), returned only to the app by the read call, never logged.
 * - **version**: 1 for the first set, +1 on every set; with `setAt` it tells
 *   an app that polls the listing that the value changed.
 * - **link**: a URL `PUBLIC_URL/secret-links/<token>` that sets one secret of
 *   one app once before it expires; it never shows the value. Only the
 *   token's SHA-256 is stored. **Outstanding**: unused and unexpired.
 * - **set**: a new version by a link or by the owner (admin `SetSecret`); each
 *   puts a `secret.set` event `{ name, version }` on the app's `_events` queue.
 */
import crypto from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { SECRET_NAME_PATTERN, SECRET_NAME_RULE, isUuid, type AppRecord } from "../core/apps/apps.ts";
import type { InTransactionWith, Tx } from "../core/database/index.ts";
import { answerInRun } from "../core/idempotent-run.ts";
import { appOf } from "../core/auth.ts";
import { isWellFormedText } from "../core/text.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import type { PlatformEvents } from "../queues/index.ts";
import { UnknownKeyError, type Keyring } from "./keyring.ts";
import {
  createSecretStore,
  hashLinkToken,
  type Announce,
  type LinkInfo,
  type RemovalGuard,
  type SecretStore,
  type SetResult,
} from "./secret-store.ts";

/** Largest value, in UTF-8 bytes: room for a PEM key or a service-account JSON, not for files. */
const MAX_VALUE_BYTES = 65_536;

export interface SecretsServiceOptions {
  store: SecretStore;
  keyring: Keyring;
  /** The queues facility's `_events` publisher. */
  events: PlatformEvents;
  logger: Logger;
  /** Links are `${publicUrl}/secret-links/<token>`. */
  publicUrl: string;
}

/** A link made by `createLink`: its URL holds the token, shown only in this answer. */
interface CreatedLink {
  url: string;
  name: string;
  expiresAt: Date;
}

/**
 * The secrets facility's operations for the admin API. Each change runs on the
 * caller's unit of work (`tx`): it commits with the caller's other writes (the
 * app's revision, the audit entry) or not at all.
 */
export interface SecretsOperations {
  /** In the admin's `DeleteApp` unit of work, before the app's row goes (see `SecretStore.lockForAppDeletion`). */
  lockForAppDeletion(tx: Tx, appId: string): Promise<void>;
  /** Admin `DeclareSecrets`: dropped names lose their value and their links. */
  declareSecrets(tx: Tx, appId: string, names: string[]): Promise<void>;
  /** Admin `AddSecretNames`: additive; declared names keep their value. */
  addSecretNames(tx: Tx, appId: string, names: string[]): Promise<void>;
  /**
   * Admin `RemoveSecretNames`: refused (`failed_precondition`, naming them) when a name has a
   * value, unless `guard.confirmDestroyValues`; refused (`conflict`, naming them) when a name's
   * version is not the expected one. The names whose value went.
   */
  removeSecretNames(tx: Tx, appId: string, names: string[], guard: RemovalGuard): Promise<string[]>;
  /** `CreateSecretLink` as the app (AdminService's, by an operator): a one-time link to set `name`. */
  createLink(tx: Tx, app: AppRecord, name: string): Promise<CreatedLink>;
  /** The app's outstanding links, never their token. */
  listLinks(appId: string): Promise<{ id: string; name: string; createdAt: Date; expiresAt: Date }[]>;
  /** Outstanding links of every app that expire within `seconds`, soonest first (at most 100). */
  expiringLinks(seconds: number): Promise<{ appId: string; name: string; expiresAt: Date }[]>;
  /** Makes one of the app's links unusable; `not_found` when it has no such link. The secret's name. */
  revokeLink(tx: Tx, appId: string, linkId: string): Promise<string>;
  /** The declared names of one app, or of every app (by app id), in name order. */
  declaredNames(appId?: string): Promise<Map<string, string[]>>;
  /** Admin `SetSecret`: the owner sets a value; a new version and a `secret.set` event. */
  setSecret(tx: Tx, app: AppRecord, name: string, value: string): Promise<{ version: number; setAt: Date }>;
}

export interface SecretsImplementation {
  readonly impl: ServiceImpl<typeof SecretsService>;
  readonly operations: SecretsOperations;
  /** The link page: what a link sets, if it is usable. */
  findLink(token: string): Promise<LinkInfo | undefined>;
  /** The link page: uses a link up, setting its secret; undefined when the link is not usable. */
  useLink(token: string, value: string): Promise<SetResult | undefined>;
}

function checkName(name: string): void {
  if (!SECRET_NAME_PATTERN.test(name)) throw invalidArgument("name", SECRET_NAME_RULE);
}

/** Why a value is unusable, or undefined when it is fine. Shared by the owner's set and the link. */
export function valueProblem(value: unknown): string | undefined {
  if (typeof value !== "string") return "must be a string";
  if (value.length === 0) return "must not be empty";
  // A lone UTF-16 surrogate cannot be stored as UTF-8 without changing the value.
  if (!isWellFormedText(value)) return "must be valid Unicode text (no lone surrogate)";
  if (Buffer.byteLength(value, "utf8") > MAX_VALUE_BYTES) return `must be at most ${MAX_VALUE_BYTES} bytes (UTF-8)`;
  return undefined;
}

function requireEnabled(app: AppRecord): void {
  if (!app.secretsEnabled)
    throw new PlatformError("not_configured", "the secrets facility is not enabled for this app");
}

/** The store on an operator's unit of work. */
const storeOn = (tx: Tx): SecretStore => createSecretStore(tx.db);

export function createSecretsService(options: SecretsServiceOptions): SecretsImplementation {
  const { store, keyring, logger } = options;

  const seal = (appId: string, name: string, value: string) => (version: number) =>
    keyring.seal(value, { appId, name, version });

  /**
   * Sets with their `secret.set` event: `run` gets the announcer to hand the
   * store, which publishes on the set's transaction; after the commit the
   * publisher wakes this process's consumers and feed readers (on a unit of
   * work `tx`, once it committed).
   */
  async function announced(
    run: (announce: Announce) => Promise<SetResult | undefined>,
    tx?: Tx,
  ): Promise<SetResult | undefined> {
    let committed: (() => void) | undefined;
    const result = await run(async (trx, r) => {
      committed = await options.events.publishIn(trx, r.appId, "secret.set", { name: r.name, version: r.version });
    });
    if (committed) {
      if (tx) tx.afterCommit(committed);
      else committed();
    }
    return result;
  }

  function useLink(token: string, value: string): Promise<SetResult | undefined> {
    return announced((announce) =>
      store.useLink(
        hashLinkToken(token),
        (appId, name, version) => keyring.seal(value, { appId, name, version }),
        announce,
      ),
    );
  }

  /**
   * `CreateSecretLink` of `app`, on the store `on` (the pool's, or one built on
   * an operator's unit of work); `answerIn` (an idempotent run's answer) runs
   * in the transaction that creates the link.
   */
  async function createLink(on: SecretStore, app: AppRecord, name: string, answerIn?: InTransactionWith<CreatedLink>) {
    requireEnabled(app);
    checkName(name);
    const token = crypto.randomBytes(32).toString("base64url");
    const url = `${options.publicUrl}/secret-links/${token}`;
    const result = await on.createLink(
      {
        appId: app.id,
        name,
        tokenHash: hashLinkToken(token),
        ttlSeconds: app.limits.linkTtlSeconds,
        maxOutstanding: app.limits.maxOutstandingLinks,
      },
      answerIn && ((trx, made) => answerIn(trx, { url, name, expiresAt: made.expiresAt })),
    );
    if (result.kind === "undeclared")
      throw new PlatformError("not_found", `secret ${name} is not declared by the app's blueprint`);
    if (result.kind === "too_many") {
      throw new PlatformError(
        "too_many_links",
        `at most ${app.limits.maxOutstandingLinks} links may be outstanding; wait for one to be used or to expire`,
        {
          retryAfterSeconds: result.retryAfterSeconds,
        },
      );
    }
    return { url, name, expiresAt: result.expiresAt };
  }

  const operations: SecretsOperations = {
    createLink: (tx, app, name) => createLink(storeOn(tx), app, name),
    declaredNames: (appId) => store.declaredNames(appId),
    lockForAppDeletion: (tx, appId) => store.lockForAppDeletion(tx.db, appId),
    declareSecrets: (tx, appId, names) => storeOn(tx).declare(appId, names),
    addSecretNames: (tx, appId, names) => storeOn(tx).addNames(appId, names),

    async removeSecretNames(tx, appId, names, guard) {
      const result = await storeOn(tx).removeNames(appId, names, guard);
      if (result.changed.length > 0) {
        const list = result.changed.join(", ");
        throw new PlatformError(
          "conflict",
          `${list} ${result.changed.length === 1 ? "has" : "have"} changed since you looked (a value was set): nothing was removed; look again`,
          { details: result.changed.map((name) => `${name}: not at the expected version`) },
        );
      }
      if (!result.removed) {
        const list = result.withValues.join(", ");
        throw new PlatformError(
          "failed_precondition",
          `removing ${list} would destroy ${result.withValues.length === 1 ? "its value" : "their values"}; confirm to destroy`,
          {
            details: result.withValues.map((name) => `${name}: has a value (set confirm_destroy_values to destroy it)`),
          },
        );
      }
      return result.withValues;
    },

    listLinks: (appId) => store.listLinks(appId),
    expiringLinks: (seconds) => store.expiringLinks(seconds),

    async revokeLink(tx, appId, linkId) {
      const revoked = isUuid(linkId) ? await storeOn(tx).revokeLink(appId, linkId) : undefined;
      if (revoked === "used")
        throw new PlatformError(
          "failed_precondition",
          `link ${linkId} was already used: the value it set stays (set another value, or drop the name, to undo it)`,
        );
      if (revoked === undefined) throw new PlatformError("not_found", `no outstanding link ${linkId} for this app`);
      return revoked.name;
    },

    async setSecret(tx, app, name, value) {
      checkName(name);
      const problem = valueProblem(value);
      if (problem) throw invalidArgument("value", problem);
      const result = await announced(
        (announce) => storeOn(tx).set(app.id, name, seal(app.id, name, value), announce),
        tx,
      );
      if (!result) throw new PlatformError("not_found", `secret ${name} is not declared by the app's blueprint`);
      return { version: result.version, setAt: result.setAt };
    },
  };

  return {
    impl: {
      async listSecrets(_req, context) {
        const app = appOf(context);
        requireEnabled(app);
        const rows = await store.list(app.id);
        return {
          secrets: rows.map((r) => ({
            name: r.name,
            set: r.version !== null,
            version: r.version === null ? undefined : BigInt(r.version),
            setAt: r.setAt ? timestampFromDate(r.setAt) : undefined,
          })),
        };
      },

      async getSecret(req, context) {
        const app = appOf(context);
        requireEnabled(app);
        checkName(req.name);
        const secret = await store.read(app.id, req.name);
        if (!secret) throw new PlatformError("not_found", `secret ${req.name} is not declared by the app's blueprint`);
        if (!secret.value || secret.version === null || !secret.setAt) {
          throw new PlatformError("secret_not_set", `secret ${req.name} is declared but has not been set yet`);
        }
        let value: string;
        try {
          value = keyring.open(secret.value, { appId: app.id, name: secret.name, version: secret.version });
        } catch (err) {
          // Never the value, never key material: only which key id is missing.
          const reason =
            err instanceof UnknownKeyError ? `sealed under unknown key id ${err.keyId}` : "does not authenticate";
          logger.error({ appId: app.id, secret: secret.name, reason }, "secret value cannot be opened");
          // Another instance may have the key (a rotation under way): this one cannot answer, the service may.
          throw new PlatformError(
            "unavailable",
            `secret ${secret.name} cannot be read right now: its value is sealed under a key this instance is not configured with`,
            {
              retryAfterSeconds: 1,
            },
          );
        }
        return { name: secret.name, value, version: BigInt(secret.version), setAt: timestampFromDate(secret.setAt) };
      },

      async createSecretLink(req, context) {
        const answer = (link: CreatedLink) => ({
          url: link.url,
          name: link.name,
          expiresAt: timestampFromDate(link.expiresAt),
        });
        const answerIn = answerInRun(context, SecretsService.method.createSecretLink, answer);
        return answer(await createLink(store, appOf(context), req.name, answerIn));
      },
    },

    findLink: (token) => store.findLink(hashLinkToken(token)),
    useLink,
    operations,
  };
}
