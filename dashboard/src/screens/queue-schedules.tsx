/**
 * An app's queue schedules on the queues screen (AdminService ListQueueSchedules; docs/queues.md
 * "Schedules"): each schedule's queue, name, cron expression and time zone, its next and last run, and what
 * became of its ticks. Runs are shown in the schedule's own time zone (the one its cron is read in), with
 * seconds, since a cron may tick every second.
 */
import { useQuery } from "@connectrpc/connect-query";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { listQueueSchedules } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { QueueSchedule } from "../../../gen/platform/queues/v1/queues_pb.js";
import { Empty, QueryView } from "../ui.tsx";

/** A run as "29 Nov 2026, 09:00:00 CET": in the schedule's zone, with the zone's abbreviation. */
function runText(ts: Timestamp | undefined, timeZone: string): string {
  if (!ts) return "—";
  const at = timestampDate(ts);
  try {
    return at.toLocaleString("en-GB", { timeZone, dateStyle: "medium", timeStyle: "long" });
  } catch {
    // A zone this browser does not know: UTC, said so.
    return `${at.toLocaleString("en-GB", { timeZone: "UTC", dateStyle: "medium", timeStyle: "medium" })} UTC`;
  }
}

/** The next run, or why there is none. */
function nextRunText(s: QueueSchedule): string {
  if (s.nextRunAt) return runText(s.nextRunAt, s.timezone);
  return s.endAt ? "none (ended)" : "—";
}

export function QueueSchedules({ appId }: { appId: string }) {
  const schedules = useQuery(listQueueSchedules, { appId, queue: "" });
  return (
    <div className="card" data-testid="queue-schedules">
      <h2>Schedules</h2>
      <QueryView query={schedules} what="schedules">
        {(data) =>
          data.schedules.length === 0 ? (
            <Empty title="No schedules">
              The app schedules messages with{" "}
              <code>
                PUT /v1/queues/{"{queue}"}/schedules/{"{name}"}
              </code>{" "}
              and <code>{"{ cron, timezone?, payload }"}</code>: each tick puts one message.
            </Empty>
          ) : (
            <div className="table-wrap">
              <table className="stack-narrow">
                <caption className="sr-only">Queue schedules of the app</caption>
                <thead>
                  <tr>
                    <th scope="col">Queue</th>
                    <th scope="col">Name</th>
                    <th scope="col">Cron</th>
                    <th scope="col">Time zone</th>
                    <th scope="col">Next run</th>
                    <th scope="col">Last run</th>
                    <th scope="col" className="right hide-narrow">
                      Ticks put
                    </th>
                    <th scope="col" className="right hide-narrow">
                      Missed
                    </th>
                    <th scope="col" className="right hide-narrow">
                      Skipped (queue full)
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {data.schedules.map((s) => (
                    <tr key={`${s.queue}/${s.name}`} data-testid={`schedule-${s.queue}-${s.name}`}>
                      <td data-label="Queue">{s.queue}</td>
                      <td data-label="Name">{s.name}</td>
                      <td data-label="Cron" className="nowrap">
                        <code>{s.cron}</code>
                      </td>
                      <td data-label="Time zone">{s.timezone}</td>
                      <td data-label="Next run" data-testid="next-run">
                        {nextRunText(s)}
                      </td>
                      <td data-label="Last run" data-testid="last-run">
                        {runText(s.lastRunAt, s.timezone)}
                      </td>
                      <td className="right hide-narrow" data-label="Ticks put">
                        {Number(s.fired).toLocaleString()}
                      </td>
                      <td className="right hide-narrow" data-label="Missed">
                        {Number(s.missed).toLocaleString()}
                      </td>
                      <td className="right hide-narrow" data-label="Skipped (queue full)">
                        {Number(s.skippedFull).toLocaleString()}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </QueryView>
    </div>
  );
}
