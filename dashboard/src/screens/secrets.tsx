/**
 * Secrets: the declared names with set/unset, version and when (never a
 * value) and a pending link; declare names (additive: AddSecretNames) or drop
 * one (RemoveSecretNames, which warns when it destroys a value); set a value
 * through a write-only multi-line field; create a one-time link and copy it;
 * list and revoke the outstanding links.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import {
  addSecretNames,
  createSecretLink,
  listSecretLinks,
  listSecrets,
  removeSecretNames,
  revokeSecretLink,
  setSecret,
} from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, SecretLink } from "../../../gen/platform/admin/v1/admin_pb.js";
import type { SecretStatus } from "../../../gen/platform/secrets/v1/secrets_pb.js";
import { useOperator } from "../operator.ts";
import { ConfirmDialog, CopyButton, Empty, ErrorBox, QueryView, SecretValueField } from "../ui.tsx";
import { formatTime } from "../format.ts";

export function SecretsTab({ app }: { app: App }) {
  const secrets = useQuery(listSecrets, { appId: app.id });
  const links = useQuery(listSecretLinks, { appId: app.id });
  const { canWrite } = useOperator();
  const queryClient = useQueryClient();
  const [newName, setNewName] = useState("");
  const [dropping, setDropping] = useState<SecretStatus | null>(null);
  const [revoking, setRevoking] = useState<SecretLink | null>(null);
  const [setting, setSetting] = useState<string | null>(null);
  const [link, setLink] = useState<{ name: string; url: string; expires: string } | null>(null);
  const [dropped, setDropped] = useState<string | null>(null);
  // Declaring is additive: names declared elsewhere meanwhile, and their values, stay.
  const add = useMutation(addSecretNames, {
    onSuccess: async () => {
      setNewName("");
      await queryClient.invalidateQueries();
    },
  });
  const remove = useMutation(removeSecretNames, {
    onSuccess: async (res) => {
      setDropping(null);
      setDropped(
        res.destroyedValues.length
          ? `Dropped; the value of ${res.destroyedValues.join(", ")} was destroyed.`
          : "Dropped; it had no value.",
      );
      await queryClient.invalidateQueries();
    },
    // Refused (a value set since the dialog opened, say): the list is read again, so the secret is shown
    // as it is now when the dialog is opened again.
    onError: () => queryClient.invalidateQueries(),
  });
  const revoke = useMutation(revokeSecretLink, {
    onSuccess: async () => {
      setRevoking(null);
      await queryClient.invalidateQueries();
    },
  });
  const createLink = useMutation(createSecretLink, {
    onSuccess: async (res) => {
      setLink({ name: res.name, url: res.url, expires: formatTime(res.expiresAt) });
      await queryClient.invalidateQueries();
    },
  });
  const pending = new Map<string, SecretLink[]>();
  for (const l of links.data?.links ?? []) pending.set(l.name, [...(pending.get(l.name) ?? []), l]);
  return (
    <>
      {!app.secretsEnabled ? (
        <p className="error">Secrets are switched off for this app (Settings); the app cannot read them.</p>
      ) : null}
      {canWrite ? (
        <form
          className="card row-form"
          onSubmit={(e) => {
            e.preventDefault();
            add.mutate({ appId: app.id, names: [newName.trim()] });
          }}
        >
          <label className="field">
            <span>Declare a secret name</span>
            <input
              value={newName}
              onChange={(e) => setNewName(e.target.value)}
              placeholder="STRIPE_KEY"
              autoComplete="off"
            />
          </label>
          <button type="submit" disabled={add.isPending || newName.trim() === ""}>
            Declare
          </button>
          {add.error ? <ErrorBox error={add.error} title="Not declared" /> : null}
        </form>
      ) : null}
      {link ? (
        <div className="card notice" role="status">
          <p>
            <strong>One-time link for {link.name}</strong> (expires {link.expires}). Whoever opens it can set the value
            once; it cannot read it.
          </p>
          <div className="secret-line">
            <code data-testid="secret-link">{link.url}</code>
            <CopyButton text={link.url} />
            <button type="button" className="secondary" onClick={() => setLink(null)}>
              Done
            </button>
          </div>
        </div>
      ) : null}
      {createLink.error ? <ErrorBox error={createLink.error} title="No link created" /> : null}
      {dropped ? (
        <p role="status" className="ok-text">
          {dropped}
        </p>
      ) : null}
      <div className="card">
        <h2>Declared secrets</h2>
        <QueryView query={secrets} what="secrets">
          {(data) =>
            data.secrets.length === 0 ? (
              <Empty title="No secrets declared">
                Declare the names the app needs above; then set each value or send someone a one-time link.
              </Empty>
            ) : (
              <div className="table-wrap">
                <table className="stack-narrow">
                  <thead>
                    <tr>
                      <th scope="col">Name</th>
                      <th scope="col">Status</th>
                      <th scope="col" className="right">
                        Version
                      </th>
                      <th scope="col">Set at</th>
                      {canWrite ? (
                        <th scope="col">
                          <span className="sr-only">Actions</span>
                        </th>
                      ) : null}
                    </tr>
                  </thead>
                  <tbody>
                    {data.secrets.map((s) => (
                      <tr key={s.name} data-testid={`secret-${s.name}`}>
                        <td data-label="Name">
                          <code>{s.name}</code>
                        </td>
                        <td data-label="Status">
                          <span className={`badge ${s.set ? "ok" : "stopped"}`}>{s.set ? "set" : "not set"}</span>
                          {pending.has(s.name) ? (
                            <>
                              {" "}
                              <span className="badge pending" data-testid={`pending-${s.name}`}>
                                link pending
                              </span>
                            </>
                          ) : null}
                        </td>
                        <td className="right" data-label="Version">
                          {s.version !== undefined ? String(s.version) : "—"}
                        </td>
                        <td data-label="Set at">{formatTime(s.setAt)}</td>
                        {canWrite ? (
                          <td className="right nowrap">
                            <button
                              type="button"
                              className="secondary small"
                              onClick={() => setSetting(s.name)}
                              aria-label={`Set value of ${s.name}`}
                            >
                              Set value
                            </button>{" "}
                            <button
                              type="button"
                              className="secondary small"
                              disabled={createLink.isPending}
                              onClick={() => createLink.mutate({ appId: app.id, name: s.name })}
                              aria-label={`Create link for ${s.name}`}
                            >
                              Create link
                            </button>{" "}
                            <button
                              type="button"
                              className="danger small"
                              onClick={() => setDropping(s)}
                              aria-label={`Drop ${s.name}`}
                            >
                              Drop
                            </button>
                          </td>
                        ) : null}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )
          }
        </QueryView>
      </div>
      {/* Keyed by the name: a value typed for one secret never stays in the form of another. */}
      {setting ? <SetValue key={setting} appId={app.id} name={setting} onDone={() => setSetting(null)} /> : null}
      <div className="card">
        <h2>Outstanding links</h2>
        <QueryView query={links} what="secret links">
          {(data) =>
            data.links.length === 0 ? (
              <Empty title="No links outstanding">
                A link made with Create link (or <code>POST /v1/secrets/{"{name}"}/link</code>) shows here until it is
                used, revoked or expires; at most {app.limits?.maxOutstandingLinks ?? 10} at a time.
              </Empty>
            ) : (
              <div className="table-wrap">
                <table className="stack-narrow" data-testid="secret-links">
                  <thead>
                    <tr>
                      <th scope="col">Secret</th>
                      <th scope="col">Created</th>
                      <th scope="col">Expires</th>
                      {canWrite ? (
                        <th scope="col">
                          <span className="sr-only">Actions</span>
                        </th>
                      ) : null}
                    </tr>
                  </thead>
                  <tbody>
                    {data.links.map((l) => (
                      <tr key={l.id}>
                        <td data-label="Secret">
                          <code>{l.name}</code>
                        </td>
                        <td data-label="Created">{formatTime(l.createdAt)}</td>
                        <td data-label="Expires">{formatTime(l.expiresAt)}</td>
                        {canWrite ? (
                          <td className="right">
                            <button
                              type="button"
                              className="danger small"
                              onClick={() => setRevoking(l)}
                              aria-label={`Revoke link for ${l.name} created ${formatTime(l.createdAt)}`}
                            >
                              Revoke
                            </button>
                          </td>
                        ) : null}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )
          }
        </QueryView>
      </div>
      <ConfirmDialog
        open={revoking !== null}
        title={`Revoke this link for ${revoking?.name ?? ""}?`}
        confirmLabel="Revoke link"
        busy={revoke.isPending}
        error={revoke.error}
        onClose={() => setRevoking(null)}
        onConfirm={() => revoking && revoke.mutate({ appId: app.id, linkId: revoking.id })}
      >
        <p>Whoever has the link can no longer set the value with it. The secret itself does not change.</p>
      </ConfirmDialog>
      <ConfirmDialog
        open={dropping !== null}
        title={`Drop ${dropping?.name ?? ""}?`}
        confirmLabel={dropping?.set ? "Drop and destroy the value" : "Drop secret"}
        busy={remove.isPending}
        error={remove.error}
        onClose={() => {
          setDropping(null);
          remove.reset();
        }}
        onConfirm={() =>
          dropping &&
          remove.mutate({
            appId: app.id,
            names: [dropping.name],
            // Only the value the operator saw is destroyed: one set since (a first value, or a new version)
            // is refused by the server with `conflict`, shown in the dialog.
            confirmDestroyValues: dropping.set,
            expectedVersions: { [dropping.name]: dropping.set ? Number(dropping.version ?? 0) : 0 },
          })
        }
      >
        {dropping?.set ? (
          <p>
            <strong>This destroys the value</strong> of {dropping.name} (version {String(dropping.version ?? "")}) for
            good, and its outstanding links stop working. The app can no longer read it.
          </p>
        ) : (
          <p>
            The name leaves the blueprint. It has no value, so no value is lost; its outstanding links stop working.
          </p>
        )}
      </ConfirmDialog>
    </>
  );
}

function SetValue({ appId, name, onDone }: { appId: string; name: string; onDone: () => void }) {
  const [value, setValue] = useState("");
  const queryClient = useQueryClient();
  const set = useMutation(setSecret, {
    onSuccess: async () => {
      setValue("");
      onDone();
      await queryClient.invalidateQueries();
    },
  });
  return (
    <form
      className="card"
      onSubmit={(e) => {
        e.preventDefault();
        set.mutate({ appId, name, value });
      }}
    >
      <h2>Set {name}</h2>
      <p className="muted">The value is written, never shown: not here, not anywhere in the dashboard.</p>
      <SecretValueField label={`Value of ${name}`} value={value} onChange={setValue} />
      {set.error ? <ErrorBox error={set.error} title="Not set" /> : null}
      <div className="actions">
        <button type="button" className="secondary" onClick={onDone}>
          Cancel
        </button>
        <button type="submit" disabled={set.isPending || value === ""}>
          Set value
        </button>
      </div>
    </form>
  );
}
