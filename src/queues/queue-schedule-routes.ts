/**
 * The REST routes of queue schedules (docs/queues.md "Schedules"), mapped onto `QueueService`'s
 * `PutQueueSchedule`, `ListQueueSchedules` and `DeleteQueueSchedule` (see `queue-schedules.ts`).
 * Times leave and arrive as epoch ms.
 */
import type { JsonValue } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { QueueService, type QueueSchedule } from "../../gen/platform/queues/v1/queues_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { epochMs, jsonObject, optionalInteger, optionalString } from "../core/http/validation.ts";
import { valueFromJson, valueToJson } from "./payload-value.ts";

const SchedulePath = z.object({ queue: z.string(), name: z.string() });
const QueuePath = z.object({ queue: z.string() });

const ScheduleBody = jsonObject({
  cron: z.string({ error: "must be a string" }).meta({
    description: "Five fields, or six with seconds first (e.g. `*/10 * * * * *`); ticks at least 1 s apart.",
  }),
  timezone: optionalString().meta({ description: 'An IANA time zone, e.g. "Europe/Berlin"; "UTC" by default.' }),
  payload: z.unknown().meta({ description: "The JSON value each tick's message carries." }),
  startAt: optionalInteger().meta({ description: "Epoch milliseconds: no tick before." }),
  endAt: optionalInteger().meta({ description: "Epoch milliseconds: no tick after." }),
  catchUp: z
    .enum(["none", "one"], { error: 'must be "none" or "one"' })
    .optional()
    .meta({ description: 'After downtime: "none" (default) skips the missed ticks, "one" puts one message for them.' }),
});

const ScheduleJson = z.object({
  queue: z.string(),
  name: z.string(),
  cron: z.string(),
  timezone: z.string(),
  payload: z.unknown(),
  startAt: z.number().int().nullable(),
  endAt: z.number().int().nullable(),
  catchUp: z.enum(["none", "one"]),
  nextRunAt: z.number().int().nullable().meta({ description: "Epoch milliseconds; null once past `endAt`." }),
  lastRunAt: z.number().int().nullable(),
  fired: z.number().int(),
  skippedFull: z.number().int().meta({ description: "Ticks not put because the queue was at `maxDepth`." }),
  missed: z.number().int(),
});

function scheduleJson(s: QueueSchedule | undefined): z.infer<typeof ScheduleJson> {
  return {
    queue: s?.queue ?? "",
    name: s?.name ?? "",
    cron: s?.cron ?? "",
    timezone: s?.timezone ?? "UTC",
    payload: s?.payload ? valueToJson(s.payload) : null,
    startAt: epochMs(s?.startAt),
    endAt: epochMs(s?.endAt),
    catchUp: s?.catchUp === "one" ? "one" : "none",
    nextRunAt: epochMs(s?.nextRunAt),
    lastRunAt: epochMs(s?.lastRunAt),
    fired: Number(s?.fired ?? 0),
    skippedFull: Number(s?.skippedFull ?? 0),
    missed: Number(s?.missed ?? 0),
  };
}

const EXAMPLE = {
  queue: "reports",
  name: "nightly",
  cron: "0 30 2 * * *",
  timezone: "Europe/Berlin",
  payload: { kind: "nightly-report" },
  startAt: null,
  endAt: null,
  catchUp: "one",
  nextRunAt: 1763947800000,
  lastRunAt: 1763861400000,
  fired: 12,
  skippedFull: 0,
  missed: 1,
} as const;

const ms = (v: number | undefined) => (v === undefined ? undefined : timestampFromMs(v));

export const scheduleRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "PUT",
    url: "/v1/queues/:queue/schedules/:name",
    rpc: QueueService.method.putQueueSchedule,
    responseSchema: ScheduleJson,
    doc: {
      summary: "Create or replace a queue schedule",
      description:
        "Extension. Each tick of `cron` in `timezone` puts one message with `payload` on the queue, exactly once across every instance. A tick that finds the queue at `maxDepth` is skipped and counted in `skippedFull`; a stopped app's ticks are not put. After downtime, `catchUp` decides: `none` skips the missed ticks, `one` puts one message for them. An app has at most 100 schedules.",
      errors: ["app_stopped", "permission_denied", "failed_precondition"],
      requestExample: {
        cron: "0 30 2 * * *",
        timezone: "Europe/Berlin",
        payload: { kind: "nightly-report" },
        catchUp: "one",
      },
      responseExample: EXAMPLE,
    },
    params: SchedulePath,
    body: ScheduleBody,
    request: ({ params, body }) => ({
      queue: params.queue,
      name: params.name,
      cron: body.cron,
      timezone: body.timezone,
      payload: body.payload === undefined ? undefined : valueFromJson(body.payload as JsonValue),
      startAt: ms(body.startAt),
      endAt: ms(body.endAt),
      catchUp: body.catchUp,
    }),
    response: (out) => scheduleJson(out.schedule),
  }),
  defineRoute({
    method: "GET",
    url: "/v1/queues/:queue/schedules",
    rpc: QueueService.method.listQueueSchedules,
    responseSchema: z.object({ schedules: z.array(ScheduleJson) }),
    doc: {
      summary: "List a queue's schedules",
      description: "Extension. Each with its next run (`nextRunAt`) and what became of its ticks so far.",
      errors: ["app_stopped"],
      responseExample: { schedules: [EXAMPLE] },
    },
    params: QueuePath,
    request: ({ params }) => ({ queue: params.queue }),
    response: (out) => ({ schedules: out.schedules.map(scheduleJson) }),
  }),
  defineRoute({
    method: "DELETE",
    url: "/v1/queues/:queue/schedules/:name",
    rpc: QueueService.method.deleteQueueSchedule,
    responseSchema: z.object({}),
    doc: {
      summary: "Delete a queue schedule",
      description: "Extension. No tick of it is put after this answer; messages already put stay.",
      errors: ["app_stopped", "not_found"],
      responseExample: {},
    },
    params: SchedulePath,
    request: ({ params }) => ({ queue: params.queue, name: params.name }),
    response: () => ({}),
  }),
];
