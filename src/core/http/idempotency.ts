/**
 * Idempotency keys (the IETF httpapi `Idempotency-Key` draft, as Stripe uses
 * it), implemented once for REST, Connect and gRPC: a route entry flagged
 * `idempotent` makes its RPC honour the `Idempotency-Key` request header (or
 * metadata) on every protocol, by wrapping the facility's implementation of
 * that RPC (`idempotentImpl`).
 *
 * With a key, the first request claims it for its app by inserting a
 * `running` row (the primary key decides a race in the database, on any
 * instance), runs the RPC, and stores its answer (the response message); a
 * repeat within `IDEMPOTENCY_TTL_SECONDS` with the same key, RPC and request
 * gets that answer again with `Idempotent-Replayed: true`, without running the
 * RPC, so it spends no allowance and does no work twice. The request is
 * compared as the RPC receives it (`requestFingerprint`: SHA-256 of its
 * protobuf JSON, object keys sorted): for REST that is the body and the path
 * parameters as the route reads them, whatever the order of an object's keys.
 * - another request under the key: 422 `idempotency_key_reused`;
 * - a repeat while the first still runs: 409 `idempotency_key_in_use` with
 *   `Retry-After: 1` (it does not wait: a long generate would hold the repeat
 *   for as long, and the client decides whether to retry);
 * - a run that fails stores nothing and forgets the key, so a retry runs again;
 *   except a failure after which the work may have been done all the same
 *   (`outcomeUnknown`: SES failed or went silent after taking the request):
 *   that error is the key's answer, replayed to a repeat, which so never sends
 *   the mail a second time;
 * - a live run keeps its key however long it takes (a slow generate): it
 *   renews its hold every third of `RUN_LOCK_SECONDS`, so a repeat is told
 *   409 and never runs the work (and spends the allowance) a second time
 *   beside it;
 * - a run whose process dies holds the key `RUN_LOCK_SECONDS`, after which a
 *   repeat of the same request runs it again. So that this never does the
 *   work twice where the work is one transaction of the platform database (a
 *   put, a secret link, events in the SQL store, a mail to the outbox), such
 *   an RPC stores its answer in that transaction (`answerInRun` in
 *   core/idempotent-run.ts): the work and its answer commit together or not
 *   at all. Work done elsewhere (a mail handed to SES, a generate) is
 *   answered after it, and a death in between runs it again after the lock.
 * Without the header nothing changes.
 *
 * The database never holds a key or an answer in the clear: a key is stored
 * as its SHA-256, and the answer (a secret link's URL, say) sealed with
 * AES-256-GCM under a key derived from the Idempotency-Key itself, which only
 * the client knows; so the rows are of no use to whoever reads the database.
 */
import crypto from "node:crypto";
import {
  create,
  fromBinary,
  toBinary,
  toJson,
  type DescMessage,
  type DescMethodUnary,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { configure } from "safe-stable-stringify";
import { appOf } from "../auth.ts";
import { PlatformError, invalidArgument, type ErrorCode } from "../errors.ts";
import { HOUSEKEEPING_BATCH, inBatches, type HousekeepingTask } from "../housekeeping.ts";
import type { IdempotencyStore } from "../idempotency-store.ts";
import { setIdempotentRun } from "../idempotent-run.ts";
import type { Metrics } from "../metrics.ts";
import type { AnyRestRoute } from "./rest-router.ts";

const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
const REPLAYED_HEADER = "idempotent-replayed";
/** How long a key and its answer are remembered. */
const IDEMPOTENCY_TTL_SECONDS = 24 * 3600;
/**
 * How long a run holds its key before a repeat may take over (its process may have died). A live run
 * renews it every third of this, so it bounds only a dead run's hold: it was 300 s, ten times the client's
 * default retry budget (30 s), so a batch whose instance was killed mid-request was told 409 until the
 * client gave up, and the tracker dropped it. 15 s leaves the client half of its budget.
 */
export const RUN_LOCK_SECONDS = 15;
/** How often expired keys are deleted. */
const IDEMPOTENCY_SWEEP_INTERVAL_MS = 600_000;

const KEY_RULE = "must be 1 to 255 printable ASCII characters";
const PRINTABLE = /^[\x20-\x7e]{1,255}$/;

export interface Idempotency {
  /** Runs `handler` once per app and key (see above); without the header, just runs it. */
  run<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    req: MessageShape<I>,
    context: HandlerContext,
    handler: () => Promise<MessageInitShape<O> | MessageShape<O>>,
  ): Promise<MessageInitShape<O> | MessageShape<O>>;
  housekeeping(): HousekeepingTask;
}

