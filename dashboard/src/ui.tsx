/**
 * Building blocks every screen uses, so that loading, errors, empty lists,
 * confirmations and pagination look and behave the same everywhere.
 */
import { useEffect, useRef, useState, type ReactNode } from "react";
import { errorMessage } from "./transport.ts";

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function ErrorBox({ error, title = "Something went wrong" }: { error: unknown; title?: string }) {
  return (
    <div className="error" role="alert">
      <strong>{title}:</strong> {errorMessage(error)}
    </div>
  );
}

/**
 * What a submitted form says under its fields: the field's own error (found
 * before sending), the server's refusal, or what was done. One place, so every
 * form announces them the same way (alert for errors, status for success).
 */
export function FormOutcome({
  fieldError,
  error,
  errorTitle,
  done,
}: {
  fieldError: string | null;
  error: unknown;
  errorTitle: string;
  done: string | null;
}) {
  return (
    <>
      {fieldError ? (
        <div className="error" role="alert">
          {fieldError}
        </div>
      ) : null}
      {error ? <ErrorBox error={error} title={errorTitle} /> : null}
      {done ? (
        <p role="status" className="ok-text">
          {done}
        </p>
      ) : null}
    </>
  );
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="empty">
      <p className="empty-title">{title}</p>
      {children ? <p className="muted">{children}</p> : null}
    </div>
  );
}

/**
 * Renders the loading or error state of a query, or its data. A refresh that
 * fails keeps the last data on screen under a banner (TanStack keeps `data`
 * when a refetch fails): an outage of a few seconds must not blank the screen.
 */
export function QueryView<T>({
  query,
  what,
  children,
}: {
  query: { data?: T; error: unknown; isPending: boolean; dataUpdatedAt?: number };
  what: string;
  children: (data: T) => ReactNode;
}) {
  if (query.data !== undefined) {
    return (
      <>
        {query.error ? <StaleBanner error={query.error} what={what} at={query.dataUpdatedAt} /> : null}
        {children(query.data)}
      </>
    );
  }
  if (query.isPending) return <Loading what={what} />;
  return <ErrorBox error={query.error} title={`Could not load ${what}`} />;
}

function StaleBanner({ error, what, at }: { error: unknown; what: string; at?: number }) {
  const when = at ? new Date(at).toLocaleTimeString(undefined, { timeStyle: "short" }) : undefined;
  return (
    <div className="banner" role="status" data-testid="stale-banner">
      <strong>Could not refresh {what}.</strong> {errorMessage(error)}{" "}
      {when ? `Showing what was loaded at ${when}; it refreshes again on its own.` : "Showing the last data loaded."}
    </div>
  );
}

export function Meter({ label, used, cap }: { label: string; used: number; cap: number }) {
  const ratio = cap > 0 ? Math.min(1, used / cap) : used > 0 ? 1 : 0;
  const level = ratio >= 0.9 ? "high" : ratio >= 0.7 ? "mid" : "low";
  return (
    <div className="meter">
      <div className="meter-head">
        <span>{label}</span>
        <span className="muted">
          {used.toLocaleString()} / {cap.toLocaleString()}
        </span>
      </div>
      <div
        className={`meter-bar meter-${level}`}
        role="meter"
        aria-label={label}
        aria-valuemin={0}
        aria-valuemax={cap}
        aria-valuenow={used}
      >
        <span style={{ width: `${(ratio * 100).toFixed(1)}%` }} />
      </div>
    </div>
  );
}

export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [state, setState] = useState<"idle" | "copied" | "failed">("idle");
  return (
    <button
      type="button"
      className="secondary"
      onClick={() => {
        navigator.clipboard.writeText(text).then(
          () => setState("copied"),
          () => setState("failed"),
        );
      }}
    >
      {state === "copied" ? "Copied" : state === "failed" ? "Copy failed: select and copy" : label}
    </button>
  );
}

/**
 * A modal confirmation (the native `<dialog>`: focus trapped, Escape closes).
 * With `typeToConfirm`, the action stays disabled until that text is typed.
 */
