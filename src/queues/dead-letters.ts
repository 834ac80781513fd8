/**
 * The operator's side of dead letters (AdminService `ListDeadLetters`,
 * `ReplayDeadLetters`, `PurgeDeadLetters`): paging through one queue's dead
 * letters, putting them back in line, deleting them. Messages become dead
 * letters in the claim itself (`store/claim-store.ts`, `claimMany` with a rule);
 * this module only handles them afterwards. Every call is scoped by app and
 * queue, so ids of another app's or queue's dead letters match nothing.
 */
import { invalidArgument } from "../core/errors.ts";
import { isInt64Text } from "../core/text.ts";
import type { DeadLetter, DeadLetterSelection, QueueStore } from "./queue-store.ts";
import type { WakeHub } from "./wake-hub.ts";

/** Dead letters replayed per statement when replaying all of a queue's. */
const REPLAY_BATCH = 1_000;

interface DeadLetterPage {
  deadLetters: DeadLetter[];
  /** Empty on the last page. */
  nextPageToken: string;
}

export interface DeadLetterOperator {
  /** A page of dead letters; payloads cut after `maxChars` + 1 when given (the operator's listing), else whole. */
  list(page: {
    appId: string;
    queue: string;
    pageSize: number;
    pageToken: string;
    maxChars: number | undefined;
  }): Promise<DeadLetterPage>;
  /** Back in line, visible now, deliveries 0, a fresh lifetime of `ttlSeconds`; wakes waiting consumers. Returns how many. */
  replay(appId: string, queue: string, which: DeadLetterSelection, ttlSeconds: number): Promise<number>;
  purge(appId: string, queue: string, which: DeadLetterSelection): Promise<number>;
}

/** The token names the last dead letter of a page (its `seq`); opaque to callers. */
function encodeToken(seq: string): string {
  return Buffer.from(`dl:${seq}`).toString("base64url");
}

function decodeToken(token: string): string | undefined {
  if (token === "") return undefined;
  const text = /^[A-Za-z0-9_-]{1,40}$/.test(token) ? Buffer.from(token, "base64url").toString() : "";
  const match = /^dl:([1-9][0-9]{0,18})$/.exec(text);
  if (!match || !isInt64Text(match[1])) throw invalidArgument("page_token", "is not a page token of ListDeadLetters");
  return match[1];
}

/**
 * The dead letters of `store`: the pool's, or one built on an operator's unit of work, whose replay then
 * commits with the operator's other writes; `committed` runs the wake once that is so (on the pool: at once).
 */
export function createDeadLetterOperator(
  store: QueueStore,
  hub: WakeHub,
  committed: (wake: () => void) => void = (wake) => wake(),
): DeadLetterOperator {
  return {
    async list({ appId, queue, pageSize, pageToken, maxChars }) {
      const after = decodeToken(pageToken);
      // One more than asked tells whether another page follows.
      const rows = await store.listDeadLetters({ appId, queue, afterSeq: after, limit: pageSize + 1, maxChars });
      const page = rows.slice(0, pageSize);
      return { deadLetters: page, nextPageToken: rows.length > pageSize ? encodeToken(page[page.length - 1].seq) : "" };
    },

    async replay(appId, queue, which, ttlSeconds) {
      const notify = hub.payload(appId, queue, 0);
      // On a unit of work every batch and the operator's audit entry are one transaction; the statement's
      // NOTIFY is then sent at commit, so no consumer is woken for a replay that rolls back.
      const total = await replayOn(store, appId, queue, which, ttlSeconds, notify);
      // Local waiters (no more wakes than waiters); other instances through the statement's NOTIFY.
      committed(() => {
        for (let n = Math.min(total, hub.waiting()); n > 0; n--) hub.announce(appId, queue, 0);
      });
      return total;
    },

    purge: (appId, queue, which) => store.purgeDeadLetters(appId, queue, which),
  };
}

async function replayOn(
  store: QueueStore,
  appId: string,
  queue: string,
  which: DeadLetterSelection,
  ttlSeconds: number,
  notify: string | undefined,
): Promise<number> {
  if ("ids" in which)
    return store.replayDeadLetters({ appId, queue, which, limit: which.ids.length, ttlSeconds, notify });
  // Those dead when the call began, in batches: letters that die again
  // meanwhile (replayed to a consumer that still fails) are not replayed
  // once more by this call, so it ends.
  const upToSeq = await store.lastDeadLetterSeq(appId, queue);
  if (upToSeq === undefined) return 0;
  let total = 0;
  for (;;) {
    const n = await store.replayDeadLetters({
      appId,
      queue,
      which: { all: true, upToSeq },
      limit: REPLAY_BATCH,
      ttlSeconds,
      notify,
    });
    total += n;
    if (n < REPLAY_BATCH) return total;
  }
}
