/**
 * Queues: depth, in flight, max depth, the oldest waiting message's age and
 * the dead letters; peek at waiting messages without leasing them; purge;
 * list, replay and purge dead letters; publish a platform event onto
 * `_events`.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { skipToken, useQueryClient } from "@tanstack/react-query";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  listDeadLetters,
  listQueues,
  peekMessages,
  publishEvent,
  purgeDeadLetters,
  purgeQueue,
  replayDeadLetters,
} from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ConfirmDialog, Empty, ErrorBox, QueryView } from "../ui.tsx";
import { useOperator } from "../operator.ts";
import { formatAge, formatDeliveries, formatTime } from "../format.ts";

export function QueuesTab({ app }: { app: App }) {
  const queues = useQuery(listQueues, { appId: app.id });
  const [selected, setSelected] = useState<string | null>(null);
  const [purging, setPurging] = useState<string | null>(null);
  const [dead, setDead] = useState<string | null>(null);
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
      </div>
      {selected ? <Peek appId={app.id} queue={selected} onClose={() => setSelected(null)} /> : null}
      {dead ? <DeadLetters app={app} queue={dead} onClose={() => setDead(null)} /> : null}
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

/** Peek pages are 20 messages; PeekMessages reads at most the first 100 waiting ones, oldest first. */
const PEEK_PAGE = 20;
const PEEK_MAX = 100;

function Peek({ appId, queue, onClose }: { appId: string; queue: string; onClose: () => void }) {
  const [page, setPage] = useState(0);
  // One more than the page asks whether there is a next page.
  const limit = Math.min(PEEK_MAX, (page + 1) * PEEK_PAGE + 1);
  const peek = useQuery(peekMessages, queue ? { appId, queue, limit } : skipToken, {
    placeholderData: (previous) => previous,
  });
  return (
    <div className="card">
      <div className="page-head">
        <h2>Waiting in {queue}</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <p className="muted">Peeking does not lease: consumers still get these messages.</p>
      <QueryView query={peek} what="messages">
        {(data) =>
          data.messages.length === 0 ? (
            <Empty title="Nothing waiting">Messages in flight are not shown.</Empty>
          ) : (
            <>
              <ol className="messages" start={page * PEEK_PAGE + 1}>
                {data.messages.slice(page * PEEK_PAGE, (page + 1) * PEEK_PAGE).map((m) => (
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
                <button type="button" className="secondary" disabled={page === 0} onClick={() => setPage(page - 1)}>
                  Previous
                </button>
                <span>
                  Messages {Math.min(data.messages.length, page * PEEK_PAGE + 1)}–
                  {Math.min(data.messages.length, (page + 1) * PEEK_PAGE)}
                </span>
                <button
                  type="button"
                  className="secondary"
                  disabled={data.messages.length <= (page + 1) * PEEK_PAGE || (page + 1) * PEEK_PAGE >= PEEK_MAX}
                  onClick={() => setPage(page + 1)}
                >
                  Next
                </button>
              </nav>
              {(page + 1) * PEEK_PAGE >= PEEK_MAX && data.messages.length >= PEEK_MAX ? (
                <p className="muted">Peeking reads the first {PEEK_MAX} waiting messages.</p>
              ) : null}
            </>
          )
        }
      </QueryView>
    </div>
  );
}

/**
 * One queue's dead letters, a page at a time (oldest death first): replay
 * (back in line, deliveries reset) or purge one, or all of them after a
 * confirmation.
 */
function DeadLetters({ app, queue, onClose }: { app: App; queue: string; onClose: () => void }) {
  const [pageToken, setPageToken] = useState("");
  const [confirm, setConfirm] = useState<"replay" | "purge" | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const page = useQuery(listDeadLetters, { appId: app.id, queue, pageSize: 20, pageToken });
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
      <p className="muted">
        Messages whose lease lapsed after their last allowed delivery (the app&apos;s maxDeliveries, now{" "}
        {app.limits?.maxDeliveries ?? 0}). Replay puts them back in line with their deliveries reset to 0.
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
                <button type="button" disabled={busy} onClick={() => setConfirm("replay")}>
                  Replay all
                </button>
                <button type="button" className="danger" disabled={busy} onClick={() => setConfirm("purge")}>
                  Purge all
                </button>
              </div>
              <ol className="messages">
                {data.deadLetters.map((d) => (
                  <li key={d.id}>
                    <p className="muted">
                      died {formatTime(d.diedAt)} · {formatDeliveries(d.deliveries)} ·{" "}
                      {Number(d.sizeBytes).toLocaleString()} bytes · id {d.id}
                    </p>
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
                        onClick={() => purge.mutate({ appId: app.id, queue, ids: [d.id] })}
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
        title={confirm === "replay" ? `Replay every dead letter of ${queue}?` : `Purge every dead letter of ${queue}?`}
        confirmLabel={confirm === "replay" ? "Replay all" : "Purge all"}
        busy={busy}
        error={confirm === "replay" ? replay.error : purge.error}
        onClose={() => setConfirm(null)}
        onConfirm={() =>
          confirm === "replay"
            ? replay.mutate({ appId: app.id, queue, all: true })
            : purge.mutate({ appId: app.id, queue, all: true })
        }
      >
        <p>
          {confirm === "replay"
            ? "They go back in line, visible at once, with their deliveries reset to 0."
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
        let value: JsonValue;
        try {
          value = JSON.parse(data || "null") as JsonValue;
        } catch {
          setParseError("data: is not valid JSON");
          return;
        }
        setParseError(null);
        publish.mutate({ appId, kind: kind.trim(), data: fromJson(ValueSchema, value) });
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
      {parseError ? (
        <div className="error" role="alert">
          {parseError}
        </div>
      ) : null}
      {publish.error ? <ErrorBox error={publish.error} title="Not published" /> : null}
      {published ? (
        <p role="status" className="ok-text">
          Published (id {published}).
        </p>
      ) : null}
      <div className="actions">
        <button type="submit" disabled={publish.isPending || kind.trim() === ""}>
          Publish event
        </button>
      </div>
    </form>
  );
}
