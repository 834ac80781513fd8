/**
 * The mail facility (SPEC.md section 4 "Mail"): an app sends a plain-text
 * message from the address the platform assigned to it, to any recipient,
 * within a daily cap. `MailService.SendMail` is implemented once; the REST
 * route `POST /v1/mail/send` and Connect/gRPC both call it.
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
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { MailStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import type { MailInit } from "../admin/admin-facility.ts";
import { appOf } from "../auth.ts";
import { PlatformError, toPlatformError } from "../errors.ts";
import type { Deps, Facility } from "../facility.ts";
import { bodyObject, parseJson } from "../rest.ts";
import type { MailProvider } from "./mail-provider.ts";
import { createMailStore, type MailLogRecord, type MailLogStatus } from "./mail-store.ts";
import { createOutboxProvider } from "./outbox-provider.ts";
import { createSesProvider } from "./ses-provider.ts";
import { validateMail } from "./validate-mail.ts";

export interface MailFacility extends Facility<typeof MailService> {
  /** The admin hook behind `AdminService.ListMail`: the app's recent mail, newest first. */
  listMail(appId: string, limit: number): Promise<MailInit[]>;
  /** The admin hook behind `AdminService.GetMail`: one mail of the app's log. */
  getMail(appId: string, id: string): Promise<MailInit | undefined>;
}

function mailMessage(r: MailLogRecord): MailInit {
  return {
    id: r.id,
    to: r.to,
    from: r.from,
    subject: r.subject,
    text: r.text ?? "",
    status: STATUS[r.status],
    at: timestampFromDate(r.at),
    providerMessageId: r.providerMessageId,
  };
}

export interface MailFacilityOptions {
  /** Overrides the provider chosen by `MAIL_PROVIDER`. */
  provider?: MailProvider;
}

/** The JSON shape of `POST /v1/mail/send`; missing fields become "" and get the impl's "is required". */
const SendBody = z.object({
  to: z.string().default(""),
  subject: z.string().default(""),
  text: z.string().default(""),
});

const STATUS: Record<MailLogStatus, MailStatus> = {
  sent: MailStatus.SENT,
  stored: MailStatus.STORED,
  failed: MailStatus.FAILED,
};

/** Only the message of a database error: its other fields (e.g. `detail`) can carry the row, addresses included. */
function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The provider of `MAIL_PROVIDER`: SES in production, the outbox by default. */
export function createMailProvider(deps: Deps): MailProvider {
  const { config, logger } = deps;
  return config.mailProvider === "ses"
    ? createSesProvider({ region: config.awsRegion, endpoint: config.sesEndpoint, logger: logger.child({ facility: "mail" }) })
    : createOutboxProvider();
}

export function createMailFacility(deps: Deps, options: MailFacilityOptions = {}): MailFacility {
  const { db, quotas, metrics } = deps;
  const logger = deps.logger.child({ facility: "mail" });
  const provider = options.provider ?? createMailProvider(deps);
  const store = createMailStore(db);
  const sends = metrics.counter("mail_sends_total", "Mail send attempts, by provider and outcome.", ["provider", "status"] as const);

  /** Logs one attempt and counts it in the metrics. */
  const record = async (appId: string, entry: Parameters<typeof store.record>[1]) => {
    sends.inc({ provider: provider.name, status: entry.status });
    await store.record(appId, entry);
  };

  return {
    service: MailService,
    impl: {
      async sendMail(req, context) {
        const app = appOf(context);
        validateMail(req);
        if (!app.mailFrom) {
          throw new PlatformError("not_configured", "mail is not configured for this app: it has no sender address yet; the platform operator assigns one");
        }
        const mail = { appId: app.id, from: app.mailFrom, to: req.to, subject: req.subject, text: req.text };
        const entry = { to: mail.to, from: mail.from, subject: mail.subject, provider: provider.name };
        const reservation = await quotas.reserve(app.id, "mail", 1, app.limits.mailPerDay);

        let messageId: string;
        try {
          // Not tied to the request's signal: once handed over, a message may leave even if the
          // caller goes away, so the attempt runs to its end and is counted and logged as it ended.
          ({ messageId } = await provider.send(mail));
        } catch (err) {
          const error = err instanceof PlatformError ? err : new PlatformError("upstream_error", "the mail provider failed; retry later", { cause: err });
          await quotas.release(reservation).catch((e: unknown) => logger.error({ err: errorText(e) }, "could not release a mail reservation"));
          await record(app.id, { ...entry, text: null, status: "failed", providerMessageId: "" }).catch((e: unknown) =>
            logger.error({ err: errorText(e), appId: app.id }, "could not log a failed mail"),
          );
          throw error;
        }

        try {
          await record(app.id, {
            ...entry,
            text: provider.delivers ? null : mail.text,
            status: provider.delivers ? "sent" : "stored",
            providerMessageId: messageId,
          });
        } catch (err) {
          if (!provider.delivers) {
            // For the outbox the row is the message: not stored means not sent.
            await quotas.release(reservation).catch((e: unknown) => logger.error({ err: errorText(e) }, "could not release a mail reservation"));
            throw toPlatformError(err);
          }
          // The message has left; answering an error would invite a duplicate send.
          logger.error({ err: errorText(err), appId: app.id, providerMessageId: messageId }, "mail sent but not logged");
        }
        return { sent: true, from: app.mailFrom, remainingToday: BigInt(reservation.remaining) };
      },
    },

    restRoutes(rest) {
      rest.route({
        method: "POST",
        url: "/v1/mail/send",
        rpc: MailService.method.sendMail,
        request: ({ body }) => parseJson(SendBody, bodyObject(body)),
        response: (out) => ({ sent: out.sent, from: out.from, remainingToday: Number(out.remainingToday) }),
      });
    },

    async listMail(appId, limit) {
      return (await store.list(appId, limit)).map(mailMessage);
    },

    async getMail(appId, id) {
      const row = await store.get(appId, id);
      return row ? mailMessage(row) : undefined;
    },

    async start() {
      logger.info(`mail provider: ${provider.description}`);
    },

    async close() {
      await provider.close?.();
    },
  };
}
