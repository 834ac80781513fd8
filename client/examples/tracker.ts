/**
 * A page-view tracker: every line on stdin is a path that was viewed. Events
 * are batched by the client (sent when 100 are waiting or 2 s after the first
 * one), and whatever is still buffered is sent on SIGTERM, SIGINT or the end
 * of stdin. Events the daily cap refused are reported, not thrown.
 *
 *   printf '/\n/pricing\n' | node examples/tracker.ts
 */
import { createClient } from "@platform-batteries/client";

const shutdown = new AbortController();
process.once("SIGTERM", () => shutdown.abort());
process.once("SIGINT", () => shutdown.abort());

const client = createClient({
  signal: shutdown.signal,
  analytics: {
    batchSize: 100,
    flushIntervalMs: 2000,
    onSent: ({ events, remainingToday }) => console.log(JSON.stringify({ sent: events, remainingToday })),
    onDrop: ({ reason, events }) => console.warn(JSON.stringify({ dropped: events.length, reason })),
  },
});

await client.analytics.registerType({ name: "page.view", properties: { path: "string" } });
console.log(JSON.stringify({ ready: true }));

let buffered = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk: string) => {
  buffered += chunk;
  const lines = buffered.split("\n");
  buffered = lines.pop() ?? "";
  for (const line of lines) {
    const path = line.trim();
    if (!path) continue;
    client.analytics.track("page.view", { path });
    console.log(JSON.stringify({ tracked: path }));
  }
});
process.stdin.once("end", () => shutdown.abort());

// The client flushes on abort; close() waits for that flush.
await new Promise<void>((resolve) => shutdown.signal.addEventListener("abort", () => resolve(), { once: true }));
await client.close();
process.stdin.destroy();
console.log(JSON.stringify({ stopped: true }));
