/**
 * A complete worker: takes signup jobs from a queue, writes a welcome note
 * with the platform's model, mails it, and counts it in analytics. It reads
 * PLATFORM_ANALYTICS_URL and PLATFORM_SERVICE_TOKEN from the environment and
 * stops cleanly on SIGTERM or SIGINT: no new job is taken, running jobs
 * finish and are acked, and the buffered analytics events are flushed.
 *
 *   node examples/worker.ts            (QUEUE=signups, CONCURRENCY=4 by default)
 *
 * Put a job:  curl -H "Authorization: Bearer $PLATFORM_SERVICE_TOKEN" -H 'content-type: application/json' \
 *               -d '{"payload":{"email":"ada@example.com","name":"Ada"}}' $PLATFORM_ANALYTICS_URL/v1/queues/signups
 */
import { createClient, PlatformError, type QueueMessage } from "@platform-batteries/client";

interface SignupJob {
  email: string;
  name: string;
}

const queue = process.env.QUEUE ?? "signups";
const concurrency = Number(process.env.CONCURRENCY ?? 4);

// One signal for the whole app: SIGTERM (the platform stopping the app) or Ctrl-C.
// Aborting it shuts the client down safely: no new job is taken, running jobs finish
// (their own calls keep working) and are acked, analytics are flushed, then calls end.
const shutdown = new AbortController();
process.once("SIGTERM", () => shutdown.abort());
process.once("SIGINT", () => shutdown.abort());

// Jobs still running 20 s after SIGTERM are abandoned (named below); they come back after their lease.
const client = createClient({ signal: shutdown.signal, shutdownTimeoutMs: 20_000 });

// Idempotent: safe to run at every start.
await client.analytics.registerType({ name: "welcome.sent", properties: { model: "string" } });

async function welcome(message: QueueMessage<SignupJob>, signal: AbortSignal): Promise<void> {
  const { email, name } = message.payload;
  const note = await client.inference.generate(
    {
      messages: [
        { role: "system", content: "You write one warm, short sentence welcoming a new user." },
        { role: "user", content: `Welcome ${name}.` },
      ],
      maxTokens: 60,
    },
    // Keyed by the job too: a job delivered again gets the same note back (no tokens spent), so
    // the mail below is the same request as the first time and its key answers it.
    { signal, idempotencyKey: `welcome-note-${message.id}` },
  );
  // Keyed by the job: if this job is delivered again (a crash before the ack), the service
  // answers the first send instead of mailing twice. If this throws, the job is given back
  // (nack) and retried after the queue policy's delay.
  await client.mail.send(
    { to: email, subject: `Welcome, ${name}`, text: note.text },
    { signal, idempotencyKey: `welcome-${message.id}` },
  );
  client.analytics.track("welcome.sent", { model: note.model });
  console.log(JSON.stringify({ handled: message.id, email, deliveries: message.deliveries }));
}

// `signal` aborts only if the job is abandoned at the shutdown timeout.
const worker = client.queues.work<SignupJob>(queue, (message, { signal }) => welcome(message, signal), {
  concurrency,
  // The worker extends the lease while a job runs (heartbeat), so a slow job is not handed out twice.
  leaseSeconds: 60,
  onLeaseLost: ({ message }) => console.warn(JSON.stringify({ leaseLost: message.id })),
  onError: (error, message) => {
    const code = error instanceof PlatformError ? error.code : "error";
    console.error(JSON.stringify({ failed: message?.id ?? null, code, error: String(error) }));
  },
});
console.log(JSON.stringify({ ready: queue, concurrency }));

await worker.done; // settles once stopped and every running job is acked (or abandoned)
// The shutdown the signal started (close() is idempotent): analytics flushed, then calls ended.
const { abandoned } = await client.close();
if (abandoned.length > 0) console.warn(JSON.stringify({ abandoned: abandoned.map((m) => m.id) }));
console.log(JSON.stringify({ stopped: queue }));
