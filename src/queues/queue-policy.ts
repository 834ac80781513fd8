/**
 * Queue policies: what an app sets per queue for retries, dead letters,
 * leases, dedup keys and the delivery rate (docs/queues.md "Queue policies"). A policy is stored
 * only as the fields the app set (`queue_policies`, null meaning "the
 * default"), so a default that changes, or an operator limit, applies to every
 * queue that did not choose otherwise. The operator's per-app limits still
 * bound it: with `maxDeliveries` set on the app, a queue can lower it, never
 * raise it or make it unlimited.
 *
 * Claims read the policy on every call, so it is kept here for a moment
 * (`POLICY_CACHE_MS`): a change takes effect at once on the instance that made
 * it and within that moment on the others.
 */
import type { AppRecord } from "../core/apps/apps.ts";
import { NAME_PATTERN, NAME_RULE } from "../core/apps/apps.ts";
import { invalidArgument } from "../core/errors.ts";
import type { Tx } from "../core/database/index.ts";
import { createRefreshingCache } from "../core/refreshing-cache.ts";
import { MAX_LEASE_SECONDS } from "./queue-limits.ts";
import {
  DROP_DEAD_LETTERS,
  createQueueStore,
  type ClaimRule,
  type QueueStore,
  type StoredPolicy,
} from "./queue-store.ts";

/** How long an instance keeps a policy it read. */
const POLICY_CACHE_MS = 2_000;
/** The dedup window of a queue whose app set none (SQS FIFO's). */
const DEFAULT_DEDUP_WINDOW_SECONDS = 300;
const MAX_DEDUP_WINDOW_SECONDS = 86_400;
const MAX_RETRY_DELAY_SECONDS = 43_200;
const DEFAULT_RETRY_BACKOFF = 2;
const MAX_RETRY_BACKOFF = 10;
const DEFAULT_MAX_RETRY_DELAY_SECONDS = 3_600;
/**
 * The default policy's first retry hold (docs/queues.md "Queue policies"): with the default backoff
 * (2) and bound (3,600 s) a failing message comes back after about 1, 2, 4, ... s, up to an hour, as
 * pg-boss's and BullMQ's backoff does, instead of at once (a handler failing on every delivery ran
 * about 180 times a second).
 */
const DEFAULT_RETRY_DELAY_SECONDS = 1;
/**
 * The default share of each hold drawn at random, for a queue that did not set `retryDelaySeconds`:
 * holds of [½, 1] × the backoff's, so messages that failed together do not return together. A queue
 * that set its own delay keeps it exact (jitter 0) unless it sets `retryJitter` too.
 */
const DEFAULT_RETRY_JITTER = 0.5;
/** The bounds of a queue's `maxDeliveriesPerSecond` (0: no limit): one message a hundred seconds, to 100,000 a second. */
const MIN_DELIVERIES_PER_SECOND = 0.01;
const MAX_DELIVERIES_PER_SECOND = 100_000;

/** A queue's policy with every default filled in: what `GET .../policy` answers. */
export interface QueuePolicy {
  maxDeliveries: number;
  /** null: the queue's dead-letter list; `_drop`: deleted; otherwise a queue of the app. */
  deadLetterQueue: string | null;
  retryDelaySeconds: number;
  retryBackoff: number;
  maxRetryDelaySeconds: number;
  /** 0 to 1: each hold is drawn from [hold × (1 − retryJitter), hold]. */
  retryJitter: number;
  /**
   * Whether a lapsed lease is held back too, or only a nack: only when the queue set `retryDelaySeconds`.
   * Under the default a lapse comes back at once, as the message states of docs/api.md have it (a lapse is
   * a consumer that died or was too slow, not a failure the handler reported). Not part of the answers.
   */
  holdLapses: boolean;
  leaseSeconds: number;
  dedupWindowSeconds: number;
  /** Messages handed out a second at most, across all consumers and instances; 0: no limit. */
  maxDeliveriesPerSecond: number;
}

/** A queue's policy as QueueService and AdminService answer it (the unset dead-letter queue left out). */
export function policyMessage(queue: string, p: QueuePolicy) {
  return {
    queue,
    maxDeliveries: p.maxDeliveries,
    deadLetterQueue: p.deadLetterQueue ?? undefined,
    retryDelaySeconds: p.retryDelaySeconds,
    retryBackoff: p.retryBackoff,
    maxRetryDelaySeconds: p.maxRetryDelaySeconds,
    leaseSeconds: p.leaseSeconds,
    dedupWindowSeconds: p.dedupWindowSeconds,
    retryJitter: p.retryJitter,
    maxDeliveriesPerSecond: p.maxDeliveriesPerSecond,
  };
}

