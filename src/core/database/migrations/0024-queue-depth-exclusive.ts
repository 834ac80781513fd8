/**
 * `queue_depth(app, queue)` takes the queue's lock exclusively, so that the
 * depth cap holds whatever the number of instances.
 *
 * 0020 took it in shared mode: batched puts (`putMany`) waited for a
 * serialised one but ran beside each other, each counting with a snapshot
 * that could not see the others' uncommitted rows. Each instance sends at most
 * one batch per queue at a time, so the cap was kept by refusing batches
 * within a slack of it, which holds only while few enough instances send a
 * full batch at the same moment (three, with a slack of 64 and batches of 32);
 * a fourth could add up to 32 past the cap.
 *
 * Taken exclusively, a batch counts with a snapshot taken after every put
 * before it on the queue committed, on any instance: the count is exact, the
 * slack is gone, and batches go up to the cap itself. What it costs is that
 * the batches of one queue from several instances run one after the other
 * (each instance still sends up to 32 puts in one statement); puts on
 * different queues do not wait for each other.
 */
import type { Kysely } from "kysely";
import { queueDepthFunction } from "./0020-queue-depth.ts";

export async function up(db: Kysely<unknown>): Promise<void> {
  await queueDepthFunction("pg_advisory_xact_lock").execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await queueDepthFunction("pg_advisory_xact_lock_shared").execute(db);
}
