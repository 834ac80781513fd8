/**
 * How the admin API records what operators do. `audited` runs one change and
 * hands it an `InTransaction` that writes the entry: a store that takes it
 * writes the entry in the change's own transaction, so the change never
 * commits without its record: every facility an audited change goes through
 * takes one (through its `index.ts`). A change that wrote no entry through it
 * (one that changed nothing a store's transaction covers) is recorded right
 * after. A refused or failed attempt is recorded on its own, as `denied` or
 * `failed`, with the error's code. A write refused before its change began
 * (an app id that names no app, a malformed argument) is recorded by
 * `attempted`, once per call: whatever the input, the log keeps the attempt.
 */
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { principalKey, requestIdKey, type OperatorIdentity } from "../core/auth.ts";
import type { Db } from "../core/database/index.ts";
import { toPlatformError } from "../core/errors.ts";
import { createAuditStore, type AuditEntryInput, type AuditOutcome } from "./audit-store.ts";

/** An app as the audit log names it. */
export interface AuditedApp {
  id: string;
  name: string;
}

/** Writes the entry on the change's transaction; `app` names an app only known then (a created one). */
export type AuditWithin = (trx: Db, app?: AuditedApp) => Promise<void>;

export interface Auditor {
  audited<T>(
    context: HandlerContext,
    action: string,
    app: AuditedApp | undefined,
    detail: Record<string, unknown>,
    work: (within: AuditWithin) => Promise<T>,
  ): Promise<T>;
  /** Records an attempt that did not run (a viewer's write), on `app` when it was aimed at one. */
  refused(context: HandlerContext, action: string, detail: Record<string, unknown>, app?: AuditedApp): Promise<void>;
  /** Records a write that failed with `err` when nothing of this call was recorded yet (it failed before `audited`). */
  attempted(
    context: HandlerContext,
    action: string,
    detail: Record<string, unknown>,
    err: unknown,
    app?: AuditedApp,
  ): Promise<void>;
}

/** Set once a call's entry was written (or tried): `attempted` then adds none. */
const recordedKey = createContextKey(false, { description: "audit entry recorded" });

/** The operator of an admin call (the interceptor guarantees one). */
export function operatorOf(context: HandlerContext): OperatorIdentity {
  const principal = context.values.get(principalKey);
  if (principal.kind !== "admin") throw new Error("an admin call without an operator");
  return principal.operator;
}

export function createAuditor(db: Db, logger: Logger): Auditor {
  const store = createAuditStore(db);
  const entry = (
    context: HandlerContext,
    action: string,
    app: AuditedApp | undefined,
    outcome: AuditOutcome,
    detail: Record<string, unknown>,
  ): AuditEntryInput => {
    const operator = operatorOf(context);
    context.values.set(recordedKey, true);
    return {
      operatorId: operator.id,
      operatorName: operator.name,
      action,
      appId: app?.id,
      appName: app?.name,
      requestId: context.values.get(requestIdKey),
      outcome,
      detail,
    };
  };
  const recordAside = async (e: AuditEntryInput) => {
    try {
      await store.record(e);
    } catch (err) {
      // The attempt itself failed or was refused; losing its record must not hide why.
      logger.warn({ err: err instanceof Error ? err.message : String(err), action: e.action }, "audit entry lost");
    }
  };

  return {
    async audited(context, action, app, detail, work) {
      let written = false;
      const within: AuditWithin = async (trx, created) => {
        await createAuditStore(trx).record(entry(context, action, created ?? app, "ok", detail));
        written = true;
      };
      let result;
      try {
        result = await work(within);
      } catch (err) {
        const e = toPlatformError(err);
        const outcome: AuditOutcome = e.code === "permission_denied" ? "denied" : "failed";
        await recordAside(entry(context, action, app, outcome, { ...detail, error: e.code, message: e.message }));
        throw err;
      }
      if (!written) await store.record(entry(context, action, app, "ok", detail));
      return result;
    },

    async refused(context, action, detail, app) {
      await recordAside(entry(context, action, app, "denied", detail));
    },

    async attempted(context, action, detail, err, app) {
      if (context.values.get(recordedKey)) return;
      const e = toPlatformError(err);
      const outcome: AuditOutcome = e.code === "permission_denied" ? "denied" : "failed";
      await recordAside(entry(context, action, app, outcome, { ...detail, error: e.code, message: e.message }));
    },
  };
}
