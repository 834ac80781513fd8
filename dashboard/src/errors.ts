/**
 * Errors as sentences an operator can act on. The API's messages are written
 * for programs ("limits.eventsPerDay: must be an integer from 0 to 1000000",
 * "names[4]: must match ^[A-Za-z_]…$"): the field path and the pattern mean
 * little to someone looking at a form. Known rules are said in words, field
 * paths become the labels the screen shows, and the transport's own failures
 * say what happened to the server.
 */
import { Code, ConnectError } from "@connectrpc/connect";

/** The labels of the settings form's limits, by field name (also used by the form). */
export const LIMIT_LABELS: Record<string, string> = {
  eventsPerDay: "Events per day",
  mailPerDay: "Mail per day",
  fastTokensPerDay: "Fast model tokens per day",
  embedTokensPerDay: "Embedding tokens per day",
  maxQueueDepth: "Max queue depth",
  maxPayloadBytes: "Max payload bytes",
  messageTtlSeconds: "Message TTL (seconds)",
  leaseSeconds: "Lease (seconds)",
  maxOutstandingLinks: "Max outstanding secret links",
  linkTtlSeconds: "Secret link TTL (seconds)",
  retentionDays: "Mail and analytics kept (days)",
  maxDeliveries: "Max deliveries",
  eventsPerSecond: "Events per second",
  eventsBurst: "Events burst",
  queuePutsPerSecond: "Queue puts per second",
  queuePutsBurst: "Queue puts burst",
  requestsPerSecond: "Other requests per second",
  requestsBurst: "Other requests burst",
  maxWaitingConsumes: "Max consumes at once",
  maxOpenStreams: "Max open streams",
  maxInFlightRequests: "Max other requests at once",
};

const FIELD_LABELS: Record<string, string> = {
  name: "The name",
  mail_from: "The mail sender address",
  mailFrom: "The mail sender address",
  label: "The label",
  timezone: "The time zone",
  value: "The value",
  query: "The search",
  queue: "The queue name",
  payload: "The payload",
  // A queue policy's fields (SetQueuePolicy names them as the app's REST body does).
  maxDeliveries: "Max deliveries",
  deadLetterQueue: "The dead-letter queue",
  retryDelaySeconds: "The retry delay",
  retryBackoff: "The retry backoff",
  maxRetryDelaySeconds: "The max retry delay",
  leaseSeconds: "The lease",
  dedupWindowSeconds: "The dedup window",
  maxDeliveriesPerSecond: "The rate limit",
};

/** Rules the API states as patterns, said in words. */
const RULES: [RegExp, (field: string) => string][] = [
  [
    /^must match \^\[a-z\]\[a-z0-9_.-\]\{0,62\}\$$/,
    () =>
      "A name starts with a lowercase letter and has at most 63 lowercase letters, digits, dots, hyphens or underscores (no spaces or capitals).",
  ],
  [
    /^must match \^\[A-Za-z_\]\[A-Za-z0-9_\]\{0,127\}\$$/,
    () =>
      "A secret name starts with a letter or an underscore and has at most 128 letters, digits or underscores (for example STRIPE_KEY).",
  ],
];

function sentence(text: string): string {
  const trimmed = text.trim();
  if (trimmed === "") return trimmed;
  const capital = trimmed[0].toUpperCase() + trimmed.slice(1);
  return /[.!?)]$/.test(capital) ? capital : capital + ".";
}

function labelOf(field: string): string {
  const limit = /^limits\.(\w+)$/.exec(field);
  if (limit) return LIMIT_LABELS[limit[1]] ?? limit[1];
  // An index into a list the operator never saw ("names[4]") names nothing useful: the rule says enough.
  if (/\[\d+\]$/.test(field)) return "";
  return FIELD_LABELS[field] ?? field;
}

/** "field: rule" from the API as a sentence; any other message as it was, as a sentence. */
export function describeMessage(message: string): string {
  const match = /^([A-Za-z_][\w.]*(?:\[\d+\])?): (.+)$/s.exec(message);
  if (!match) return sentence(message);
  const [, field, rule] = match;
  for (const [pattern, say] of RULES) if (pattern.test(rule)) return say(field);
  const label = labelOf(field);
  return sentence(label ? `${label} ${rule}` : rule);
}

export function describeError(err: unknown): string {
  if (err instanceof ConnectError) {
    switch (err.code) {
      case Code.Unavailable:
        return err.rawMessage
          ? `The server is unavailable right now: ${describeMessage(err.rawMessage)} Try again in a moment.`
          : "The server is unavailable right now. Try again in a moment.";
      case Code.PermissionDenied:
        return err.rawMessage
          ? describeMessage(err.rawMessage)
          : "Your operator role does not allow this: ask an admin.";
      case Code.Unauthenticated:
        return "The admin token was refused. Sign in again.";
      case Code.Unknown:
      case Code.Internal:
        if (!err.rawMessage || /fetch|network|load failed/i.test(err.rawMessage))
          return "The server did not answer. Check that it is running and reachable.";
        return describeMessage(err.rawMessage);
      default:
        return err.rawMessage ? describeMessage(err.rawMessage) : sentence(Code[err.code]);
    }
  }
  if (err instanceof TypeError) return "The server did not answer. Check that it is running and reachable.";
  if (err instanceof Error) return sentence(err.message);
  return sentence(String(err));
}
