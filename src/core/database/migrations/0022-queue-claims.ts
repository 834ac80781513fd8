/**
 * `claims`: how many times a message was leased in all its lives, on
 * `queue_messages` and `queue_dead_letters`; a receipt names the message and
 * this count.
 *
 * Receipts named the `deliveries` count, which a replay from the dead letters
 * resets to 0: the first delivery after a replay got, byte for byte, the
 * receipt of the first delivery before the message died, so a consumer whose
 * lease had lapsed long ago could ack (delete) or nack (hand to a second
 * consumer) the message another consumer now held. `claims` only rises (a
 * lease never handed out is given back by `release`, one down), across a death
 * and a replay too; `deliveries` keeps counting toward `maxDeliveries` and
 * starts again at 0 on a replay, as documented. Rows already there start with
 * `claims = deliveries`, so receipts handed out before this change still ack.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  for (const table of ["queue_messages", "queue_dead_letters"]) {
    await sql`ALTER TABLE ${sql.table(table)} ADD COLUMN claims integer NOT NULL DEFAULT 0`.execute(db);
    await sql`UPDATE ${sql.table(table)} SET claims = deliveries WHERE deliveries <> 0`.execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ["queue_dead_letters", "queue_messages"])
    await sql`ALTER TABLE ${sql.table(table)} DROP COLUMN claims`.execute(db);
}