export interface IdempotencyOptions {
  store: IdempotencyStore;
  logger: Logger;
  metrics: Metrics;
  /** How long a run's hold lasts without renewal (default `RUN_LOCK_SECONDS`; shorter in tests). */
  lockSeconds?: number;
  /**
   * Server-side keys mixed into every stored answer's key, the first for new
   * answers, all of them (e.g. during a secrets key rotation) for opening:
   * an answer may carry a secret link's token, and an Idempotency-Key alone
   * (an order id, a counter) may be guessed by whoever reads the database.
   */
  answerSecrets: readonly Buffer[];
}

export function createIdempotency(options: IdempotencyOptions): Idempotency {
  const { store, logger } = options;
  const { seal, open } = answerSealing(options.answerSecrets);
  const lockSeconds = options.lockSeconds ?? RUN_LOCK_SECONDS;
  const replays = options.metrics.counter(
    "idempotent_replays_total",
    "Requests answered from an earlier request with the same Idempotency-Key.",
    [],
  );
  return {
    async run<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      req: MessageShape<I>,
      context: HandlerContext,
      handler: () => Promise<MessageInitShape<O> | MessageShape<O>>,
    ): Promise<MessageInitShape<O> | MessageShape<O>> {
      const key = context.requestHeader.get(IDEMPOTENCY_KEY_HEADER);
      if (key === null) return handler();
      if (!PRINTABLE.test(key)) throw invalidArgument("Idempotency-Key", KEY_RULE);
      const app = appOf(context);
      const operation = `${method.parent.typeName}/${method.name}`;
      const fingerprint = requestFingerprint(method.input, req);
      const attempt = crypto.randomUUID();
      const stored = crypto.createHash("sha256").update(key).digest("hex");
      const input = {
        appId: app.id,
        key: stored,
        operation,
        fingerprint,
        attempt,
        ttlSeconds: IDEMPOTENCY_TTL_SECONDS,
        lockSeconds,
      };
      // The row can vanish between the claim and the read (its run failed): claim again.
      for (let tries = 0; ; tries++) {
        const begun = await store.begin(input);
        if (begun.started) break;
        const existing = begun.existing;
        if (!existing) {
          if (tries < 3) continue;
          throw inUse();
        }
        if (existing.operation !== operation || existing.fingerprint !== fingerprint) {
          throw new PlatformError(
            "idempotency_key_reused",
            "Idempotency-Key: was used for another request in the last 24 hours; send a new key for a new request",
            { details: [`Idempotency-Key: first used for ${existing.operation} with another request`] },
          );
        }
        if (existing.state === "running" || !existing.response) throw inUse();
        replays.inc();
        context.responseHeader.set(REPLAYED_HEADER, "true");
        if (existing.status !== 200) throw storedError(open(key, existing.response));
        return fromBinary(method.output, open(key, existing.response));
      }

      const sealed = (out: MessageInitShape<O> | MessageShape<O>) =>
        seal(key, toBinary(method.output, create(method.output, out)));
      let answered = false;
      setIdempotentRun(context, {
        method,
        async answerIn(trx, out) {
          const owned = await store.finish(app.id, stored, attempt, 200, sealed(out as MessageInitShape<O>), trx);
          if (!owned) throw inUse();
          answered = true;
        },
      });
      // Renewed while the run lives; a failed renewal is retried at the next beat (the hold has two more).
      const heartbeat = setInterval(
        () => {
          store
            .hold(app.id, stored, attempt, lockSeconds)
            .catch((err: unknown) =>
              logger.warn(
                { err: err instanceof Error ? err.message : String(err), appId: app.id, operation },
                "idempotency key hold not renewed",
              ),
            );
        },
        (lockSeconds * 1000) / 3,
      );
      heartbeat.unref();
      let output: MessageShape<typeof method.output>;
      try {
        output = create(method.output, await handler());
      } catch (err) {
        clearInterval(heartbeat);
        if (err instanceof PlatformError && err.outcomeUnknown) {
          // Kept as the answer: a repeat must not do again what may have been done.
          await store
            .finish(app.id, stored, attempt, err.status, seal(key, errorBytes(err)))
            .catch((finishErr: unknown) =>
              logger.warn(
                { err: finishErr instanceof Error ? finishErr.message : String(finishErr), appId: app.id, operation },
                "idempotent error answer not stored; a repeat waits for the run's lock to lapse",
              ),
            );
          throw err;
        }
        await store
          .release(app.id, stored, attempt)
          .catch((releaseErr: unknown) =>
            logger.warn(
              { err: releaseErr instanceof Error ? releaseErr.message : String(releaseErr), appId: app.id, operation },
              "idempotency key not released after a failed request; a retry waits for its lock to lapse",
            ),
          );
        throw err;
      }
      clearInterval(heartbeat);
      if (answered) return output;
      try {
        await store.finish(app.id, stored, attempt, 200, sealed(output));
      } catch (err) {
        // The work is done and answered; a repeat gets 409 until the run's lock lapses, then runs again.
        logger.warn(
          { err: err instanceof Error ? err.message : String(err), appId: app.id, operation },
          "idempotent answer not stored",
        );
      }
      return output;
    },

    housekeeping: () => ({
      name: "idempotency key expiry",
      intervalMs: IDEMPOTENCY_SWEEP_INTERVAL_MS,
      run: (signal) => inBatches(signal, (batch) => store.expire(batch), HOUSEKEEPING_BATCH),
    }),
  };
}

