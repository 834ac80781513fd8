/**
 * The one interface behind which mail leaves the platform. The facility
 * validates, reserves the daily allowance and logs; a provider only hands one
 * message over. A provider that cannot hand it over throws a `PlatformError`
 * `upstream_error` whose message helps the app (retry later, ask the
 * operator, check the address) and never carries the provider's own text,
 * which can name accounts, regions or identities.
 */
interface OutgoingMail {
  /** The sending app, passed to the provider for tagging and tracing. */
  readonly appId: string;
  /** The app's platform-assigned address; never chosen by the caller. */
  readonly from: string;
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

export interface MailProvider {
  readonly name: "ses" | "outbox";
  /**
   * Whether an accepted message really leaves the platform. The outbox does not
   * deliver: its log row *is* the message, so it gets status `stored` and keeps
   * the text; a delivering provider's accepted message gets status `sent`.
   */
  readonly delivers: boolean;
  /** One line for the start-up log saying what this provider does with mail. */
  readonly description: string;
  /** Hands one message over; resolves with the provider's message id. */
  send(mail: OutgoingMail): Promise<{ messageId: string }>;
  /** Resolves when the provider answers (for `/ready`); the outbox, in the database, has none. */
  ping?(signal: AbortSignal): Promise<void>;
  close?(): Promise<void> | void;
}
