/**
 * The rule of a queue's name, in one place: the app's own queues follow the
 * name rule of `apps.ts`; the reserved "_events" queue is accepted only where
 * it may be read (consume, ack, the operator's views), never for a put.
 */
import { NAME_PATTERN, NAME_RULE } from "../core/apps/apps.ts";
import { invalidArgument } from "../core/errors.ts";
import { EVENTS_QUEUE } from "./queue-limits.ts";

/** `name`, or `invalid_argument` on the field `queue` naming the rule. */
export function checkQueueName(name: string, allowEvents: boolean): string {
  if (name === EVENTS_QUEUE && allowEvents) return name;
  if (!NAME_PATTERN.test(name)) {
    throw invalidArgument("queue", `${NAME_RULE}${allowEvents ? ` or be ${EVENTS_QUEUE}` : ""}`);
  }
  return name;
}
