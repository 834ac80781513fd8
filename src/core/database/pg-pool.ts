/**
 * The `pg` pool as Kysely sees it, with two things added on the way:
 *
 * - Every statement is bounded. A database that stops answering (a hung
 *   server, a network that drops packets without resetting the connection)
 *   would otherwise hold each request, and the pool connection it took, for
 *   as long as the hang lasts; a full pool then holds every other request too.
 *   The server cancels a statement that runs longer than the bound
 *   (`statement_timeout`, set on each connection); a statement the server does
 *   not answer at all shortly after is given up on here, and its connection
 *   is destroyed (it may still be mid-statement, so it cannot be reused). The
 *   caller gets `DatabaseNoAnswerError`, answered 503 `unavailable` like any
 *   other outage. Waiting for a free connection is bounded by the pool's
 *   `connectionTimeoutMillis`. A consumer's long-poll waits outside any
 *   statement (for a wake-up), so it is not cut short by the bound.
 * - Statements marked with `PREPARED` are sent as named prepared statements,
 *   through pg's `{ name, text, values }` query config.
 *
 * - Connections are handed out fairly between apps (`fair-gate.ts`, the app
 *   of the work from `tenant.ts`): an app holds at most `appShare` of the
 *   pool, so the rest is there for the others even while its statements are
 *   stuck, and waiting apps are served in turn, not in arrival order. One
 *   app's flood queues behind itself.
 *
 * Every statement that answers tells `onAnswer`, so an outage is over as soon
 * as the database answers again, not only when a new connection is made.
 */
import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from "kysely";
import pg from "pg";
import { DatabaseNoAnswerError, isFailover } from "./health.ts";
import { preparedNameOf } from "./prepared.ts";
import { createFairGate } from "../fair-gate.ts";
import { currentTenant } from "../tenant.ts";

/** How long after the server-side bound a statement without any answer is given up on. */
const NO_ANSWER_GRACE_MS = 1000;

export interface BoundedPoolOptions {
  /** The longest a statement may run (server-side `statement_timeout`); undefined: unbounded (migrations, the CLI). */
  statementTimeoutMs: number | undefined;
  /** A statement (`text`) sent at `sentAt` (epoch ms) answered: the database is reachable. */
  onAnswer(sentAt: number, text: string): void;
  /** The most of the pool one app holds (0 to 1); default 1 (no cap, still in turn). */
  appShare?: number;
  /** How long a request may wait for its turn (then it fails as pg's own pool wait does); default 5000. */
  waitMs?: number;
}

/** A statement sent and not answered yet, as the sweep sees it. */
interface InFlight {
  sentAt: number;
  giveUp(): void;
}