export function ConfirmDialog(props: {
  open: boolean;
  title: string;
  children?: ReactNode;
  confirmLabel: string;
  typeToConfirm?: string;
  busy?: boolean;
  error?: unknown;
  onConfirm: () => void;
  onClose: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const [typed, setTyped] = useState("");
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) {
      setTyped("");
      dialog.showModal();
    } else if (!props.open && dialog.open) dialog.close();
  }, [props.open]);
  const ready = props.typeToConfirm === undefined || typed === props.typeToConfirm;
  return (
    <dialog ref={ref} onClose={props.onClose} aria-label={props.title}>
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          if (ready) props.onConfirm();
        }}
      >
        <h2>{props.title}</h2>
        {props.children}
        {props.typeToConfirm !== undefined ? (
          <label className="field">
            <span>
              Type <code>{props.typeToConfirm}</code> to confirm
            </span>
            <input value={typed} onChange={(e) => setTyped(e.target.value)} autoComplete="off" />
          </label>
        ) : null}
        {props.error ? <ErrorBox error={props.error} title="Refused" /> : null}
        <div className="actions">
          <button type="button" className="secondary" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" className="danger" disabled={!ready || props.busy}>
            {props.confirmLabel}
          </button>
        </div>
      </form>
    </dialog>
  );
}

/**
 * Client-side pages of `size` rows: a list of thousands renders one page at a
 * time. A new `resetKey` (e.g. the filter) starts again from the first page.
 */
export function usePages<T>(rows: readonly T[], size = 50, resetKey: unknown = undefined) {
  const [state, setState] = useState({ page: 0, key: resetKey });
  const page = Object.is(state.key, resetKey) ? state.page : 0;
  const setPage = (next: number) => setState({ page: next, key: resetKey });
  const pages = Math.max(1, Math.ceil(rows.length / size));
  const current = Math.min(page, pages - 1);
  return {
    rows: rows.slice(current * size, current * size + size),
    pager:
      pages > 1 ? (
        <nav className="pager" aria-label="Pages">
          <button type="button" className="secondary" disabled={current === 0} onClick={() => setPage(current - 1)}>
            Previous
          </button>
          <span>
            Page {current + 1} of {pages} ({rows.length.toLocaleString()} in all)
          </span>
          <button
            type="button"
            className="secondary"
            disabled={current >= pages - 1}
            onClick={() => setPage(current + 1)}
          >
            Next
          </button>
        </nav>
      ) : null,
  };
}

/**
 * A write-only field for a secret value. A `<textarea>` rather than an
 * `<input type=password>`: a password input turns the line breaks of a
 * pasted PEM key or JSON document into nothing, and the value must be kept
 * byte for byte. The characters are masked (`-webkit-text-security`) until
 * "Show" is ticked, so a screen share does not leak the value.
 */
export function SecretValueField({
  label,
  value,
  onChange,
}: {
  label: string;
  value: string;
  onChange: (value: string) => void;
}) {
  const [shown, setShown] = useState(false);
  const lines = value.split("\n").length;
  return (
    <div className="secret-field">
      <label className="field">
        <span>{label}</span>
        <textarea
          className={shown ? undefined : "masked"}
          value={value}
          onChange={(e) => onChange(e.target.value)}
          rows={Math.min(12, Math.max(3, lines))}
          autoComplete="off"
          autoCapitalize="off"
          autoCorrect="off"
          spellCheck={false}
          wrap="off"
        />
      </label>
      <label className="check">
        <input type="checkbox" checked={shown} onChange={(e) => setShown(e.target.checked)} /> Show the value
      </label>
      <small className="muted">
        {value === ""
          ? "Paste or type the value; line breaks are kept."
          : `${lines} line${lines === 1 ? "" : "s"}, kept as typed.`}
      </small>
    </div>
  );
}

/** `value` once it has stopped changing for `ms`: a field typed into applies when typing stops. */
export function useDebounced<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

/** One column of a `DataTable`: its header, its cells, and the class both take (e.g. "right hide-narrow"). */
export interface Column<T> {
  header: string;
  cell: (row: T) => ReactNode;
  className?: string;
  testId?: string;
}

/**
 * The screens' table: a caption for screen readers, one header row, one row per item; on narrow screens
 * (`stack-narrow`) each cell is labelled with its header.
 */
export function DataTable<T>({
  caption,
  columns,
  rows,
  rowKey,
  rowTestId,
}: {
  caption: string;
  columns: readonly Column<T>[];
  rows: readonly T[];
  rowKey: (row: T) => string;
  rowTestId?: (row: T) => string;
}) {
  return (
    <div className="table-wrap">
      <table className="stack-narrow">
        <caption className="sr-only">{caption}</caption>
        <thead>
          <tr>
            {columns.map((c) => (
              <th key={c.header} scope="col" className={c.className}>
                {c.header}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={rowKey(row)} data-testid={rowTestId?.(row)}>
              {columns.map((c) => (
                <td key={c.header} data-label={c.header} className={c.className} data-testid={c.testId}>
                  {c.cell(row)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
