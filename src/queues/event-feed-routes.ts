/**
 * `GET /v1/queues/_events/feed`, mapped onto `QueueService.ReadEventFeed`
 * (see `event-feed.ts`). Times leave as epoch ms.
 */
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { epochMs } from "../core/http/validation.ts";

const FeedQuery = z.object({
  after: z
    .string({ error: "must be a string" })
    .optional()
    .meta({ description: "A cursor of an earlier answer; absent starts from now (no past events)." }),
  waitSeconds: z
    .string()
    .regex(/^[0-9]{1,9}$/, { error: "must be an integer from 0 to 25" })
    .transform(Number)
    .optional()
    .meta({ description: "How long to wait when there is no event yet, 0 to 25 (default 0)." }),
});

const FeedResponse = z.object({
  events: z.array(
    z.object({
      cursor: z.string(),
      kind: z.string(),
      at: z.number().int().meta({ description: "Epoch milliseconds." }),
      data: z.unknown(),
    }),
  ),
  cursor: z.string().meta({ description: "Pass it as `after` to read on; the same cursor when nothing came." }),
});

export const eventFeedRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/queues/_events/feed",
    rpc: QueueService.method.readEventFeed,
    responseSchema: FeedResponse,
    doc: {
      summary: "Read the platform events from a cursor (every replica sees every event)",
      description:
        "Beside the `_events` queue, where each event goes to one consumer, every platform event (e.g. `secret.set`) is kept in the app's feed for the app's message lifetime. Every reader reads it from its own cursor and consumes nothing, so every replica of an app learns of each event. Without `after` the read starts from now; it waits up to `waitSeconds` when nothing is there, and always answers the cursor to continue from.",
      errors: ["app_stopped"],
      responseExample: {
        events: [{ cursor: "42", kind: "secret.set", at: 1763892000000, data: { name: "STRIPE_KEY", version: 3 } }],
        cursor: "42",
      },
    },
    query: FeedQuery,
    request: ({ query }) => ({ after: query.after, waitSeconds: query.waitSeconds }),
    response: (out) => ({
      events: out.events.map((e) => ({
        cursor: e.cursor,
        kind: e.kind,
        at: epochMs(e.at),
        data: e.data ? toJson(ValueSchema, e.data) : null,
      })),
      cursor: out.cursor,
    }),
  }),
];
