/**
 * Queues: depth, in flight, max depth, the oldest waiting message's age and
 * the dead letters; each queue's puts and acks per hour over the last day
 * (chart and table); peek at waiting messages without leasing them, a page at
 * a time; purge; send a test message; list, replay and purge dead letters;
 * publish a platform event onto `_events`.
 */
import { useMemo, useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  getQueueActivity,
  getQueuePolicy,
  listDeadLetters,
  listQueues,
  peekMessages,
  publishEvent,
  purgeDeadLetters,
  purgeQueue,
  putTestMessage,
  replayDeadLetters,
} from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, QueueActivityHour } from "../../../gen/platform/admin/v1/admin_pb.js";
import { TimeChart } from "../chart.tsx";
import { ConfirmDialog, Empty, ErrorBox, FormOutcome, QueryView } from "../ui.tsx";
import { useOperator } from "../operator.ts";
import { formatAge, formatDeliveries, formatTime } from "../format.ts";
import { QueuePolicyPanel, deadLetterRule } from "./queue-policy.tsx";
import { QueueSchedules } from "./queue-schedules.tsx";

/** A queue's max deliveries as the listing shows it. */
function maxDeliveriesText(n: number | undefined): string {
  if (n === undefined) return "—";
  return n === 0 ? "unlimited" : n.toLocaleString();
}