/** `pool` for Kysely's `PostgresDialect`. */
export function boundedPool(pool: pg.Pool, options: BoundedPoolOptions): PostgresPool {
  const bound = options.statementTimeoutMs === undefined ? undefined : options.statementTimeoutMs + NO_ANSWER_GRACE_MS;
  // One sweep for every statement in flight, not a timer each: a timer and a `Promise.race` per statement
  // were a measurable part of a short request's cost. The sweep runs only while statements are in flight,
  // so a statement is given up on between `bound` and `bound` plus one sweep period after it was sent.
  const inFlight = new Set<InFlight>();
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  // The pool's own queue is first come, first served: the gate in front of it, as large as the pool,
  // decides who goes next, so the pool itself never has a waiter beyond one being connected.
  const gate = createFairGate({
    capacity: (pool.options as { max?: number }).max ?? 10,
    maxShare: options.appShare ?? 1,
    timeoutMs: options.waitMs ?? 5000,
    // The text pg uses for its own pool wait, which `health.ts` reads as the database being unreachable.
    timeoutError: () => new Error("timeout exceeded when trying to connect"),
  });
  /** The app each checked-out connection works for, to give its place back at release. */
  const tenants = new Map<pg.PoolClient, string | undefined>();
  let sweep: NodeJS.Timeout | undefined;
  const sweepEveryMs = bound === undefined ? 0 : Math.max(50, Math.min(500, bound / 4));
  const sweepNow = () => {
    const now = Date.now();
    for (const entry of inFlight) if (now - entry.sentAt >= bound!) entry.giveUp();
    if (inFlight.size === 0) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };
  return {
    options: pool.options,
    Client: (pool as unknown as { Client: PostgresPool["Client"] }).Client,
    end: () => pool.end(),
    connect(): Promise<PostgresPoolClient> {
      const tenant = currentTenant();
      // pg's callback form inside one promise: its promise form made a promise and a callback of its own
      // per checkout, and an `async` function here one more promise and turn.
      const checkout = (resolve: (client: PostgresPoolClient) => void, reject: (err: Error) => void) =>
        pool.connect((err, client) => {
          if (err || client === undefined) {
            gate.release(tenant);
            reject(err ?? new Error("no connection"));
            return;
          }
          tenants.set(client, tenant);
          let wrapper = wrappers.get(client);
          if (wrapper === undefined) wrappers.set(client, (wrapper = wrap(client)));
          resolve(wrapper);
        });
      return gate.acquire(tenant).then(() => new Promise<PostgresPoolClient>(checkout));
    },
  };

  /**
   * The client as Kysely sees it, made once per connection. Why once: Kysely keys its own per-connection
   * object by this one (a WeakMap), so a new wrapper per checkout made a new entry and a new connection
   * object per statement; and an object literal with an accessor (`processID`) gets a map of its own, in
   * the old generation, which kept each one, with what it reached, past the young generation's collections.
   */
  function wrap(client: pg.PoolClient): PostgresPoolClient {
    /** Set when a statement got no answer in time: the connection is destroyed at release, never reused. */
    let abandoned: Error | undefined;
    /**
     * Set when a statement met a failover (`isFailover`: the server is read-only, or ended the session):
     * the connection is destroyed at release, so the pool makes a new one, which the proxy in front sends
     * to the new primary. Statements after it still run (a transaction's ROLLBACK).
     */
    let discarded: Error | undefined;
    const failed = (err: Error): Error => {
      if (isFailover(err)) discarded = err;
      return err;
    };
    const run = <R>(text: string, values: readonly unknown[]): Promise<PostgresQueryResult<R>> => {
      // A statement after an abandoned one (a transaction's ROLLBACK) would wait behind it: fail at once.
      if (abandoned) return Promise.reject(abandoned);
      const name = preparedNameOf(text);
      const sentAt = Date.now();
      // pg's callback form, not its promise: the promise pg makes per statement kept each request's objects
      // alive past the young generation's collections (most of a short request's objects were promoted).
      // A `Query` made from the text, its name set after: handed a config object, pg copies it property by
      // property (descriptors and all) for every statement, a few microseconds of a light request.
      const statement = (callback: (err: Error | null, result: pg.QueryResult) => void) => {
        const query = new pg.Query(text, values as unknown[], callback as never);
        if (name) (query as { name?: string }).name = name;
        client.query(query);
      };
      if (bound === undefined) {
        return new Promise<PostgresQueryResult<R>>((resolve, reject) => {
          statement((err, result) => (err ? reject(failed(err)) : resolve(answered<R>(result, sentAt, text))));
        });
      }
      return new Promise<PostgresQueryResult<R>>((resolve, reject) => {
        const entry: InFlight = {
          sentAt,
          giveUp() {
            inFlight.delete(entry);
            abandoned = new DatabaseNoAnswerError(bound);
            // The statement may still settle (or fail when the connection is destroyed): nobody waits for it now.
            reject(abandoned);
          },
        };
        inFlight.add(entry);
        sweep ??= setInterval(sweepNow, sweepEveryMs).unref();
        statement((err, result) => {
          if (!inFlight.delete(entry)) return;
          if (err) reject(failed(err));
          else resolve(answered<R>(result, sentAt, text));
        });
      });
    };
    const answered = <R>(result: pg.QueryResult, sentAt: number, text: string): PostgresQueryResult<R> => {
      options.onAnswer(sentAt, text);
      return result as unknown as PostgresQueryResult<R>;
    };
    return {
      get processID() {
        return (client as unknown as { processID?: number }).processID;
      },
      query: ((textOrCursor: string | PostgresCursor<unknown>, values: readonly unknown[]) =>
        typeof textOrCursor === "string"
          ? run(textOrCursor, values)
          : client.query(textOrCursor as never)) as PostgresPoolClient["query"],
      release(destroy?: boolean) {
        const tenant = tenants.get(client);
        tenants.delete(client);
        client.release(abandoned ?? discarded ?? destroy);
        gate.release(tenant);
      },
    };
  }
}

/** The connection options that make the server enforce the bound itself (`statement_timeout`). */
export function statementTimeoutOption(statementTimeoutMs: number | undefined): string {
  return statementTimeoutMs === undefined ? "" : `-c statement_timeout=${statementTimeoutMs}`;
}
