/**
 * Operators: who may use this dashboard and AdminService, with which role.
 * An admin adds operators (their first token is shown once), changes roles,
 * disables, deletes, and issues more tokens; a viewer sees the list only.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import {
  createOperator,
  deleteOperator,
  issueOperatorToken,
  listOperators,
  updateOperator,
} from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { OperatorRole, type Operator } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ConfirmDialog, CopyButton, ErrorBox, QueryView } from "../ui.tsx";
import { ROLE_LABELS, useOperator } from "../operator.ts";
import { formatTime } from "../format.ts";

export function OperatorsScreen() {
  const operators = useQuery(listOperators, {});
  const { operator: me, canWrite } = useOperator();
  const queryClient = useQueryClient();
  const [name, setName] = useState("");
  const [role, setRole] = useState(OperatorRole.VIEWER);
  const [issued, setIssued] = useState<{ name: string; token: string } | null>(null);
  const [deleting, setDeleting] = useState<Operator | null>(null);
  const refresh = () => queryClient.invalidateQueries();
  const create = useMutation(createOperator, {
    onSuccess: async (res) => {
      setIssued({ name: res.operator?.name ?? name, token: res.token });
      setName("");
      await refresh();
    },
  });
  const update = useMutation(updateOperator, { onSuccess: refresh });
  const issue = useMutation(issueOperatorToken, {
    onSuccess: async (res, req) => {
      const who = operators.data?.operators.find((o) => o.id === req.operatorId)?.name ?? "";
      setIssued({ name: who, token: res.token });
      await refresh();
    },
  });
  const remove = useMutation(deleteOperator, {
    onSuccess: async () => {
      setDeleting(null);
      await refresh();
    },
  });
  return (
    <>
      <div className="page-head">
        <h1>Operators</h1>
        {me ? (
          <p className="muted" data-testid="whoami">
            Signed in as <strong>{me.name}</strong> ({ROLE_LABELS[me.role]})
          </p>
        ) : null}
      </div>
      {canWrite ? (
        <form
          className="card row-form"
          onSubmit={(e) => {
            e.preventDefault();
            setIssued(null);
            create.mutate({ name: name.trim(), role });
          }}
        >
          <label className="field">
            <span>New operator's name</span>
            <input value={name} onChange={(e) => setName(e.target.value)} placeholder="ann" autoComplete="off" />
          </label>
          <label className="field">
            <span>Role</span>
            <select value={role} onChange={(e) => setRole(Number(e.target.value))}>
              <option value={OperatorRole.VIEWER}>viewer (reads only)</option>
              <option value={OperatorRole.ADMIN}>admin (everything)</option>
            </select>
          </label>
          <button type="submit" disabled={create.isPending || name.trim() === ""}>
            Add operator
          </button>
          {create.error ? <ErrorBox error={create.error} title="Not added" /> : null}
        </form>
      ) : (
        <p className="muted">Your role reads only: operators are managed by an admin.</p>
      )}
      {issued ? (
        <div className="card notice" role="status">
          <p>
            <strong>Token for {issued.name}.</strong> Copy it now: it is stored only as a hash and is never shown again.
          </p>
          <div className="secret-line">
            <code data-testid="operator-token">{issued.token}</code>
            <CopyButton text={issued.token} />
            <button type="button" className="secondary" onClick={() => setIssued(null)}>
              Done
            </button>
          </div>
        </div>
      ) : null}
      {update.error ? <ErrorBox error={update.error} title="Not changed" /> : null}
      {issue.error ? <ErrorBox error={issue.error} title="No token issued" /> : null}
      <div className="card">
        <QueryView query={operators} what="operators">
          {(data) => (
            <div className="table-wrap">
              <table className="stack-narrow">
                <caption className="sr-only">Operators</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Role</th>
                    <th scope="col">Created</th>
                    <th scope="col">Last used</th>
                    {canWrite ? (
                      <th scope="col">
                        <span className="sr-only">Actions</span>
                      </th>
                    ) : null}
                  </tr>
                </thead>
                <tbody>
                  {data.operators.map((o) => {
                    const owner = o.id === "owner";
                    return (
                      <tr key={o.id} data-testid={`operator-${o.name}`}>
                        <td data-label="Name">
                          {o.name}
                          {o.disabled ? <span className="badge stopped"> disabled</span> : null}
                        </td>
                        <td data-label="Role">
                          {canWrite && !owner ? (
                            <select
                              aria-label={`Role of ${o.name}`}
                              value={o.role}
                              disabled={update.isPending}
                              onChange={(e) => update.mutate({ operatorId: o.id, role: Number(e.target.value) })}
                            >
                              <option value={OperatorRole.VIEWER}>viewer</option>
                              <option value={OperatorRole.ADMIN}>admin</option>
                            </select>
                          ) : (
                            ROLE_LABELS[o.role]
                          )}
                        </td>
                        <td data-label="Created">{formatTime(o.createdAt)}</td>
                        <td data-label="Last used">
                          {o.lastUsedAt ? formatTime(o.lastUsedAt) : <span className="muted">never</span>}
                        </td>
                        {canWrite ? (
                          <td className="right nowrap">
                            {owner ? (
                              <span className="muted">the bootstrap ADMIN_TOKEN</span>
                            ) : (
                              <>
                                <button
                                  type="button"
                                  className="secondary small"
                                  onClick={() => issue.mutate({ operatorId: o.id })}
                                  disabled={issue.isPending}
                                  aria-label={`Issue token for ${o.name}`}
                                >
                                  Issue token
                                </button>{" "}
                                <button
                                  type="button"
                                  className="secondary small"
                                  onClick={() => update.mutate({ operatorId: o.id, disabled: !o.disabled })}
                                  aria-label={`${o.disabled ? "Enable" : "Disable"} ${o.name}`}
                                >
                                  {o.disabled ? "Enable" : "Disable"}
                                </button>{" "}
                                <button
                                  type="button"
                                  className="danger small"
                                  onClick={() => setDeleting(o)}
                                  aria-label={`Delete ${o.name}`}
                                >
                                  Delete
                                </button>
                              </>
                            )}
                          </td>
                        ) : null}
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            </div>
          )}
        </QueryView>
      </div>
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete ${deleting?.name ?? ""}?`}
        confirmLabel="Delete operator"
        busy={remove.isPending}
        error={remove.error}
        onClose={() => setDeleting(null)}
        onConfirm={() => deleting && remove.mutate({ operatorId: deleting.id })}
      >
        <p>Their tokens stop working at once. The audit log keeps their name on what they did.</p>
      </ConfirmDialog>
    </>
  );
}
