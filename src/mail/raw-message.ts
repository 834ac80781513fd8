/**
 * One mail of the log as an RFC 5322 message, for the operator's "raw" view:
 * the headers the platform sends (From, To, Subject, Date, Message-ID, MIME)
 * and the text body where the log keeps it (the outbox; SES sends are logged
 * without their body). Rebuilt from the log row: the platform never stores a
 * second copy of a message.
 */
import type { MailLogRecord } from "./mail-store.ts";

export interface RawMessage {
  raw: string;
  headers: { name: string; value: string }[];
}

/** A header value as RFC 2047 encoded words when it is not plain ASCII. */
function encodeHeader(value: string): string {
  if (/^[\x20-\x7e]*$/.test(value)) return value;
  return `=?UTF-8?B?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

export function rawMessage(mail: MailLogRecord): RawMessage {
  const headers = [
    { name: "From", value: mail.from },
    { name: "To", value: mail.to },
    { name: "Subject", value: mail.subject },
    { name: "Date", value: mail.at.toUTCString().replace("GMT", "+0000") },
    ...(mail.providerMessageId ? [{ name: "Message-ID", value: `<${mail.providerMessageId}>` }] : []),
    { name: "MIME-Version", value: "1.0" },
    { name: "Content-Type", value: "text/plain; charset=utf-8" },
    { name: "Content-Transfer-Encoding", value: "8bit" },
  ];
  const head = headers.map((h) => `${h.name}: ${encodeHeader(h.value)}`).join("\r\n");
  const body = (mail.text ?? "").replace(/\r?\n/g, "\r\n");
  return { raw: `${head}\r\n\r\n${body}`, headers };
}
