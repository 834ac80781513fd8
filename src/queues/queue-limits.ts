/** The queue facility's limits and batch sizes (docs/api.md#queues, docs/queues.md), in one place. */
import { HOUR_MS } from "../core/time.ts";

/** The reserved queue of platform events: apps consume and ack it, never put. */
export const EVENTS_QUEUE = "_events";
/**
 * How long a platform event waits on `_events` for a consumer (or the app's message lifetime, when
 * shorter). Short, because many apps never consume `_events`: they read the event feed, which keeps
 * every event for the whole message lifetime, and their `_events` would otherwise show days of events
 * as a backlog nobody will drain. A consumer that is away longer re-reads at start what the events
 * announce (docs/queues.md, "Platform events").
 */
export const EVENTS_TTL_SECONDS = 3_600;
/** Longest consume wait, and the default (docs/api.md#queues). */
export const MAX_WAIT_SECONDS = 25;
export const MAX_LEASE_SECONDS = 43_200;
/** Longest `delaySeconds` of a put. */
export const MAX_DELAY_SECONDS = 86_400;
/** `Retry-After` hint of `queue_full`: consumers usually drain a little within a few seconds. */
export const QUEUE_FULL_RETRY_AFTER_SECONDS = 5;
/**
 * Concurrent puts on one queue share one statement and one commit (group
 * commit), at most this many rows each and one such statement per queue at a
 * time on an instance. The statement counts the queue under its lock (taken
 * exclusively, migration 0024), so the depth cap is exact up to the cap
 * itself, whatever the number of instances.
 */
export const PUT_BATCH = 32;
/** Concurrent consumes of one queue claim in one statement, at most this many messages. */
export const CLAIM_BATCH = 64;
/** Concurrent acks (of any app) go in one statement, at most this many. */
export const ACK_BATCH = 128;
/** Expiry runs this often on every instance, deleting in batches of `EXPIRE_BATCH`. */
export const EXPIRE_INTERVAL_MS = 15_000;
export const EXPIRE_BATCH = 1_000;
/** How often expired dead letters are deleted (they live days; a minute late is nothing). */
export const DEAD_LETTER_EXPIRE_INTERVAL_MS = 60_000;
/** Hours of puts and acks `GetQueueActivity` answers with (the last day, this hour last). */
export const ACTIVITY_HOURS = 24;
/** Hourly counts are kept this many hours (more than `ACTIVITY_HOURS`), then pruned. */
export const ACTIVITY_KEEP_HOURS = 48;
/** How often messages of deleted apps are removed. */
export const ORPHAN_INTERVAL_MS = HOUR_MS;
/** Most messages of one `PutMessages` and receipts of one `AckMessages`. */
export const MAX_BATCH_MESSAGES = 1_000;
/** Largest window a `StreamMessages` caller may ask for. */
export const MAX_STREAM_WINDOW = 1_000;
/** Most messages one claim of a stream takes (and one stream response carries). */
export const STREAM_CLAIM_BATCH = 256;
/** Most messages one consume with `max` leases. */
export const MAX_CONSUME_MESSAGES = 100;
/** A stream with a full window first asks which of its receipts were acked elsewhere after this long... */
export const STREAM_RECHECK_MIN_MS = 5;
/** ...and, while none was, twice as long each time, up to this. */
export const STREAM_RECHECK_MAX_MS = 100;
/** Most streams whose full windows one statement asks about (each holds at most `MAX_STREAM_WINDOW` receipts). */
export const STREAM_RECHECK_BATCH = 32;
/** A stream's receipt found still leased past its lease end here (extended on another instance) is asked about again this often. */
export const STREAM_EXTENDED_RECHECK_MS = 1_000;
/**
 * Most encoded bytes of one `StreamMessages` response (at least one message is
 * always sent). Standard gRPC clients (grpc-js, grpcio, grpc-go, grpc-java)
 * refuse a message over 4 MiB by default; a claim of large messages is sent
 * as several responses instead.
 */
export const STREAM_RESPONSE_MAX_BYTES = 1 << 20;
/** What a message's JSON encoding adds to its payload's text (id, receipt, times, field names). */
export const STREAM_MESSAGE_JSON_OVERHEAD = 512;

/**
 * How often every instance moves the messages past their policy's `maxDeliveries` whose last lease
 * lapsed (or was nacked) to their dead letters, when nobody consumes the queue (a consume does it at
 * once): a message dies within this of its last lease.
 */
export const DEAD_LETTER_SWEEP_INTERVAL_MS = 5_000;

/**
 * How long a rate-limited queue's token bucket stays without a take before housekeeping deletes it. A bucket
 * is full again after at most 100 s (burst / rate at the lowest rate), so an older one is what a new one is.
 */
export const RATE_BUCKET_IDLE_SECONDS = 3_600;

/**
 * A put, claim or ack whose batcher key (a queue's puts, its claims; all acks) had no call for this long goes to
 * the database at once instead of at the end of the event loop's turn (`core/batcher.ts` "A quiet key"): at a few
 * calls a second nothing would share its statement, and the rest of a turn busy with other apps' requests only
 * delays it.
 */
export const QUIET_KEY_MS = 20;
