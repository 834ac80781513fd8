/** Mail: the app's mail log, searched and paged on the server; open one mail to read it. */
import { Fragment, useEffect, useRef, useState } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { skipToken } from "@tanstack/react-query";
import { getMail, listMail } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { MailStatus, type App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Empty, QueryView, useDebounced } from "../ui.tsx";
import { formatTime } from "../format.ts";

const STATUS: Record<MailStatus, string> = {
  [MailStatus.UNSPECIFIED]: "unknown",
  [MailStatus.SENT]: "sent",
  [MailStatus.STORED]: "stored",
  [MailStatus.FAILED]: "failed",
  [MailStatus.UNCONFIRMED]: "unconfirmed",
};

const PAGE_SIZE = 50;

/**
 * As in Mailpit: search by recipient or subject, filter by status and date,
 * newest first a page at a time (ListMail pages on the server); the opened
 * mail stays in view beside the list (on a phone it covers the list), with
 * its headers and raw message.
 */
export function MailTab({ app }: { app: App }) {
  const [queryText, setQueryText] = useState("");
  const query = useDebounced(queryText.trim(), 300);
  const [status, setStatus] = useState<MailStatus | undefined>(undefined);
  const [since, setSince] = useState("");
  const [until, setUntil] = useState("");
  const [tokens, setTokens] = useState<string[]>([""]);
  const key = JSON.stringify([query, status, since, until]);
  const [lastKey, setLastKey] = useState(key);
  if (lastKey !== key) {
    setLastKey(key);
    setTokens([""]);
  }
  const mails = useQuery(
    listMail,
    {
      appId: app.id,
      limit: PAGE_SIZE,
      query: query || undefined,
      status,
      since: since ? timestampFromDate(new Date(`${since}T00:00:00`)) : undefined,
      until: until ? timestampFromDate(new Date(new Date(`${until}T00:00:00`).getTime() + 86_400_000)) : undefined,
      pageToken: tokens[tokens.length - 1],
    },
    { placeholderData: (previous) => previous },
  );
  const [open, setOpen] = useState<string | null>(null);
  const narrowed = query !== "" || status !== undefined || since !== "" || until !== "";
  return (
    <div className="split">
      <div className="card">
        <h2>Mail log</h2>
        {!app.mailFrom ? (
          <p className="muted">This app has no sender address: set mailFrom on the Settings tab before it can send.</p>
        ) : null}
        <form className="filters" onSubmit={(e) => e.preventDefault()} aria-label="Find mail">
          <label className="field">
            <span>Search</span>
            <input
              type="search"
              value={queryText}
              onChange={(e) => setQueryText(e.target.value)}
              placeholder="recipient or subject"
              autoComplete="off"
            />
          </label>
          <label className="field">
            <span>Status</span>
            <select
              value={status ?? ""}
              onChange={(e) => setStatus(e.target.value === "" ? undefined : Number(e.target.value))}
            >
              <option value="">(any)</option>
              <option value={MailStatus.SENT}>sent</option>
              <option value={MailStatus.STORED}>stored</option>
              <option value={MailStatus.FAILED}>failed</option>
              <option value={MailStatus.UNCONFIRMED}>unconfirmed</option>
            </select>
          </label>
          <label className="field">
            <span>From day</span>
            <input type="date" value={since} onChange={(e) => setSince(e.target.value)} />
          </label>
          <label className="field">
            <span>To day</span>
            <input type="date" value={until} onChange={(e) => setUntil(e.target.value)} />
          </label>
        </form>
        <QueryView query={mails} what="the mail log">
          {(data) =>
            data.mails.length === 0 ? (
              narrowed ? (
                <Empty title="No mail matches">Change the search, the status or the days.</Empty>
              ) : (
                <Empty title="No mail yet">
                  Mail the app sends (<code>POST /v1/mail/send</code>) is listed here, newest first.
                </Empty>
              )
            ) : (
              <>
                <MailList mails={data.mails} open={open} onOpen={setOpen} />
                {tokens.length > 1 || data.nextPageToken ? (
                  <nav className="pager" aria-label="Mail pages">
                    <button
                      type="button"
                      className="secondary"
                      disabled={tokens.length === 1}
                      onClick={() => setTokens(tokens.slice(0, -1))}
                    >
                      Newer
                    </button>
                    <span>Page {tokens.length}</span>
                    <button
                      type="button"
                      className="secondary"
                      disabled={!data.nextPageToken}
                      onClick={() => setTokens([...tokens, data.nextPageToken])}
                    >
                      Older
                    </button>
                  </nav>
                ) : null}
              </>
            )
          }
        </QueryView>
      </div>
      {open ? <MailView appId={app.id} id={open} onClose={() => setOpen(null)} /> : null}
    </div>
  );
}

