/**
 * The queue policies an instance keeps (`queue-policy.ts`): read from the database, kept for a moment, and read
 * again in the background in the last half of that moment, so a queue in steady use never waits for its policy.
 */
import { beforeAll, expect, it } from "vitest";
import { appFromRow } from "../../src/core/apps/apps.ts";
import { createQueuePolicies } from "../../src/queues/queue-policy.ts";
import { createQueueStore, type QueueStore } from "../../src/queues/queue-store.ts";
import { useMigratedDatabase } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const database = useMigratedDatabase();
let store: QueueStore;
let appId: string;
beforeAll(async () => {
  store = createQueueStore(database.db);
  ({ id: appId } = await tables(database.db)
    .insertInto("apps")
    .values({ name: "policy-cache", status: "running", mail_from: "", limits: "{}" })
    .returning("id")
    .executeTakeFirstOrThrow());
});

/** Sets the queue's stored lease as another instance would (this one's memory is not told). */
const setLease = (queue: string, leaseSeconds: number) =>
  store.updatePolicy(appId, queue, (current) => ({ ...current, leaseSeconds }));

it("reads a policy in use again in the last half of its time, beside its callers, and never serves it past that time", async () => {
  let now = 1_000;
  const reads: Promise<unknown>[] = [];
  const counted: QueueStore = {
    ...store,
    getPolicy(a, q) {
      const read = store.getPolicy(a, q);
      reads.push(read);
      return read;
    },
  };
  const policies = createQueuePolicies(counted, () => now);
  await setLease("jobs", 10);
  expect((await policies.stored(appId, "jobs"))?.leaseSeconds).toBe(10);
  expect(reads).toHaveLength(1);
  await setLease("jobs", 20);

  // In the first half of its time: from memory, not read.
  now += 900;
  expect((await policies.stored(appId, "jobs"))?.leaseSeconds).toBe(10);
  expect(reads).toHaveLength(1);

  // In the last half: still answered from memory (the caller does not wait for the database), and read again
  // beside it, once however many callers come meanwhile.
  now += 200;
  const [first, second] = await Promise.all([policies.stored(appId, "jobs"), policies.stored(appId, "jobs")]);
  expect([first?.leaseSeconds, second?.leaseSeconds]).toEqual([10, 10]);
  expect(reads).toHaveLength(2);
  await Promise.all(reads);
  // The next caller gets what that read found, kept from when it was read.
  now += 10;
  expect((await policies.stored(appId, "jobs"))?.leaseSeconds).toBe(20);
  expect(reads).toHaveLength(2);

  // Unused past its time: never served, read again and waited for.
  await setLease("jobs", 30);
  now += 2_000;
  expect((await policies.stored(appId, "jobs"))?.leaseSeconds).toBe(30);
  expect(reads).toHaveLength(3);
});

it("a change made on this instance while a background read runs is kept, not replaced by the older read", async () => {
  let now = 1_000;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let hold = false;
  let readWhileHeld!: () => void;
  const readDone = new Promise<void>((resolve) => (readWhileHeld = resolve));
  const backgroundReads: Promise<unknown>[] = [];
  const slow: QueueStore = {
    ...store,
    getPolicy(a, q) {
      const read = store.getPolicy(a, q).then(async (policy) => {
        if (hold) {
          readWhileHeld();
          await held;
        }
        return policy;
      });
      if (hold) backgroundReads.push(read);
      return read;
    },
  };
  const policies = createQueuePolicies(slow, () => now);
  const app = appFromRow({
    id: appId,
    name: "policy-cache",
    status: "running",
    mail_from: "",
    analytics_enabled: true,
    secrets_enabled: true,
    limits: {},
    created_at: new Date(),
    revision: 1,
  });
  await setLease("mail", 10);
  expect((await policies.stored(appId, "mail"))?.leaseSeconds).toBe(10);
  now += 1_500;
  hold = true;
  // Starts the background read, which reads 10 and is held before it is kept.
  expect((await policies.stored(appId, "mail"))?.leaseSeconds).toBe(10);
  await readDone;
  await policies.update(app, "mail", { leaseSeconds: 40 });
  release();
  await Promise.all(backgroundReads);
  expect(backgroundReads).toHaveLength(1);
  expect((await policies.stored(appId, "mail"))?.leaseSeconds).toBe(40);
});
