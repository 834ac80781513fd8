/** Mail: the app's mail log, newest first; open one mail to read it. */
import { useEffect, useRef, useState } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { skipToken } from "@tanstack/react-query";
import { getMail, listMail } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { MailStatus, type App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Empty, QueryView, usePages } from "../ui.tsx";
import { formatTime } from "../format.ts";

const STATUS: Record<MailStatus, string> = {
  [MailStatus.UNSPECIFIED]: "unknown",
  [MailStatus.SENT]: "sent",
  [MailStatus.STORED]: "stored",
  [MailStatus.FAILED]: "failed",
};

export function MailTab({ app }: { app: App }) {
  const mails = useQuery(listMail, { appId: app.id, limit: 1000 });
  const [open, setOpen] = useState<string | null>(null);
  return (
    <div className="split">
      <div className="card">
        <h2>Mail log</h2>
        {!app.mailFrom ? (
          <p className="muted">This app has no sender address: set mailFrom on the Settings tab before it can send.</p>
        ) : null}
        <QueryView query={mails} what="the mail log">
          {(data) =>
            data.mails.length === 0 ? (
              <Empty title="No mail yet">
                Mail the app sends (<code>POST /v1/mail/send</code>) is listed here, newest first.
              </Empty>
            ) : (
              <MailList mails={data.mails} open={open} onOpen={setOpen} />
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
  const { rows, pager } = usePages(mails, 50);
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
            {rows.map((m) => (
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
      {pager}
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
        {({ mail: m }) =>
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
            </>
          ) : null
        }
      </QueryView>
    </article>
  );
}
