/**
 * Amazon SES v2 `SendEmail` with simple content (a UTF-8 subject and a
 * plain-text body), the sending app's id as the email tag `app_id` (so
 * bounces, complaints and CloudWatch metrics can be traced to an app).
 * Credentials come from the standard AWS chain; the region and the endpoint
 * override come from the service's configuration, so a deployment (or a test)
 * points the client at a stand-in through `AWS_ENDPOINT_URL_SES`.
 */
import { GetAccountCommand, SESv2Client, SendEmailCommand, SESv2ServiceException } from "@aws-sdk/client-sesv2";
import { awsAnswers } from "../core/aws-answers.ts";
import type { Logger } from "pino";
import { PlatformError } from "../core/errors.ts";
import type { MailProvider } from "./mail-provider.ts";

export interface SesProviderOptions {
  region: string | undefined;
  /** An endpoint override (`AWS_ENDPOINT_URL_SES`); undefined means the SDK's default. */
  endpoint: string | undefined;
  logger: Logger;
  /** Attempts per message, including the first; only a throttled send is tried again. */
  maxAttempts?: number;
}

/** SES's names for "not now": the message was not taken, so sending it again cannot send it twice. */
const THROTTLED = new Set(["TooManyRequestsException", "LimitExceededException", "ThrottlingException"]);

/** The email tag that carries the sending app's id. */
const APP_ID_TAG = "app_id";

export function createSesProvider(options: SesProviderOptions): MailProvider {
  const client = new SESv2Client({
    region: options.region,
    ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    // SendEmail is not idempotent: the SDK's own retries would send again after a 5xx, a reset
    // connection or a timeout, when SES may already have taken the message. Only throttling,
    // which takes nothing, is retried (below).
    maxAttempts: 1,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 20_000 },
  });
  return {
    name: "ses",
    delivers: true,
    description: `ses: mail is sent through Amazon SES v2 in ${options.region ?? "the default region"}${options.endpoint ? ` at ${options.endpoint}` : ""}`,
    ping: (signal) => awsAnswers(() => client.send(new GetAccountCommand({}), { abortSignal: signal })),
    async send(mail) {
      const command = new SendEmailCommand({
        FromEmailAddress: mail.from,
        Destination: { ToAddresses: [mail.to] },
        Content: {
          Simple: {
            Subject: { Data: mail.subject, Charset: "UTF-8" },
            Body: { Text: { Data: mail.text, Charset: "UTF-8" } },
          },
        },
        EmailTags: [{ Name: APP_ID_TAG, Value: mail.appId }],
      });
      const attempts = options.maxAttempts ?? 3;
      try {
        for (let attempt = 1; ; attempt++) {
          try {
            const out = await client.send(command);
            return { messageId: out.MessageId ?? "" };
          } catch (err) {
            if (attempt >= attempts || !(err instanceof Error) || !THROTTLED.has(err.name)) throw err;
            await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** (attempt - 1)));
          }
        }
      } catch (err) {
        const error = describeSesError(err);
        if (error.httpStatus !== undefined && error.httpStatus >= 200 && error.httpStatus < 300) {
          // SES answered 200, so it took the message; only its answer's body could not be read (cut short,
          // not JSON). Told as refused, the app would send the mail again.
          options.logger.warn(
            { appId: mail.appId, sesError: error.kind, httpStatus: error.httpStatus },
            "SES accepted a message, but its answer could not be read: sent without a message id",
          );
          return { messageId: "" };
        }
        // The provider's own message may name the account, region or identities: log only its kind.
        options.logger.warn(
          { appId: mail.appId, sesError: error.kind, httpStatus: error.httpStatus },
          "SES did not accept a message",
        );
        // Only an answer of SES refusing (4xx), or a connection never made, says the message was not
        // taken; after a 5xx, a reset connection or a timeout it may have been.
        const refused = error.httpStatus !== undefined && error.httpStatus >= 400 && error.httpStatus < 500;
        const outcomeUnknown = !refused && !neverConnected(err);
        throw new PlatformError("upstream_error", error.message, { cause: err, outcomeUnknown });
      }
    },
    close() {
      client.destroy();
    },
  };
}

/** Network errors that come before a connection exists: nothing of the request reached SES. */
const BEFORE_CONNECTION_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * Whether a failure came before any connection to SES existed (refused, DNS,
 * no route, the SDK's connect timeout): the message certainly did not leave,
 * so the send may be given back and run again. Errors of a connection that
 * existed (a reset, a request timeout) are not: the request may have arrived.
 */
function neverConnected(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as NodeJS.ErrnoException;
  if (e.code !== undefined && BEFORE_CONNECTION_CODES.has(e.code)) return true;
  if (e.syscall === "connect" || e.syscall === "getaddrinfo") return true;
  // @smithy/node-http-handler's connection timeout ("... did not establish a connection ...").
  return e.name === "TimeoutError" && /did not establish a connection/.test(e.message);
}

interface SesErrorDescription {
  /** The SES error name, or a network error kind; for the log only. */
  kind: string;
  httpStatus: number | undefined;
  /** What the app is told: actionable, with no provider internals. */
  message: string;
}

/** Maps an SES (or network) error onto a message that helps the app decide what to do. */
function describeSesError(err: unknown): SesErrorDescription {
  // The SDK attaches `$metadata` to network errors too; only an HTTP answer makes it SES's word.
  const httpStatus = (err as Partial<SESv2ServiceException> | undefined)?.$metadata?.httpStatusCode;
  if (err instanceof SESv2ServiceException || (err instanceof Error && httpStatus !== undefined)) {
    const e = err as SESv2ServiceException;
    const message = (() => {
      switch (e.name) {
        case "MessageRejected":
          return "the mail provider rejected this message; check the recipient address and the content";
        case "MailFromDomainNotVerifiedException":
        case "NotFoundException":
          return "the mail provider does not accept this app's sender address yet; ask the platform operator";
        case "AccountSuspendedException":
        case "SendingPausedException":
          return "sending mail is paused for this platform; ask the platform operator";
        case "TooManyRequestsException":
        case "LimitExceededException":
        case "ThrottlingException":
          return "the mail provider is throttling sends; retry later";
        case "BadRequestException":
          return "the mail provider refused this message as invalid";
        default:
          return e.$fault === "server" || (httpStatus ?? 0) >= 500
            ? "the mail provider failed; retry later"
            : "the mail provider refused this message";
      }
    })();
    return { kind: e.name, httpStatus, message };
  }
  // No HTTP answer: refused or reset connection, DNS, timeout (the SDK names several of these TimeoutError).
  const kind = err instanceof Error ? ((err as NodeJS.ErrnoException).code ?? err.name) : "unknown";
  return {
    kind,
    httpStatus: undefined,
    message: "the mail provider could not be reached or did not answer; retry later",
  };
}
