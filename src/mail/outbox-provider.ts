/**
 * The embedded default provider: nothing leaves the platform. The message is
 * kept in the mail log (by the facility, with its text) and can be read back
 * through `AdminService.ListMail`, which is what a developer or a test needs
 * without an email account.
 */
import crypto from "node:crypto";
import type { MailProvider } from "./mail-provider.ts";

export function createOutboxProvider(): MailProvider {
  return {
    name: "outbox",
    delivers: false,
    description: "outbox: mail is stored in the database and readable through AdminService.ListMail, never delivered",
    async send() {
      return { messageId: crypto.randomUUID() };
    },
  };
}