export function QueuesTab({ app }: { app: App }) {
  const queues = useQuery(listQueues, { appId: app.id });
  const [selected, setSelected] = useState<string | null>(null);
  const [purging, setPurging] = useState<string | null>(null);
  const [dead, setDead] = useState<string | null>(null);
  const [active, setActive] = useState<string | null>(null);
  const [policyOf, setPolicyOf] = useState<string | null>(null);
  const queryClient = useQueryClient();
  const { canWrite } = useOperator();
  const purge = useMutation(purgeQueue, {
    onSuccess: async () => {
      setPurging(null);
      await queryClient.invalidateQueries();
    },
  });
  return (
    <>
      <div className="card">
        <h2>Queues</h2>
        <QueryView query={queues} what="queues">
          {(data) =>
            data.queues.length === 0 ? (
              <Empty title="No messages waiting">
                A queue appears here once the app puts a message on it (<code>POST /v1/queues/{"{queue}"}</code> with{" "}
                <code>{"{ payload }"}</code>).
              </Empty>
            ) : (
              <div className="table-wrap">
                <table className="stack-narrow">
                  <thead>
                    <tr>
                      <th scope="col">Queue</th>
                      <th scope="col" className="right">
                        Depth
                      </th>
                      <th scope="col" className="right hide-narrow">
                        In flight
                      </th>
                      <th scope="col" className="right hide-narrow">
                        Max depth
                      </th>
                      <th scope="col">Oldest waiting</th>
                      <th scope="col" className="right hide-narrow">
                        Max deliveries
                      </th>
                      <th scope="col" className="right">
                        Dead letters
                      </th>
                      <th scope="col">
                        <span className="sr-only">Actions</span>
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {data.queues.map((q) => (
                      <tr key={q.name} className={q.name === selected ? "selected" : undefined}>
                        <td data-label="Queue">{q.name}</td>
                        <td className="right" data-label="Depth" data-testid={`depth-${q.name}`}>
                          {Number(q.depth).toLocaleString()}
                        </td>
                        <td className="right hide-narrow" data-label="In flight">
                          {Number(q.inFlight).toLocaleString()}
                        </td>
                        <td className="right hide-narrow" data-label="Max depth">
                          {Number(q.maxDepth).toLocaleString()}
                        </td>
                        <td data-label="Oldest waiting">
                          {q.oldestAt ? formatAge(q.oldestAt) : <span className="muted">—</span>}
                        </td>
                        <td className="right hide-narrow" data-label="Max deliveries" data-testid={`max-${q.name}`}>
                          {maxDeliveriesText(data.policies.find((p) => p.queue === q.name)?.maxDeliveries)}
                        </td>
                        <td className="right" data-label="Dead letters" data-testid={`dead-${q.name}`}>
                          {q.deadLetters > 0n ? (
                            <button
                              type="button"
                              className="secondary small"
                              onClick={() => setDead(q.name)}
                              aria-label={`Dead letters of ${q.name}: ${Number(q.deadLetters).toLocaleString()}`}
                            >
                              {Number(q.deadLetters).toLocaleString()}
                            </button>
                          ) : (
                            "0"
                          )}
                        </td>
                        <td className="right nowrap">
                          <button
                            type="button"
                            className="secondary small"
                            onClick={() => setActive(q.name)}
                            aria-label={`Activity of ${q.name}`}
                          >
                            Activity
                          </button>{" "}
                          <button
                            type="button"
                            className="secondary small"
                            onClick={() => setPolicyOf(q.name)}
                            aria-label={`Policy of ${q.name}`}
                          >
                            Policy
                          </button>{" "}
                          <button
                            type="button"
                            className="secondary small"
                            onClick={() => setSelected(q.name)}
                            aria-label={`Peek at ${q.name}`}
                          >
                            Peek
                          </button>{" "}
                          <button
                            type="button"
                            hidden={!canWrite}
                            className="danger small"
                            onClick={() => setPurging(q.name)}
                            aria-label={`Purge ${q.name}`}
                          >
                            Purge
                          </button>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )
          }
        </QueryView>
        <QueueByName label="Activity of any queue" action="Show activity" onShow={setActive} />
        <QueueByName label="Policy of any queue" action="Show policy" onShow={setPolicyOf} />
      </div>
      <QueueSchedules appId={app.id} />
      {policyOf ? (
        <QueuePolicyPanel
          key={`policy:${policyOf}`}
          appId={app.id}
          queue={policyOf}
          onClose={() => setPolicyOf(null)}
        />
      ) : null}
      {/* Keys name the panel as well as the queue: these siblings share one list of keys, and Peek's "emails"
          beside the send form's "emails" made React draw the Peek panel twice. */}
      {active ? (
        <Activity key={`activity:${active}`} appId={app.id} queue={active} onClose={() => setActive(null)} />
      ) : null}
      {selected ? (
        <Peek key={`peek:${selected}`} appId={app.id} queue={selected} onClose={() => setSelected(null)} />
      ) : null}
      {dead ? <DeadLetters key={`dead:${dead}`} app={app} queue={dead} onClose={() => setDead(null)} /> : null}
      {canWrite ? (
        <SendTestMessage key={`send:${selected ?? active ?? ""}`} appId={app.id} queue={selected ?? active ?? ""} />
      ) : null}
      {canWrite ? <PublishEvent appId={app.id} /> : null}
      <ConfirmDialog
        open={purging !== null}
        title={`Purge ${purging ?? ""}?`}
        confirmLabel="Purge queue"
        busy={purge.isPending}
        error={purge.error}
        onClose={() => setPurging(null)}
        onConfirm={() => purging && purge.mutate({ appId: app.id, queue: purging })}
      >
        <p>Every message of this queue, waiting or leased, is deleted.</p>
      </ConfirmDialog>
    </>
  );
}

function prettyPayload(text: string, truncated: boolean): string {
  if (truncated) return text + "\n… (truncated)";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** Peek page sizes: the first page the operator sees, or more at once. */
const PEEK_PAGE_SIZES = [20, 100] as const;

/**
 * Waiting messages, a page at a time, in the order consumers get them. Pages
 * follow the server's page tokens (each starts right after the previous
 * page's last message), so they reach past the first 100; the tokens seen
 * are kept to go back.
 */
function Peek({ appId, queue, onClose }: { appId: string; queue: string; onClose: () => void }) {
  const [pageSize, setPageSize] = useState<number>(PEEK_PAGE_SIZES[0]);
  // tokens[i] starts page i; the first page has none.
  const [tokens, setTokens] = useState<string[]>([""]);
  const page = tokens.length - 1;
  const peek = useQuery(
    peekMessages,
    { appId, queue, limit: pageSize, pageToken: tokens[page] },
    {
      placeholderData: (previous) => previous,
    },
  );
  const first = page * pageSize + 1;
  return (
    <div className="card">
      <div className="page-head">
        <h2>Waiting in {queue}</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <p className="muted">Peeking does not lease: consumers still get these messages.</p>
      <label className="field inline">
        <span>Per page</span>
        <select
          value={pageSize}
          onChange={(e) => {
            setPageSize(Number(e.target.value));
            setTokens([""]);
          }}
        >
          {PEEK_PAGE_SIZES.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
      </label>
      <QueryView query={peek} what="messages">
        {(data) =>
          data.messages.length === 0 && page === 0 ? (
            <Empty title="Nothing waiting">Messages in flight are not shown.</Empty>
          ) : (
            <>
              <ol className="messages" start={first}>
                {data.messages.map((m) => (
                  <li key={m.id}>
                    <p className="muted">
                      {formatTime(m.enqueuedAt)} · {Number(m.sizeBytes).toLocaleString()} bytes ·{" "}
                      {formatDeliveries(m.deliveries)} · id {m.id}
                    </p>
                    <pre>{prettyPayload(m.payload, m.truncated)}</pre>
                  </li>
                ))}
              </ol>
              <nav className="pager" aria-label={`Pages of ${queue}`}>
                <button
                  type="button"
                  className="secondary"
                  disabled={page === 0}
                  onClick={() => setTokens(tokens.slice(0, -1))}
                >
                  Previous
                </button>
                <span data-testid="peek-range">
                  Messages {data.messages.length === 0 ? 0 : first.toLocaleString()}–
                  {(first + data.messages.length - 1).toLocaleString()}
                </span>
                <button
                  type="button"
                  className="secondary"
                  disabled={!data.nextPageToken || peek.isPlaceholderData}
                  onClick={() => setTokens([...tokens, data.nextPageToken])}
                >
                  Next
                </button>
              </nav>
            </>
          )
        }
      </QueryView>
    </div>
  );
}

/** "14:00" for an hour of today (UTC), "23 Nov 14:00" for one of another day. */
function hourLabel(at: number, now = Date.now()): string {
  const d = new Date(at);
  const time = `${String(d.getUTCHours()).padStart(2, "0")}:00`;
  if (new Date(now).toISOString().slice(0, 10) === d.toISOString().slice(0, 10)) return time;
  return `${d.getUTCDate()} ${d.toLocaleString("en-GB", { month: "short", timeZone: "UTC" })} ${time}`;
}

/**
 * Opens a panel of any queue by name: the listing shows only queues holding messages, and a queue drained by
 * its consumers (the usual healthy one) still has its day of activity and its policy.
 */
function QueueByName({ label, action, onShow }: { label: string; action: string; onShow: (queue: string) => void }) {
  const [name, setName] = useState("");
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        if (name.trim()) onShow(name.trim());
      }}
    >
      <label className="field inline">
        <span>{label}</span>
        <input value={name} onChange={(e) => setName(e.target.value)} placeholder="jobs" autoComplete="off" />
      </label>
      <button type="submit" className="secondary" disabled={name.trim() === ""}>
        {action}
      </button>
    </form>
  );
}

/** A queue's puts and acks per UTC hour, the last 24 hours: a chart, and the same counts in a table. */
function Activity({ appId, queue, onClose }: { appId: string; queue: string; onClose: () => void }) {
  const activity = useQuery(getQueueActivity, { appId, queue }, { placeholderData: (previous) => previous });
  return (
    <div className="card">
      <div className="page-head">
        <h2>Activity of {queue}</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <p className="muted">Messages put and acked per hour (UTC), the last 24 hours.</p>
      <QueryView query={activity} what="activity">
        {(data) => <ActivityView queue={queue} hours={data.hours} />}
      </QueryView>
    </div>
  );
}

function ActivityView({ queue, hours }: { queue: string; hours: QueueActivityHour[] }) {
  const rows = useMemo(
    () => hours.map((h) => ({ at: Number(h.at?.seconds ?? 0n) * 1000, puts: Number(h.puts), acks: Number(h.acks) })),
    [hours],
  );
  const x = useMemo(() => rows.map((r) => r.at / 1000), [rows]);
  const series = useMemo(
    () => [
      { label: "Puts", values: rows.map((r) => r.puts) },
      { label: "Acks", values: rows.map((r) => r.acks) },
    ],
    [rows],
  );
  const totals = rows.reduce((t, r) => ({ puts: t.puts + r.puts, acks: t.acks + r.acks }), { puts: 0, acks: 0 });
  return (
    <>
      <p data-testid={`activity-total-${queue}`}>
        {totals.puts.toLocaleString()} put, {totals.acks.toLocaleString()} acked in the last 24 hours.
      </p>
      <TimeChart
        x={x}
        series={series}
        height={220}
        label={`Puts and acks per hour of ${queue}`}
        timeZone="UTC"
        unit="hour"
      />
      <details>
        <summary>The counts per hour</summary>
        <div className="table-wrap">
          <table>
            <caption className="sr-only">Puts and acks per hour of {queue}</caption>
            <thead>
              <tr>
                <th scope="col">Hour (UTC)</th>
                <th scope="col" className="right">
                  Puts
                </th>
                <th scope="col" className="right">
                  Acks
                </th>
              </tr>
            </thead>
            <tbody>
              {[...rows].reverse().map((r) => (
                <tr key={r.at}>
                  <td>{hourLabel(r.at)}</td>
                  <td className="right">{r.puts.toLocaleString()}</td>
                  <td className="right">{r.acks.toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </>
  );
}

/** Reads the payload field: any JSON value; an empty field is not one. */
/**
 * A form's JSON field as a value, or the sentence that says why not. A blank
 * field is `blank`: a value (an event's data may be left out: `null`), or the
 * sentence refusing it (a message needs a payload).
 */
function parseJsonField(
  text: string,
  what: string,
  blank: { value: JsonValue } | { error: string },
): { value: JsonValue } | { error: string } {
  if (text.trim() === "") return blank;
  try {
    return { value: JSON.parse(text) as JsonValue };
  } catch (err) {
    return { error: `The ${what} is not valid JSON (${(err as Error).message}).` };
  }
}

/** Puts one message on a queue as the app would (the server checks the name, the size and the app's caps). */
function SendTestMessage({ appId, queue: initial }: { appId: string; queue: string }) {
  const [queue, setQueue] = useState(initial);
  const [payload, setPayload] = useState('{"hello": "world"}');
  const [parseError, setParseError] = useState<string | null>(null);
  const [sent, setSent] = useState<string | null>(null);
  const queryClient = useQueryClient();
  const put = useMutation(putTestMessage, {
    onSuccess: async (res) => {
      setSent(res.id);
      await queryClient.invalidateQueries();
    },
  });
  return (
    <form
      className="card"
      aria-labelledby="send-test-heading"
      onSubmit={(e) => {
        e.preventDefault();
        setSent(null);
        put.reset();
        const parsed = parseJsonField(payload, "payload", {
          error: 'Write a payload: any JSON value, such as {"hello": "world"}.',
        });
        if ("error" in parsed) {
          setParseError(parsed.error);
          return;
        }
        setParseError(null);
        put.mutate({ appId, queue: queue.trim(), payload: fromJson(ValueSchema, parsed.value) });
      }}
    >
      <h2 id="send-test-heading">Send a test message</h2>
      <p className="muted">
        Puts one message on the queue, as <code>POST /v1/queues/{"{queue}"}</code> from the app would; its consumers get
        it.
      </p>
      <div className="grid">
        <label className="field">
          <span>Queue</span>
          <input value={queue} onChange={(e) => setQueue(e.target.value)} placeholder="jobs" autoComplete="off" />
        </label>
        <label className="field wide">
          <span>Payload (JSON)</span>
          <textarea
            value={payload}
            onChange={(e) => setPayload(e.target.value)}
            rows={3}
            spellCheck={false}
            aria-invalid={parseError ? true : undefined}
          />
        </label>
      </div>
      <FormOutcome
        fieldError={parseError}
        error={put.error}
        errorTitle="Not sent"
        done={sent ? `Sent (id ${sent}).` : null}
      />
      <div className="actions">
        <button type="submit" disabled={put.isPending || queue.trim() === ""}>
          Send test message
        </button>
      </div>
    </form>
  );
}

/**
 * One queue's dead letters, a page at a time (oldest death first): replay
 * (back in line, deliveries reset) or purge one, or all of them. A purge, of
 * one or of all, is confirmed first: it deletes for good, and a misclick on a
 * row's button lost the message (the CLI asks too).
 */
function DeadLetters({ app, queue, onClose }: { app: App; queue: string; onClose: () => void }) {
  const [pageToken, setPageToken] = useState("");
  /** The action awaiting confirmation: on all dead letters, or (a purge) on the one with `id`. */
  const [confirm, setConfirm] = useState<{ action: "replay" | "purge"; id?: string } | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const page = useQuery(listDeadLetters, { appId: app.id, queue, pageSize: 20, pageToken });
  // The policy that makes this queue's letters dead, named in the panel (not only the app's default).
  const policy = useQuery(getQueuePolicy, { appId: app.id, queue });
  const queryClient = useQueryClient();
  const after = async (text: string) => {
    setConfirm(null);
    setDone(text);
    setPageToken("");
    await queryClient.invalidateQueries();
  };
  const replay = useMutation(replayDeadLetters, {
    onSuccess: (res) => after(`Replayed ${Number(res.replayed).toLocaleString()}.`),
  });
  const purge = useMutation(purgeDeadLetters, {
    onSuccess: (res) => after(`Purged ${Number(res.purged).toLocaleString()}.`),
  });
  const busy = replay.isPending || purge.isPending;
  const { canWrite } = useOperator();
  return (
    <div className="card">
      <div className="page-head">
        <h2>Dead letters of {queue}</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <p className="muted" data-testid="dead-letter-rule">
        Messages whose lease lapsed (or that were nacked) after their last allowed delivery.{" "}
        {policy.data ? deadLetterRule(policy.data) : null} Replay puts them back in line with their deliveries reset to
        0.
      </p>
      {replay.error ? <ErrorBox error={replay.error} title="Not replayed" /> : null}
      {purge.error ? <ErrorBox error={purge.error} title="Not purged" /> : null}
      {done ? (
        <p role="status" className="ok-text">
          {done}
        </p>
      ) : null}
      <QueryView query={page} what="dead letters">
        {(data) =>
          data.deadLetters.length === 0 ? (
            <Empty title="No dead letters">Nothing reached the delivery limit on this queue.</Empty>
          ) : (
            <>
              <div className="actions" hidden={!canWrite}>
                <button type="button" disabled={busy} onClick={() => setConfirm({ action: "replay" })}>
                  Replay all
                </button>
                <button
                  type="button"
                  className="danger"
                  disabled={busy}
                  onClick={() => setConfirm({ action: "purge" })}
                >
                  Purge all
                </button>
              </div>
              <ol className="messages">
                {data.deadLetters.map((d) => (
                  <li key={d.id}>
                    <p className="muted">
                      died {formatTime(d.diedAt)} · {formatDeliveries(d.deliveries)} ·{" "}
                      {Number(d.sizeBytes).toLocaleString()} bytes · id {d.id}
                      {d.groupKey === undefined ? null : <> · group {d.groupKey}</>}
                    </p>
                    {d.failureReason === undefined ? null : (
                      <p className="failure-reason">
                        <span className="muted">last failure:</span> {d.failureReason}
                      </p>
                    )}
                    <pre>{prettyPayload(d.payload, d.truncated)}</pre>
                    <div className="actions" hidden={!canWrite}>
                      <button
                        type="button"
                        className="secondary small"
                        disabled={busy}
                        aria-label={`Replay ${d.id}`}
                        onClick={() => replay.mutate({ appId: app.id, queue, ids: [d.id] })}
                      >
                        Replay
                      </button>
                      <button
                        type="button"
                        className="danger small"
                        disabled={busy}
                        aria-label={`Purge ${d.id}`}
                        onClick={() => setConfirm({ action: "purge", id: d.id })}
                      >
                        Purge
                      </button>
                    </div>
                  </li>
                ))}
              </ol>
              <div className="actions">
                {pageToken ? (
                  <button type="button" className="secondary" onClick={() => setPageToken("")}>
                    First page
                  </button>
                ) : null}
                {data.nextPageToken ? (
                  <button type="button" className="secondary" onClick={() => setPageToken(data.nextPageToken)}>
                    Next page
                  </button>
                ) : null}
              </div>
            </>
          )
        }
      </QueryView>
      <ConfirmDialog
        open={confirm !== null}
        title={
          confirm?.action === "replay"
            ? `Replay every dead letter of ${queue}?`
            : confirm?.id
              ? `Purge dead letter ${confirm.id}?`
              : `Purge every dead letter of ${queue}?`
        }
        confirmLabel={confirm?.action === "replay" ? "Replay all" : confirm?.id ? "Purge" : "Purge all"}
        busy={busy}
        error={confirm?.action === "replay" ? replay.error : purge.error}
        onClose={() => setConfirm(null)}
        onConfirm={() =>
          confirm?.action === "replay"
            ? replay.mutate({ appId: app.id, queue, all: true })
            : purge.mutate({ appId: app.id, queue, ...(confirm?.id ? { ids: [confirm.id] } : { all: true }) })
        }
      >
        <p>
          {confirm?.action === "replay"
            ? "They go back in line, visible at once, with their deliveries reset to 0."
            : confirm?.id
              ? "It is deleted for good."
              : "They are deleted for good."}
        </p>
      </ConfirmDialog>
    </div>
  );
}

function PublishEvent({ appId }: { appId: string }) {
  const [kind, setKind] = useState("");
  const [data, setData] = useState("{}");
  const [parseError, setParseError] = useState<string | null>(null);
  const [published, setPublished] = useState<string | null>(null);
  const queryClient = useQueryClient();
  const publish = useMutation(publishEvent, {
    onSuccess: async (res) => {
      setPublished(res.id);
      await queryClient.invalidateQueries();
    },
  });
  return (
    <form
      className="card"
      onSubmit={(e) => {
        e.preventDefault();
        setPublished(null);
        const parsed = parseJsonField(data, "data", { value: null });
        if ("error" in parsed) {
          setParseError(parsed.error);
          return;
        }
        setParseError(null);
        publish.mutate({ appId, kind: kind.trim(), data: fromJson(ValueSchema, parsed.value) });
      }}
    >
      <h2>Publish a platform event</h2>
      <p className="muted">
        Puts <code>{"{ kind, at, data }"}</code> on the app's <code>_events</code> queue.
      </p>
      <div className="grid">
        <label className="field">
          <span>Kind</span>
          <input value={kind} onChange={(e) => setKind(e.target.value)} placeholder="maintenance" autoComplete="off" />
        </label>
        <label className="field wide">
          <span>Data (JSON)</span>
          <textarea value={data} onChange={(e) => setData(e.target.value)} rows={3} spellCheck={false} />
        </label>
      </div>
      <FormOutcome
        fieldError={parseError}
        error={publish.error}
        errorTitle="Not published"
        done={published ? `Published (id ${published}).` : null}
      />
      <div className="actions">
        <button type="submit" disabled={publish.isPending || kind.trim() === ""}>
          Publish event
        </button>
      </div>
    </form>
  );
}