/** A change of policy: the fields given replace those fields; `deadLetterQueue: ""` or null sets the list back. */
export type PolicyChange = Partial<Omit<QueuePolicy, "deadLetterQueue">> & { deadLetterQueue?: string | null };

/**
 * The change a request asks for, from its policy fields (QueueService's UpdateQueuePolicy; AdminService's
 * SetQueuePolicy, which has no retry_jitter): only these fields, never the request's others.
 */
export function policyChangeOf(req: PolicyChange): PolicyChange {
  return {
    maxDeliveries: req.maxDeliveries,
    deadLetterQueue: req.deadLetterQueue,
    retryDelaySeconds: req.retryDelaySeconds,
    retryBackoff: req.retryBackoff,
    maxRetryDelaySeconds: req.maxRetryDelaySeconds,
    leaseSeconds: req.leaseSeconds,
    dedupWindowSeconds: req.dedupWindowSeconds,
    retryJitter: req.retryJitter,
    maxDeliveriesPerSecond: req.maxDeliveriesPerSecond,
  };
}

const EMPTY: StoredPolicy = {
  maxDeliveries: null,
  deadLetterQueue: null,
  retryDelaySeconds: null,
  retryBackoff: null,
  maxRetryDelaySeconds: null,
  retryJitter: null,
  leaseSeconds: null,
  dedupWindowSeconds: null,
  maxDeliveriesPerSecond: null,
};

/** The policy in force: the stored fields over the app's limits and the defaults, bounded by the limits. */
export function effectivePolicy(app: AppRecord, stored: StoredPolicy | undefined): QueuePolicy {
  const p = stored ?? EMPTY;
  const limit = app.limits.maxDeliveries;
  let maxDeliveries = p.maxDeliveries ?? limit;
  // The operator's limit bounds the queue's: lowering it later lowers every queue's.
  if (limit > 0 && (maxDeliveries === 0 || maxDeliveries > limit)) maxDeliveries = limit;
  return {
    maxDeliveries,
    deadLetterQueue: p.deadLetterQueue,
    retryDelaySeconds: p.retryDelaySeconds ?? DEFAULT_RETRY_DELAY_SECONDS,
    retryBackoff: p.retryBackoff ?? DEFAULT_RETRY_BACKOFF,
    maxRetryDelaySeconds: p.maxRetryDelaySeconds ?? DEFAULT_MAX_RETRY_DELAY_SECONDS,
    // A delay the app chose stays exact unless it asks for jitter too.
    retryJitter: p.retryJitter ?? (p.retryDelaySeconds === null ? DEFAULT_RETRY_JITTER : 0),
    holdLapses: p.retryDelaySeconds !== null,
    leaseSeconds: Math.min(p.leaseSeconds ?? app.limits.leaseSeconds, MAX_LEASE_SECONDS),
    dedupWindowSeconds: p.dedupWindowSeconds ?? DEFAULT_DEDUP_WINDOW_SECONDS,
    maxDeliveriesPerSecond: p.maxDeliveriesPerSecond ?? 0,
  };
}

/** The claim's view of a policy. `notify` makes the NOTIFY payload for a put on the dead-letter queue. */
export function claimRule(app: AppRecord, policy: QueuePolicy, notify: (queue: string) => string): ClaimRule {
  const target = policy.deadLetterQueue;
  return {
    maxDeliveries: policy.maxDeliveries,
    deadLetterQueue: target,
    deadLetterNotify: target !== null && target !== DROP_DEAD_LETTERS ? notify(target) : undefined,
    ttlSeconds: app.limits.messageTtlSeconds,
    retry: {
      // The claim's hold is the one after a lapse (a nack computes its own, from the same policy).
      delaySeconds: policy.holdLapses ? policy.retryDelaySeconds : 0,
      backoff: policy.retryBackoff,
      maxDelaySeconds: policy.maxRetryDelaySeconds,
      jitter: policy.retryJitter,
    },
  };
}

function integer(field: string, value: number | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || value < min || value > max)
    throw invalidArgument(field, `must be an integer from ${min} to ${max}`);
  return value;
}

