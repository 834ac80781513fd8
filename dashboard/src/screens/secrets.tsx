/**
 * Secrets: the declared names with set/unset, version and when (never a
 * value); declare or drop names; set a value through a write-only field;
 * create a one-time link and copy it.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import {
  createSecretLink,
  declareSecrets,
  listSecrets,
  setSecret,
} from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ConfirmDialog, CopyButton, Empty, ErrorBox, QueryView, SecretValueField } from "../ui.tsx";
import { formatTime } from "../format.ts";

export function SecretsTab({ app }: { app: App }) {
  const secrets = useQuery(listSecrets, { appId: app.id });
  const queryClient = useQueryClient();
  const [newName, setNewName] = useState("");
  const [dropping, setDropping] = useState<string | null>(null);
  const [setting, setSetting] = useState<string | null>(null);
  const [link, setLink] = useState<{ name: string; url: string; expires: string } | null>(null);
  const declare = useMutation(declareSecrets, {
    onSuccess: async () => {
      setNewName("");
      setDropping(null);
      await queryClient.invalidateQueries();
    },
  });
  const createLink = useMutation(createSecretLink, {
    onSuccess: (res) => setLink({ name: res.name, url: res.url, expires: formatTime(res.expiresAt) }),
  });
  const declared = app.declaredSecrets;
  return (
    <>
      {!app.secretsEnabled ? (
        <p className="error">Secrets are switched off for this app (Settings); the app cannot read them.</p>
      ) : null}
      <form
        className="card row-form"
        onSubmit={(e) => {
          e.preventDefault();
          declare.mutate({ appId: app.id, names: [...declared, newName.trim()] });
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
        <button type="submit" disabled={declare.isPending || newName.trim() === ""}>
          Declare
        </button>
        {declare.error ? <ErrorBox error={declare.error} title="Not declared" /> : null}
      </form>
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
                      <th scope="col">
                        <span className="sr-only">Actions</span>
                      </th>
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
                        </td>
                        <td className="right" data-label="Version">
                          {s.version !== undefined ? String(s.version) : "—"}
                        </td>
                        <td data-label="Set at">{formatTime(s.setAt)}</td>
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
                            onClick={() => setDropping(s.name)}
                            aria-label={`Drop ${s.name}`}
                          >
                            Drop
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
      {setting ? <SetValue appId={app.id} name={setting} onDone={() => setSetting(null)} /> : null}
      <ConfirmDialog
        open={dropping !== null}
        title={`Drop ${dropping ?? ""}?`}
        confirmLabel="Drop secret"
        busy={declare.isPending}
        error={declare.error}
        onClose={() => setDropping(null)}
        onConfirm={() => declare.mutate({ appId: app.id, names: declared.filter((n) => n !== dropping) })}
      >
        <p>The name leaves the blueprint; its value and its links are deleted.</p>
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
