/**
 * The platform-event feed (`ReadEventFeed`, `GET /v1/queues/_events/feed`):
 * beside the `_events` queue, where each event goes to ONE consumer, every
 * platform event is appended to the app's feed, which every reader (every
 * replica of the app) reads from its own cursor. Reading consumes nothing;
 * events stay for the app's message lifetime (on `_events`, an hour) and are swept
 * by housekeeping.
 *
 * A read that finds nothing waits (long-poll) until an append of its app
 * wakes it: appends on this process wake local readers directly; appends on
 * other instances arrive as a NOTIFY on `EVENT_FEED_CHANNEL`, sent at their
 * commit. Unlike the queue's wake-ups (one hint, one waiter) every reader of
 * the app wakes, since every one of them is to see the event. A lost
 * connection of the LISTEN wakes every reader, which reads again.
 */
import crypto from "node:crypto";
import { fromJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ReadEventFeedRequest, ReadEventFeedResponseSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import type { AppRecord } from "../core/apps/apps.ts";
import { appOf, currentApp } from "../core/auth.ts";
import type { Database, InTransaction } from "../core/database/index.ts";
import { createAbortFanout } from "../core/abort-fanout.ts";
import { throwIfPastDeadline } from "../core/deadline.ts";
import { invalidArgument } from "../core/errors.ts";
import { batchedTask, RETENTION_INTERVAL_MS, type HousekeepingTask } from "../core/housekeeping.ts";
import type { Metrics } from "../core/metrics.ts";
import { isInt64Text } from "../core/text.ts";
import { EVENT_FEED_CHANNEL, type EventFeedStore } from "./event-feed-store.ts";
import { EXPIRE_BATCH, EXPIRE_INTERVAL_MS, MAX_WAIT_SECONDS } from "./queue-limits.ts";

/** Most events in one answer; a reader with more to catch up on reads again at once. */
const FEED_PAGE = 100;

export interface EventFeed {
  /**
   * The feed's copy of a platform event, as work for the transaction that puts
   * the event on `_events` (so a crash between the two cannot leave it out of
   * the feed). Call `appended` once that transaction committed.
   */
  append(app: AppRecord, kind: string, at: number, data: JsonValue): InTransaction;
  /** After an append committed: wakes every reader of the app on this process (others learn by NOTIFY). */
  appended(appId: string): void;
  /** `QueueService.ReadEventFeed`. */
  readEventFeed(
    req: ReadEventFeedRequest,
    context: HandlerContext,
  ): Promise<MessageInitShape<typeof ReadEventFeedResponseSchema>>;
  housekeeping(): HousekeepingTask[];
  start(): Promise<void>;
  close(): Promise<void>;
}

export interface EventFeedOptions {
  store: EventFeedStore;
  database: Database;
  logger: Logger;
  metrics: Metrics;
  /** Aborted when the server starts shutting down: waiting reads end at once. */
  shutdownSignal: AbortSignal;
}

/** A cursor is the decimal id of an event (a PostgreSQL bigint), "0" before the first. */
function parseCursor(after: string): bigint {
  if (!isInt64Text(after))
    throw invalidArgument("after", "must be a cursor returned by the feed (a string of decimal digits)");
  return BigInt(after);
}

export function createEventFeed(options: EventFeedOptions): EventFeed {
  const { store, logger } = options;
  const instanceId = crypto.randomBytes(6).toString("base64url");
  /** The readers waiting on this process, by app: each is woken (all of them) by an append of its app. */
  const waiting = new Map<string, Set<() => void>>();
  let unlisten: (() => Promise<void>) | undefined;
  const atShutdown = createAbortFanout(options.shutdownSignal);
  const waitingGauge = options.metrics.gauge(
    "queue_feed_waiting_readers",
    "Event feed reads waiting (long-polling) on this instance.",
    [],
  );

  const wakeApp = (appId: string) => {
    const set = waiting.get(appId);
    if (set) for (const wake of [...set]) wake();
  };
  const wakeAll = () => {
    for (const appId of [...waiting.keys()]) wakeApp(appId);
  };

  /** Registered BEFORE the read, so that an append between the read and the wait still wakes it. */
  function register(appId: string) {
    let woken = false;
    let resolve: (() => void) | undefined;
    const wake = () => {
      woken = true;
      resolve?.();
    };
    let set = waiting.get(appId);
    if (!set) waiting.set(appId, (set = new Set()));
    set.add(wake);
    let counted = false;
    return {
      /** Resolves when woken, at `untilMs` or on abort. */
      wait(untilMs: number, signal: AbortSignal): Promise<void> {
        if (woken || signal.aborted) return Promise.resolve();
        if (!counted) {
          counted = true;
          waitingGauge.inc();
        }
        return new Promise<void>((done) => {
          const finish = () => {
            clearTimeout(timer);
            signal.removeEventListener("abort", finish);
            resolve = undefined;
            done();
          };
          const timer = setTimeout(finish, Math.max(0, untilMs - Date.now()));
          signal.addEventListener("abort", finish, { once: true });
          resolve = finish;
        });
      },
      /** Clears the wake before the next read. */
      reset() {
        woken = false;
      },
      leave() {
        if (counted) waitingGauge.dec();
        set.delete(wake);
        if (set.size === 0 && waiting.get(appId) === set) waiting.delete(appId);
      },
    };
  }

  return {
    append: (app, kind, at, data) => async (trx) => {
      await store.append(trx, {
        appId: app.id,
        kind,
        at: new Date(at),
        data: JSON.stringify(data),
        ttlSeconds: app.limits.messageTtlSeconds,
        notify: `${instanceId}|${app.id}`,
      });
    },

    appended: (appId) => wakeApp(appId),

    async readEventFeed(req, context): Promise<MessageInitShape<typeof ReadEventFeedResponseSchema>> {
      const app = appOf(context);
      const waitSeconds = req.waitSeconds ?? 0;
      if (!Number.isInteger(waitSeconds) || waitSeconds < 0 || waitSeconds > MAX_WAIT_SECONDS)
        throw invalidArgument("waitSeconds", `must be an integer from 0 to ${MAX_WAIT_SECONDS}`);
      let cursor = req.after === undefined ? BigInt(await store.head(app.id)) : parseCursor(req.after);
      const deadline = Date.now() + waitSeconds * 1000;
      const stop = new AbortController();
      const onAbort = () => stop.abort();
      if (context.signal.aborted) stop.abort();
      context.signal.addEventListener("abort", onAbort, { once: true });
      atShutdown.add(onAbort);
      const waiter = register(app.id);
      try {
        for (let again = false; ; again = true) {
          // A read after a wait is for the app as it is now: deleted or its token revoked meanwhile, it is
          // refused as a new read would be (as a waiting consume is).
          if (again) await currentApp(context);
          waiter.reset();
          const rows = await store.read(app.id, cursor, FEED_PAGE);
          if (rows.length > 0) {
            cursor = BigInt(rows[rows.length - 1].id);
            return {
              cursor: cursor.toString(),
              events: rows.map((r) => ({
                cursor: r.id,
                kind: r.kind,
                at: timestampFromMs(r.at.getTime()),
                data: fromJson(ValueSchema, JSON.parse(r.data) as JsonValue),
              })),
            };
          }
          if (stop.signal.aborted || Date.now() >= deadline) {
            throwIfPastDeadline(context, "an event");
            return { cursor: cursor.toString(), events: [] };
          }
          await waiter.wait(deadline, stop.signal);
        }
      } finally {
        waiter.leave();
        context.signal.removeEventListener("abort", onAbort);
        atShutdown.delete(onAbort);
      }
    },

    housekeeping: () => [
      batchedTask("queue event feed expiry", EXPIRE_INTERVAL_MS, (batch) => store.expire(batch), EXPIRE_BATCH),
      batchedTask(
        "queue event feed of deleted apps",
        RETENTION_INTERVAL_MS,
        (batch) => store.deleteOrphans(batch),
        EXPIRE_BATCH,
      ),
    ],

    async start() {
      unlisten = await options.database.listen(
        EVENT_FEED_CHANNEL,
        (payload) => {
          const [instance, appId] = payload.split("|");
          if (instance !== instanceId && appId) wakeApp(appId);
        },
        () => {
          logger.info("event feed wake-up connection re-established; waking every waiting reader");
          wakeAll();
        },
      );
    },

    async close() {
      await unlisten?.();
      unlisten = undefined;
    },
  };
}