/** Checks a change against the rules and the app's limits; returns the stored policy it makes. */
function applyChange(app: AppRecord, queue: string, current: StoredPolicy, change: PolicyChange): StoredPolicy {
  const next = { ...current };
  const limit = app.limits.maxDeliveries;
  if (change.maxDeliveries !== undefined) {
    if (limit > 0) {
      next.maxDeliveries = integer("maxDeliveries", change.maxDeliveries, 1, limit) ?? null;
    } else {
      next.maxDeliveries = integer("maxDeliveries", change.maxDeliveries, 0, 1_000_000) ?? null;
    }
  }
  if (change.deadLetterQueue !== undefined) {
    const target = change.deadLetterQueue;
    if (target === null || target === "") next.deadLetterQueue = null;
    else if (target === DROP_DEAD_LETTERS) next.deadLetterQueue = target;
    else if (!NAME_PATTERN.test(target))
      throw invalidArgument("deadLetterQueue", `${NAME_RULE}, or be ${DROP_DEAD_LETTERS} (drop), or null (the list)`);
    else if (target === queue) throw invalidArgument("deadLetterQueue", "must not be the queue itself");
    else next.deadLetterQueue = target;
  }
  if (change.retryDelaySeconds !== undefined)
    next.retryDelaySeconds = integer("retryDelaySeconds", change.retryDelaySeconds, 0, MAX_RETRY_DELAY_SECONDS)!;
  if (change.retryBackoff !== undefined) {
    const b = change.retryBackoff;
    if (typeof b !== "number" || !Number.isFinite(b) || b < 1 || b > MAX_RETRY_BACKOFF)
      throw invalidArgument("retryBackoff", `must be a number from 1 to ${MAX_RETRY_BACKOFF}`);
    next.retryBackoff = b;
  }
  if (change.maxRetryDelaySeconds !== undefined)
    next.maxRetryDelaySeconds = integer(
      "maxRetryDelaySeconds",
      change.maxRetryDelaySeconds,
      0,
      MAX_RETRY_DELAY_SECONDS,
    )!;
  if (change.retryJitter !== undefined) {
    const j = change.retryJitter;
    if (typeof j !== "number" || !Number.isFinite(j) || j < 0 || j > 1)
      throw invalidArgument("retryJitter", "must be a number from 0 to 1");
    next.retryJitter = j;
  }
  if (change.leaseSeconds !== undefined)
    next.leaseSeconds = integer("leaseSeconds", change.leaseSeconds, 1, MAX_LEASE_SECONDS)!;
  if (change.dedupWindowSeconds !== undefined)
    next.dedupWindowSeconds = integer("dedupWindowSeconds", change.dedupWindowSeconds, 1, MAX_DEDUP_WINDOW_SECONDS)!;
  if (change.maxDeliveriesPerSecond !== undefined) {
    const r = change.maxDeliveriesPerSecond;
    if (typeof r !== "number" || !Number.isFinite(r) || r < 0 || r > MAX_DELIVERIES_PER_SECOND)
      throw invalidArgument(
        "maxDeliveriesPerSecond",
        `must be a number from 0 (no limit) to ${MAX_DELIVERIES_PER_SECOND}`,
      );
    if (r > 0 && r < MIN_DELIVERIES_PER_SECOND)
      throw invalidArgument("maxDeliveriesPerSecond", `must be 0 (no limit) or at least ${MIN_DELIVERIES_PER_SECOND}`);
    next.maxDeliveriesPerSecond = r === 0 ? null : r;
  }
  return next;
}

export interface QueuePolicies {
  /** The stored policy of a queue (cached for `POLICY_CACHE_MS`, read again in the background in its last half). */
  stored(appId: string, queue: string): Promise<StoredPolicy | undefined>;
  get(app: AppRecord, queue: string): Promise<QueuePolicy>;
  /** On `tx` (an operator's unit of work) when given: the change commits with the operator's other writes. */
  update(app: AppRecord, queue: string, change: PolicyChange, tx?: Tx): Promise<QueuePolicy>;
}

export function createQueuePolicies(store: QueueStore, clock: () => number = Date.now): QueuePolicies {
  const cache = createRefreshingCache<StoredPolicy | undefined>({
    lifetimeMs: POLICY_CACHE_MS,
    clock,
    read(key) {
      const at = key.indexOf("|");
      return store.getPolicy(key.slice(0, at), key.slice(at + 1));
    },
  });
  const policies: QueuePolicies = {
    // A queue in steady use never waits for its policy: one consume in twenty of an app consuming ten times a
    // second did, and under another app's flood that wait was among its slowest (the cache's last-half reads).
    stored: (appId, queue) => cache.get(`${appId}|${queue}`),
    async get(app, queue) {
      return effectivePolicy(app, await policies.stored(app.id, queue));
    },
    async update(app, queue, change, tx) {
      const stored = await (tx ? createQueueStore(tx.db) : store).updatePolicy(app.id, queue, (current) =>
        applyChange(app, queue, current, change),
      );
      const remember = () => cache.set(`${app.id}|${queue}`, stored);
      if (tx) tx.afterCommit(remember);
      else remember();
      return effectivePolicy(app, stored);
    },
  };
  return policies;
}
