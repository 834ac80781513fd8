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

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="empty">
      <p className="empty-title">{title}</p>
      {children ? <p className="muted">{children}</p> : null}
    </div>
  );
}

/** Renders the loading or error state of a query, or its data. */
export function QueryView<T>({
  query,
  what,
  children,
}: {
  query: { data?: T; error: unknown; isPending: boolean };
  what: string;
  children: (data: T) => ReactNode;
}) {
  if (query.isPending) return <Loading what={what} />;
  if (query.error || query.data === undefined) return <ErrorBox error={query.error} title={`Could not load ${what}`} />;
  return <>{children(query.data)}</>;
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

/** Client-side pages of `size` rows: a list of thousands renders one page at a time. */
export function usePages<T>(rows: readonly T[], size = 50) {
  const [page, setPage] = useState(0);
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
