/**
 * How the admin API records what operators do. `audited` opens the change's
 * unit of work, hands its `Tx` to the change (which passes it to every
 * facility operation it calls), and writes the entry on that same `Tx` as its
 * last statement: the change never commits without its record, and no entry
 * of a change can be written anywhere else, as the change only ever gets the
 * `Tx`. A refused or failed attempt is recorded on its own, as `denied` or
 * `failed`, with the error's code. A write refused before its change began
 * (an app id that names no app, a malformed argument) is recorded by
 * `attempted`, once per call: whatever the input, the log keeps the attempt.
 */
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { principalKey, requestIdKey, type OperatorIdentity } from "../core/auth.ts";
import { unitOfWork, type Db, type Tx } from "../core/database/index.ts";
import { toPlatformError } from "../core/errors.ts";
import { createAuditStore, type AuditEntryInput, type AuditOutcome } from "./audit-store.ts";

/** An app as the audit log names it. */
export interface AuditedApp {
  id: string;
  name: string;
}

/** Names the app of the entry when only the change knows it (a created app, a token's app). */
type Concerns = (app: AuditedApp | undefined) => void;

export interface Auditor {
  audited<T>(
    context: HandlerContext,
    action: string,
    app: AuditedApp | undefined,
    detail: Record<string, unknown>,
    work: (tx: Tx, concerns: Concerns) => Promise<T>,
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
      try {
        return await unitOfWork(db, async (tx) => {
          let about = app;
          const result = await work(tx, (named) => {
            about = named ?? app;
          });
          // Last: the entry's lock orders the log and is held only for the commit (see `audit-store.ts`).
          await createAuditStore(tx.db).record(entry(context, action, about, "ok", detail));
          return result;
        });
      } catch (err) {
        const e = toPlatformError(err);
        const outcome: AuditOutcome = e.code === "permission_denied" ? "denied" : "failed";
        await recordAside(entry(context, action, app, outcome, { ...detail, error: e.code, message: e.message }));
        throw err;
      }
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
