/**
 * Queues: depth, in flight, max depth and the oldest waiting message's age;
 * peek at waiting messages without leasing them; purge; publish a platform
 * event onto `_events`.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { skipToken, useQueryClient } from "@tanstack/react-query";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { listQueues, peekMessages, publishEvent, purgeQueue } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ConfirmDialog, Empty, ErrorBox, QueryView } from "../ui.tsx";
import { formatAge, formatTime } from "../format.ts";

export function QueuesTab({ app }: { app: App }) {
  const queues = useQuery(listQueues, { appId: app.id });
  const [selected, setSelected] = useState<string | null>(null);
  const [purging, setPurging] = useState<string | null>(null);
  const queryClient = useQueryClient();
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
              <Empty title="No messages waiting">A queue appears here once the app puts a message on it (POST /v1/queues/:name/messages).</Empty>
            ) : (
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Queue</th>
                      <th scope="col" className="right">Depth</th>
                      <th scope="col" className="right">In flight</th>
                      <th scope="col" className="right hide-narrow">Max depth</th>
                      <th scope="col">Oldest waiting</th>
                      <th scope="col"><span className="sr-only">Actions</span></th>
                    </tr>
                  </thead>
                  <tbody>
                    {data.queues.map((q) => (
                      <tr key={q.name} className={q.name === selected ? "selected" : undefined}>
                        <td>{q.name}</td>
                        <td className="right" data-testid={`depth-${q.name}`}>{Number(q.depth).toLocaleString()}</td>
                        <td className="right">{Number(q.inFlight).toLocaleString()}</td>
                        <td className="right hide-narrow">{Number(q.maxDepth).toLocaleString()}</td>
                        <td>{q.oldestAt ? formatAge(q.oldestAt) : <span className="muted">—</span>}</td>
                        <td className="right nowrap">
                          <button type="button" className="secondary small" onClick={() => setSelected(q.name)} aria-label={`Peek at ${q.name}`}>
                            Peek
                          </button>{" "}
                          <button type="button" className="danger small" onClick={() => setPurging(q.name)} aria-label={`Purge ${q.name}`}>
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
      <PublishEvent appId={app.id} />
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

function Peek({ appId, queue, onClose }: { appId: string; queue: string; onClose: () => void }) {
  const peek = useQuery(peekMessages, queue ? { appId, queue, limit: 20 } : skipToken);
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
            <ol className="messages">
              {data.messages.map((m) => (
                <li key={m.id}>
                  <p className="muted">
                    {formatTime(m.enqueuedAt)} · {Number(m.sizeBytes).toLocaleString()} bytes · delivered {m.deliveries} times · id {m.id}
                  </p>
                  <pre>{prettyPayload(m.payload, m.truncated)}</pre>
                </li>
              ))}
            </ol>
          )
        }
      </QueryView>
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
      {parseError ? <div className="error" role="alert">{parseError}</div> : null}
      {publish.error ? <ErrorBox error={publish.error} title="Not published" /> : null}
      {published ? <p role="status" className="ok-text">Published (id {published}).</p> : null}
      <div className="actions">
        <button type="submit" disabled={publish.isPending || kind.trim() === ""}>
          Publish event
        </button>
      </div>
    </form>
  );
}
