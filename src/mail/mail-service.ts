/**
 * `MailService`, implemented once for Connect, gRPC and the REST route
 * `POST /v1/mail/send` (docs/api.md#mail, docs/mail.md): an app sends a plain-text
 * message from the address the platform assigned to it, to any recipient,
 * within a daily cap.
 *
 * Terminology:
 * - **sender address** (`mailFrom`): the app's platform-assigned address; the
 *   caller cannot choose it. An app without one gets 501 `not_configured`.
 * - **provider**: where an accepted message goes: Amazon SES v2 (`ses`) or the
 *   embedded **outbox** (stored in the database, never delivered).
 * - **mail log**: one row per send attempt by either provider (`sent`,
 *   `stored` or `failed`), read by operators through `AdminService.ListMail`.
 * - **allowance**: the `mail` counter of the shared quota module, capped by
 *   the app's `mailPerDay`. One message is reserved before the provider is
 *   called and released when it does not accept the message, so a refused
 *   request consumes nothing.
 */
import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import { appOf } from "../core/auth.ts";
import type { InTransaction } from "../core/database/index.ts";
import { answerInRun } from "../core/idempotent-run.ts";
import { PlatformError, toPlatformError } from "../core/errors.ts";
import type { Metrics } from "../core/metrics.ts";
import { withReservation, type Quotas } from "../core/quotas/index.ts";
import type { MailProvider } from "./mail-provider.ts";
import type { MailLogEntry, MailStore } from "./mail-store.ts";
import { validateMail } from "./validate-mail.ts";

export interface MailServiceOptions {
  provider: MailProvider;
  store: MailStore;
  quotas: Quotas;
  logger: Logger;
  metrics: Metrics;
}

/** Only the message of a database error: its other fields (e.g. `detail`) can carry the row, addresses included. */
function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function createMailService(options: MailServiceOptions): ServiceImpl<typeof MailService> {
  const { provider, store, quotas, logger, metrics } = options;
  const sends = metrics.counter("mail_sends_total", "Mail send attempts, by provider and outcome.", [
    "provider",
    "status",
  ] as const);

  /** Logs one attempt and counts it in the metrics; `answerIn` (an idempotent answer) commits with the log row. */
  const record = async (appId: string, entry: MailLogEntry, answerIn?: InTransaction) => {
    sends.inc({ provider: provider.name, status: entry.status });
    await store.record(appId, entry, answerIn);
  };
  const releaseFailed = (e: unknown) => logger.error({ err: errorText(e) }, "could not release a mail reservation");

  return {
    async sendMail(req, context) {
      const app = appOf(context);
      validateMail(req);
      if (!app.mailFrom) {
        throw new PlatformError(
          "not_configured",
          "mail is not configured for this app: it has no sender address yet; the platform operator assigns one",
        );
      }
      const mail = { appId: app.id, from: app.mailFrom, to: req.to, subject: req.subject, text: req.text };
      const answer = (remaining: number) => ({ sent: true, from: app.mailFrom, remainingToday: BigInt(remaining) });
      // With an Idempotency-Key, the outbox's row (which is the message) commits with the answer.
      const answerIn = provider.delivers ? undefined : answerInRun(context, MailService.method.sendMail, answer);
      const entry = { to: mail.to, from: mail.from, subject: mail.subject, provider: provider.name };
      // Released whole when the work throws: the provider refused, or (outbox) the row that is the message was not stored.
      const { remaining } = await withReservation(
        quotas,
        { appId: app.id, counter: "mail", amount: 1, cap: app.limits.mailPerDay, onReleaseError: releaseFailed },
        async (reservation) => {
          let messageId: string;
          try {
            // Not tied to the request's signal: once handed over, a message may leave even if the
            // caller goes away, so the attempt runs to its end and is counted and logged as it ended.
            ({ messageId } = await provider.send(mail));
          } catch (err) {
            const error =
              err instanceof PlatformError
                ? err
                : new PlatformError("upstream_error", "the mail provider failed; retry later", {
                    cause: err,
                    outcomeUnknown: provider.delivers,
                  });
            // A provider that failed after taking the message may have sent it: not "failed", which says it was not.
            const status = error.outcomeUnknown ? "unconfirmed" : "failed";
            await record(app.id, { ...entry, text: null, status, providerMessageId: "" }).catch((e: unknown) =>
              logger.error({ err: errorText(e), appId: app.id }, "could not log a failed mail"),
            );
            throw error;
          }
          try {
            await record(
              app.id,
              {
                ...entry,
                text: provider.delivers ? null : mail.text,
                status: provider.delivers ? "sent" : "stored",
                providerMessageId: messageId,
              },
              answerIn && ((trx) => answerIn(trx, reservation.remaining)),
            );
          } catch (err) {
            // For the outbox the row is the message: not stored means not sent.
            if (!provider.delivers) throw toPlatformError(err);
            // The message has left; answering an error would invite a duplicate send.
            logger.error(
              { err: errorText(err), appId: app.id, providerMessageId: messageId },
              "mail sent but not logged",
            );
          }
        },
      );
      return answer(remaining);
    },
  };
}