/** JSON text with object keys sorted, lone surrogates escaped (`\ud800`), and anything that is not JSON refused. */
const canonicalJson = configure({ deterministic: true, strict: true });

/**
 * What a repeat under a key is compared by: the SHA-256 of the request in its
 * protobuf JSON form, with object keys sorted and lone surrogates escaped, so
 * that two requests are one exactly when the RPC reads them alike. Not of its
 * binary encoding, as it was: that writes a string as UTF-8, which turns a
 * lone surrogate into U+FFFD, so puts of the payloads "\ud800", "\udbff" and
 * "\ufffd" (three messages: a queue keeps the payload's JSON text, in which
 * they stay apart) were one request, the second and third answered the
 * first's answer and never put; and it keeps a `Struct`'s keys in the order
 * they came, so the same JSON object with its keys in another order was
 * refused as another request. The JSON form keeps every value the RPC reads
 * (64-bit integers and bytes as exact text) and drops what it does not read
 * (unknown fields).
 *
 * A request with no JSON form (a `Value` that is NaN, infinite or unset, as a
 * gRPC client may send it; the RPC refuses it) is compared by its binary
 * encoding, so that the RPC still answers it with its own error.
 */
function requestFingerprint<I extends DescMessage>(schema: I, req: MessageShape<I>): string {
  const sha256 = (data: string | Uint8Array) => crypto.createHash("sha256").update(data).digest("hex");
  let json: string;
  try {
    json = canonicalJson(toJson(schema, req));
  } catch {
    return sha256(toBinary(schema, req));
  }
  // Well-formed text (no lone surrogate left), so its UTF-8 loses nothing.
  return sha256(json);
}

