/**
 * Every authenticated endpoint of docs/api.md, with a request that is valid
 * in shape, and whether a stopped app gets 403 there
 * (docs/api.md#authentication). Auth tests loop over this one list.
 */
export interface Endpoint {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  /** A stopped app is refused this operation (403 `app_stopped`). */
  stoppedGets403: boolean;
}

export const endpoints: Endpoint[] = [
  { method: "POST", path: "/v1/analytics/types", body: { name: "signup" }, stoppedGets403: true },
  { method: "GET", path: "/v1/analytics/types", stoppedGets403: false },
  { method: "POST", path: "/v1/analytics/events", body: { events: [{ type: "signup" }] }, stoppedGets403: true },
  { method: "POST", path: "/v1/analytics/query", body: { type: "signup", since: 0 }, stoppedGets403: false },
  {
    method: "POST",
    path: "/v1/mail/send",
    body: { to: "a@example.com", subject: "s", text: "t" },
    stoppedGets403: true,
  },
  { method: "GET", path: "/v1/inference/models", stoppedGets403: false },
  { method: "POST", path: "/v1/inference/generate", body: { prompt: "hi", maxTokens: 8 }, stoppedGets403: true },
  // Embed is refused too: a stopped app must not spend its allowance.
  { method: "POST", path: "/v1/inference/embed", body: { input: "hi" }, stoppedGets403: true },
  { method: "GET", path: "/v1/queues", stoppedGets403: true },
  { method: "POST", path: "/v1/queues/jobs", body: { payload: 1 }, stoppedGets403: true },
  { method: "POST", path: "/v1/queues/jobs/consume", body: { waitSeconds: 0 }, stoppedGets403: true },
  { method: "POST", path: "/v1/queues/_ack", body: { receipt: "nope" }, stoppedGets403: true },
  { method: "GET", path: "/v1/secrets", stoppedGets403: true },
  { method: "GET", path: "/v1/secrets/API_KEY", stoppedGets403: true },
  { method: "POST", path: "/v1/secrets/API_KEY/link", stoppedGets403: true },
];
