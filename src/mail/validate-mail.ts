/**
 * The rules of a mail request, checked once in the implementation so REST and
 * gRPC refuse the same inputs with the same messages (docs/api.md#mail,
 * docs/mail.md).
 *
 * - `to`: a "valid e-mail address" of the HTML standard (WHATWG), the rule a
 *   browser's `<input type=email>` applies; that rule sets no length, so the
 *   SMTP limits are added (local part at most 64, whole address at most 254),
 *   so an address no provider can take is a 400 here rather than a 502 later.
 * - `subject`: 1 to 200 characters, no CR or LF (a line break in a header is
 *   header injection), no NUL.
 * - `text`: 1 to 100000 characters, no NUL (no mail system carries it).
 *
 * Lengths count Unicode characters (code points), not UTF-16 units or bytes;
 * a string with a lone surrogate is not text and is refused.
 */
import { z } from "zod";
import { PlatformError } from "../core/errors.ts";
import { characterCount, isWellFormedText } from "../core/text.ts";

/** The WHATWG "valid e-mail address" production, as zod ships it. */
const WHATWG_EMAIL = z.regexes.html5Email;

const SUBJECT_MAX = 200;
const TEXT_MAX = 100_000;

export interface MailFields {
  to: string;
  subject: string;
  text: string;
}

/** Why `to` is not an address we send to, or undefined when it is one. */
export function addressProblem(to: string): string | undefined {
  if (to === "") return "is required";
  // The length first: it is cheap, and it bounds the regular expression's work.
  if (to.length > 254) return "must be at most 254 characters";
  if (!WHATWG_EMAIL.test(to))
    return "must be an email address (local@domain, ASCII, as in HTML's valid e-mail address)";
  if (to.indexOf("@") > 64) return "must have at most 64 characters before the @";
  return undefined;
}

function textProblem(value: string, max: number): string | undefined {
  if (value === "") return "is required (1 to " + max + " characters)";
  if (!isWellFormedText(value)) return "must be valid Unicode text (it has a lone surrogate)";
  const n = characterCount(value);
  if (n > max) return `must be 1 to ${max} characters (got ${n})`;
  if (value.includes("\0")) return "must not contain NUL characters";
  return undefined;
}

/** Throws one 400 naming every field that breaks a rule (the first in `message`). */
export function validateMail(fields: MailFields): void {
  const problems: string[] = [];
  const to = addressProblem(fields.to);
  if (to) problems.push(`to: ${to}`);
  const subject =
    textProblem(fields.subject, SUBJECT_MAX) ??
    (/[\r\n]/.test(fields.subject) ? "must not contain CR or LF (line breaks in a header are refused)" : undefined);
  if (subject) problems.push(`subject: ${subject}`);
  const text = textProblem(fields.text, TEXT_MAX);
  if (text) problems.push(`text: ${text}`);
  if (problems.length > 0) throw new PlatformError("invalid_argument", problems[0], { details: problems });
}