/** An error kept as a key's answer: its code, message and details (what the caller was told). */
function errorBytes(err: PlatformError): Uint8Array {
  return Buffer.from(JSON.stringify({ code: err.code, message: err.message, details: err.details }));
}

function storedError(bytes: Uint8Array): PlatformError {
  const { code, message, details } = JSON.parse(Buffer.from(bytes).toString("utf8")) as {
    code: ErrorCode;
    message: string;
    details?: string[];
  };
  return new PlatformError(code, message, { details, outcomeUnknown: true });
}

/**
 * The AES-256-GCM sealing of stored answers (`iv (12) | tag (16) | ciphertext`).
 * The key is derived from the Idempotency-Key (stored only hashed, so the
 * database alone never opens an answer) and a server-side secret (so a key
 * that is easy to guess does not open it either). Answers stored before the
 * server-side secret was mixed in (within the last day) still open.
 */
function answerSealing(secrets: readonly Buffer[]) {
  if (secrets.length === 0) throw new Error("idempotent answers need a server-side secret");
  const derive = (key: string, secret: Buffer) =>
    Buffer.from(crypto.hkdfSync("sha256", key, secret, "platform-batteries idempotent answer", 32));
  const withoutSecret = Buffer.alloc(0);
  return {
    seal: (key: string, plain: Uint8Array): Uint8Array => {
      const iv = crypto.randomBytes(12);
      const cipher = crypto.createCipheriv("aes-256-gcm", derive(key, secrets[0]), iv);
      const body = Buffer.concat([cipher.update(plain), cipher.final()]);
      return Buffer.concat([iv, cipher.getAuthTag(), body]);
    },
    open: (key: string, sealed: Uint8Array): Uint8Array => {
      const data = Buffer.from(sealed);
      for (const secret of [...secrets, withoutSecret]) {
        const decipher = crypto.createDecipheriv("aes-256-gcm", derive(key, secret), data.subarray(0, 12));
        decipher.setAuthTag(data.subarray(12, 28));
        try {
          return Buffer.concat([decipher.update(data.subarray(28)), decipher.final()]);
        } catch {
          // Sealed under another secret: try the next.
        }
      }
      // Sealed under a secrets key this instance no longer has (dropped from SECRETS_OLD_KEYS within a day).
      throw new PlatformError(
        "conflict",
        "Idempotency-Key: the answer stored for this key cannot be read with this server's secrets keys; the request was not run again",
      );
    },
  };
}

function inUse(): PlatformError {
  return new PlatformError(
    "idempotency_key_in_use",
    "Idempotency-Key: a request with this key is still being processed; retry shortly",
    { retryAfterSeconds: 1 },
  );
}

type Handler = (req: unknown, context: HandlerContext) => unknown;

/**
 * The facility's implementation with every RPC of an `idempotent` route
 * entry wrapped by `idempotency` (the others as they are); REST, Connect and
 * gRPC all call the result.
 */
export function idempotentImpl<T extends object>(
  service: DescService,
  impl: T,
  routes: readonly AnyRestRoute[],
  idempotency: Idempotency,
): T {
  const flagged = new Set(
    routes.filter((r) => r.idempotent && r.rpc.parent.typeName === service.typeName).map((r) => r.rpc.localName),
  );
  if (flagged.size === 0) return impl;
  const wrapped: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (impl as Record<string, unknown>)[method.localName];
    if (typeof fn !== "function") continue;
    const handler = (fn as Handler).bind(impl);
    if (method.methodKind !== "unary" || !flagged.has(method.localName)) {
      wrapped[method.localName] = handler;
      continue;
    }
    const unary = method as DescMethodUnary;
    wrapped[method.localName] = (req: MessageShape<DescMessage>, context: HandlerContext) =>
      idempotency.run(unary, req, context, async () => (await handler(req, context)) as MessageInitShape<DescMessage>);
  }
  return wrapped as T;
}
