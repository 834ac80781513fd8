/** Tokens: list (label, created, last used), issue (plaintext shown once), revoke. */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { issueToken, listTokens, revokeToken } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, Token } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ConfirmDialog, CopyButton, Empty, ErrorBox, QueryView, usePages } from "../ui.tsx";
import { useOperator } from "../operator.ts";
import { formatTime } from "../format.ts";

export function TokensTab({ app }: { app: App }) {
  const tokens = useQuery(listTokens, { appId: app.id });
  const queryClient = useQueryClient();
  const [label, setLabel] = useState("");
  const [issued, setIssued] = useState<string | null>(null);
  const [revoking, setRevoking] = useState<Token | null>(null);
  const { canWrite } = useOperator();
  const issue = useMutation(issueToken, {
    onSuccess: async (res) => {
      setIssued(res.token);
      setLabel("");
      await queryClient.invalidateQueries();
    },
  });
  const revoke = useMutation(revokeToken, {
    onSuccess: async () => {
      setRevoking(null);
      await queryClient.invalidateQueries();
    },
  });
  return (
    <>
      <form
        hidden={!canWrite}
        className="card row-form"
        onSubmit={(e) => {
          e.preventDefault();
          setIssued(null);
          issue.mutate({ appId: app.id, label: label.trim() });
        }}
      >
        <label className="field">
          <span>Token label</span>
          <input value={label} onChange={(e) => setLabel(e.target.value)} placeholder="production" autoComplete="off" />
        </label>
        <button type="submit" disabled={issue.isPending}>
          Issue token
        </button>
        {issue.error ? <ErrorBox error={issue.error} title="Not issued" /> : null}
      </form>
      {issued ? (
        <div className="card notice" role="status">
          <p>
            <strong>New token.</strong> Copy it now: it is stored only as a hash and is never shown again.
          </p>
          <div className="secret-line">
            <code data-testid="issued-token">{issued}</code>
            <CopyButton text={issued} />
            <button type="button" className="secondary" onClick={() => setIssued(null)}>
              Done
            </button>
          </div>
        </div>
      ) : null}
      <div className="card">
        <h2>Tokens</h2>
        <QueryView query={tokens} what="tokens">
          {(data) =>
            data.tokens.length === 0 ? (
              <Empty title="No tokens">Issue a token above and give it to the app as PLATFORM_SERVICE_TOKEN.</Empty>
            ) : (
              <TokenTable tokens={data.tokens} onRevoke={canWrite ? setRevoking : undefined} />
            )
          }
        </QueryView>
      </div>
      <ConfirmDialog
        open={revoking !== null}
        title="Revoke this token?"
        confirmLabel="Revoke"
        busy={revoke.isPending}
        error={revoke.error}
        onClose={() => setRevoking(null)}
        onConfirm={() => revoking && revoke.mutate({ tokenId: revoking.id })}
      >
        <p>Requests with the token "{revoking?.label || revoking?.id}" are refused from now on.</p>
      </ConfirmDialog>
    </>
  );
}

function TokenTable({ tokens, onRevoke }: { tokens: Token[]; onRevoke?: (t: Token) => void }) {
  const { rows, pager } = usePages(tokens, 50);
  return (
    <>
      <div className="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Label</th>
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              <th scope="col">
                <span className="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((t) => (
              <tr key={t.id}>
                <td>{t.label || <span className="muted">(no label)</span>}</td>
                <td>{formatTime(t.createdAt)}</td>
                <td>{t.lastUsedAt ? formatTime(t.lastUsedAt) : <span className="muted">never</span>}</td>
                <td className="right">
                  <button
                    type="button"
                    hidden={!onRevoke}
                    className="danger small"
                    onClick={() => onRevoke?.(t)}
                    aria-label={`Revoke token ${t.label || t.id}`}
                  >
                    Revoke
                  </button>
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