function MailList({
  mails,
  open,
  onOpen,
}: {
  mails: {
    id: string;
    to: string;
    subject: string;
    status: MailStatus;
    at?: import("@bufbuild/protobuf/wkt").Timestamp;
  }[];
  open: string | null;
  onOpen: (id: string) => void;
}) {
  return (
    <>
      <div className="table-wrap">
        <table className="stack-narrow">
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">To</th>
              <th scope="col">Subject</th>
              <th scope="col">Status</th>
            </tr>
          </thead>
          <tbody>
            {mails.map((m) => (
              <tr key={m.id} className={m.id === open ? "selected" : undefined}>
                <td className="nowrap" data-label="When">
                  {formatTime(m.at)}
                </td>
                <td data-label="To">{m.to}</td>
                <td data-label="Subject">
                  <button type="button" className="link" onClick={() => onOpen(m.id)}>
                    {m.subject || "(no subject)"}
                  </button>
                </td>
                <td data-label="Status">
                  <span className={`badge ${m.status === MailStatus.FAILED ? "stopped" : "ok"}`}>
                    {STATUS[m.status]}
                  </span>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function MailView({ appId, id, onClose }: { appId: string; id: string; onClose: () => void }) {
  const mail = useQuery(getMail, id ? { appId, id } : skipToken, { refetchInterval: false });
  const ref = useRef<HTMLElement>(null);
  // The opened mail takes the focus (and so is in view), on a phone as on a desktop.
  useEffect(() => ref.current?.querySelector("h2")?.focus(), [id]);
  return (
    <article className="card reader" aria-label="Mail" ref={ref}>
      <div className="page-head">
        <h2 tabIndex={-1}>Mail</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <QueryView query={mail} what="the mail">
        {({ mail: m, raw, headers }) =>
          m ? (
            <>
              <dl className="facts">
                <dt>Subject</dt>
                <dd data-testid="mail-subject">{m.subject}</dd>
                <dt>From</dt>
                <dd>{m.from}</dd>
                <dt>To</dt>
                <dd>{m.to}</dd>
                <dt>When</dt>
                <dd>{formatTime(m.at)}</dd>
                <dt>Status</dt>
                <dd>{STATUS[m.status]}</dd>
                {m.providerMessageId ? (
                  <>
                    <dt>Provider id</dt>
                    <dd>{m.providerMessageId}</dd>
                  </>
                ) : null}
              </dl>
              <pre className="mail-body" data-testid="mail-body">
                {m.text || "(the text is not kept for mail the provider accepted)"}
              </pre>
              {headers.length ? (
                <details>
                  <summary>Headers ({headers.length})</summary>
                  <dl className="facts" data-testid="mail-headers">
                    {headers.map((h, i) => (
                      <Fragment key={i}>
                        <dt>{h.name}</dt>
                        <dd>{h.value}</dd>
                      </Fragment>
                    ))}
                  </dl>
                </details>
              ) : null}
              {raw ? (
                <details>
                  <summary>Raw message</summary>
                  <pre className="mail-body" data-testid="mail-raw">
                    {raw}
                  </pre>
                </details>
              ) : null}
            </>
          ) : null
        }
      </QueryView>
    </article>
  );
}
