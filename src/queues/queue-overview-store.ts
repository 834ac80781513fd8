/**
 * The operator's overview of every app's queues (AdminService GetOverview),
 * in bounded work whatever the backlog: the messages stored are the sum of
 * `queue_counts`, the dead letters that of `dead_letter_counts` (both kept by
 * triggers, one row per queue and slot), and a queue's oldest waiting message
 * is the head of its line (one index probe per queue, as `queueTotals` does),
 * so nothing counts or scans the messages or the letters themselves.
 */
import { sql } from "kysely";
import type { Db } from "../core/database/index.ts";
import { QUEUES_PROBED, type QueueAttentionRow } from "./queue-attention-store.ts";
import type { QueueTables } from "./queue-store.ts";

export interface QueueOverview {
  /** Messages stored across apps: waiting, leased or held back. */
  messages: number;
  /** Dead letters stored across apps. */
  deadLetters: number;
  /** At most `limit` queues with dead letters or a waiting message older than the bound, most dead letters first. */
  attention: QueueAttentionRow[];
}

export async function queueOverview(database: Db, oldAgeSeconds: number, limit = 200): Promise<QueueOverview> {
  const db = database.withTables<QueueTables>();
  const [totals, rows] = await Promise.all([
    sql<{ messages: string | number; dead: string | number }>`
      SELECT (SELECT coalesce(sum(n), 0) FROM queue_counts) AS messages,
             (SELECT coalesce(sum(n), 0) FROM dead_letter_counts) AS dead`.execute(db),
    sql<{ app_id: string; queue: string; dead: string | number; age: string | number }>`
      WITH dead AS (
        SELECT app_id, queue, sum(n) AS dead FROM dead_letter_counts GROUP BY app_id, queue HAVING sum(n) > 0
      ), old AS (
        SELECT q.app_id, q.queue, extract(epoch FROM now() - head.visible_at)::float8 AS age
        FROM (SELECT app_id, queue FROM queue_counts GROUP BY app_id, queue HAVING sum(n) > 0 LIMIT ${QUEUES_PROBED}) q
        CROSS JOIN LATERAL (
          SELECT visible_at FROM queue_messages m
          WHERE m.app_id = q.app_id AND m.queue = q.queue AND m.expires_at > now()
          ORDER BY visible_at LIMIT 1
        ) head
        WHERE head.visible_at < now() - make_interval(secs => ${oldAgeSeconds})
      )
      SELECT coalesce(d.app_id, o.app_id) AS app_id, coalesce(d.queue, o.queue) AS queue,
             coalesce(d.dead, 0) AS dead, coalesce(o.age, 0) AS age
      FROM dead d FULL JOIN old o ON o.app_id = d.app_id AND o.queue = d.queue
      ORDER BY 3 DESC, 4 DESC
      LIMIT ${limit}`.execute(db),
  ]);
  return {
    messages: Number(totals.rows[0].messages),
    deadLetters: Number(totals.rows[0].dead),
    attention: rows.rows.map((r) => ({
      appId: r.app_id,
      queue: r.queue,
      deadLetters: Number(r.dead),
      oldestAgeSeconds: Math.floor(Number(r.age)),
    })),
  };
}
