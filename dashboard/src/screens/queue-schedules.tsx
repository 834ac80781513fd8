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
import { DataTable, Empty, QueryView, type Column } from "../ui.tsx";

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

const COLUMNS: readonly Column<QueueSchedule>[] = [
  { header: "Queue", cell: (s) => s.queue },
  { header: "Name", cell: (s) => s.name },
  { header: "Cron", cell: (s) => <code>{s.cron}</code>, className: "nowrap" },
  { header: "Time zone", cell: (s) => s.timezone },
  { header: "Next run", cell: nextRunText, testId: "next-run" },
  { header: "Last run", cell: (s) => runText(s.lastRunAt, s.timezone), testId: "last-run" },
  { header: "Ticks put", cell: (s) => Number(s.fired).toLocaleString(), className: "right hide-narrow" },
  { header: "Missed", cell: (s) => Number(s.missed).toLocaleString(), className: "right hide-narrow" },
  {
    header: "Skipped (queue full)",
    cell: (s) => Number(s.skippedFull).toLocaleString(),
    className: "right hide-narrow",
  },
];

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
            <DataTable
              caption="Queue schedules of the app"
              columns={COLUMNS}
              rows={data.schedules}
              rowKey={(s) => `${s.queue}/${s.name}`}
              rowTestId={(s) => `schedule-${s.queue}-${s.name}`}
            />
          )
        }
      </QueryView>
    </div>
  );
}
