/**
 * The secret-link web page, served outside `/v1` and without a service
 * token: the link token in the path is the only credential.
 *
 * - `GET /secret-links/:token` shows a form and changes nothing: mail
 *   scanners and chat previews fetch links, and must not use them up.
 * - `POST` (the form) or `PUT` with JSON `{ value }` (scripts) sets the value
 *   and uses the link up in one transaction.
 * - An unknown, used or expired link gets one and the same 404, so the page
 *   tells nobody which of the three it was.
 *
 * The page loads nothing (no scripts, no third-party assets) and its only
 * inline style is allowed by hash in the Content-Security-Policy. The form
 * carries a CSRF token, an HMAC of the link token's hash, checked on POST.
 * Nothing here ever writes the value back into a page or a log.
 */
import crypto from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { PlatformError } from "../core/errors.ts";
import { FORM_ROUTE_CONFIG } from "../core/http/body-parsers.ts";
import { registerSecurityHeaders, type CspDirectives } from "../core/http/security-headers.ts";
import type { LinkInfo, SetResult } from "./secret-store.ts";
import { hashLinkToken } from "./secret-store.ts";

export interface LinkPageOptions {
  findLink(token: string): Promise<LinkInfo | undefined>;
  /** Sets the value and uses the link up; undefined when the link is unknown, used or expired. */
  useLink(token: string, value: string): Promise<SetResult | undefined>;
  /**
   * Keys of the form's CSRF token: the first makes it, any of them checks it
   * (so a form made by an instance that still seals under the previous key,
   * during a key rotation, is accepted by one that has moved on).
   */
  csrfKeys: Buffer[];
  valueProblem(value: unknown): string | undefined;
}

/** 32 random bytes, base64url: anything else cannot be a link and gets the 404 without a query. */
const TOKEN_PATTERN = /^[A-Za-z0-9_-]{43}$/;

const STYLE = `
body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
main{max-width:32rem;margin:3rem auto;padding:1.5rem 2rem;background:#fff;border:1px solid #d0d7de;border-radius:8px}
h1{font-size:1.4rem;margin-top:0}
code{font-size:0.95em;background:#eef1f4;padding:0 .25rem;border-radius:4px}
label{display:block;font-weight:600;margin:1rem 0 .25rem}
textarea{box-sizing:border-box;width:100%;padding:.5rem;font:14px/1.4 ui-monospace,Menlo,Consolas,monospace;border:1px solid #8c959f;border-radius:6px;resize:vertical;-webkit-text-security:disc}
form:has(#show:checked) textarea{-webkit-text-security:none}
.check{display:flex;gap:.5rem;align-items:center;font-weight:400;margin:.5rem 0 0}
input:focus,textarea:focus,button:focus{outline:3px solid #0969da;outline-offset:2px}
button{margin-top:1rem;padding:.5rem 1.25rem;font:inherit;color:#fff;background:#1f6feb;border:0;border-radius:6px;cursor:pointer}
.hint{color:#57606a;font-size:.9rem}
.error{color:#a40e26;font-weight:600}
`;

const STYLE_HASH = crypto.createHash("sha256").update(STYLE, "utf8").digest("base64");

/** Nothing loads; the one inline style by its hash; the form posts only here (helmet's other headers come with it). */
const CONTENT_SECURITY_POLICY: CspDirectives = {
  "default-src": ["'none'"],
  "style-src": [`'sha256-${STYLE_HASH}'`],
  "form-action": ["'self'"],
  "base-uri": ["'none'"],
};

/** What helmet does not set: a page holding a one-time link is never cached or indexed. */
function privacyHeaders(reply: FastifyReply): void {
  reply.header("cache-control", "no-store");
  reply.header("pragma", "no-cache");
  reply.header("x-robots-tag", "noindex, nofollow");
}

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

function formPage(link: LinkInfo, csrf: string, error?: string): string {
  const name = escapeHtml(link.name);
  const expires = link.expiresAt.toISOString();
  const errorHtml = error ? `<p class="error" id="value-error" role="alert">${escapeHtml(error)}</p>\n` : "";
  const describedBy = error ? "value-error value-hint" : "value-hint";
  return page(
    `Set secret ${link.name}`,
    `<h1>Set a secret</h1>
<p>The app <strong>${escapeHtml(link.appName)}</strong> asks for the value of the secret <code>${name}</code>.</p>
<p class="hint">This link works once and expires at <time datetime="${expires}">${escapeHtml(link.expiresAt.toUTCString())}</time>.</p>
<form method="post">
<input type="hidden" name="csrf" value="${escapeHtml(csrf)}">
${errorHtml}<label for="value">Value of ${name}</label>
<textarea id="value" name="value" rows="6" wrap="off" required autocomplete="off" autocapitalize="off" spellcheck="false" autofocus aria-describedby="${describedBy}"${error ? ' aria-invalid="true"' : ""}></textarea>
<label class="check" for="show"><input type="checkbox" id="show"> Show the value</label>
<p class="hint" id="value-hint">Line breaks are kept (paste a key file as it is). The value is stored encrypted and only the app can read it. Nobody can read it back through this link.</p>
<button type="submit">Set secret</button>
</form>`,
  );
}

function donePage(result: SetResult): string {
  return page(
    `Secret ${result.name} set`,
    `<h1>Secret set</h1>
<p role="status">The secret <code>${escapeHtml(result.name)}</code> is set (version ${result.version}). This link is now used up; you can close this page.</p>`,
  );
}

function deadPage(): string {
  return page(
    "Link not available",
    `<h1>This link is not available</h1>
<p>The link is unknown, has been used already, or has expired. Ask the app's owner for a new link.</p>`,
  );
}

function badFormPage(message: string): string {
  return page(
    "Form out of date",
    `<h1>Please try again</h1>
<p role="alert">${escapeHtml(message)} Reload this page and submit the form again.</p>`,
  );
}

/**
 * The value as it stood in the form's `<textarea>`. Browsers submit every line
 * break of a textarea as CRLF (HTML's form encoding), while the field itself
 * holds LF only (a pasted CRLF or lone CR becomes LF there): turning CRLF back
 * into LF stores exactly the text the person saw, so a PEM key stays a PEM key.
 * A value that needs CR bytes is set with `PUT` and JSON, which is taken as is.
 */
function formValue(submitted: string): string {
  return submitted.replace(/\r\n/g, "\n");
}

export function registerLinkPage(fastify: FastifyInstance, options: LinkPageOptions): void {
  void fastify.register(async (scope) => {
    await registerSecurityHeaders(scope, CONTENT_SECURITY_POLICY);
    registerLinkRoutes(scope, options);
  });
}

function registerLinkRoutes(fastify: FastifyInstance, options: LinkPageOptions): void {
  const csrfWith = (key: Buffer, token: string) =>
    crypto
      .createHmac("sha256", key)
      .update(`secret-link-form\0${hashLinkToken(token)}`)
      .digest();
  const csrfFor = (token: string) => csrfWith(options.csrfKeys[0], token).toString("base64url");
  const csrfMatches = (token: string, given: unknown) => {
    if (typeof given !== "string") return false;
    const actual = Buffer.from(given, "base64url");
    return options.csrfKeys.some((key) => {
      const expected = csrfWith(key, token);
      return actual.length === expected.length && crypto.timingSafeEqual(actual, expected);
    });
  };
  const html = (reply: FastifyReply, status: number, body: string) =>
    reply.code(status).type("text/html; charset=utf-8").send(body);
  const tokenOf = (req: FastifyRequest) => {
    const token = (req.params as { token?: string }).token ?? "";
    return TOKEN_PATTERN.test(token) ? token : undefined;
  };
  /** One method of the link's URL, every answer with the privacy headers; `token` is undefined when malformed. */
  const linkRoute = (
    method: "GET" | "POST" | "PUT",
    handler: (token: string | undefined, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>,
    config?: typeof FORM_ROUTE_CONFIG,
  ) =>
    fastify.route({
      method,
      url: "/secret-links/:token",
      ...(config && { config }),
      onRequest: async (_req, reply) => privacyHeaders(reply),
      handler: (req, reply) => handler(tokenOf(req), req, reply),
    });

  linkRoute("GET", async (token, _req, reply) => {
    const link = token ? await options.findLink(token) : undefined;
    if (!token || !link) return html(reply, 404, deadPage());
    return html(reply, 200, formPage(link, csrfFor(token)));
  });

  linkRoute(
    "POST",
    async (token, req, reply) => {
      if (!token) return html(reply, 404, deadPage());
      const body = (req.body ?? {}) as Record<string, unknown>;
      const problem = typeof body === "object" && !Array.isArray(body) ? undefined : "The form could not be read.";
      const form = problem ? {} : body;
      if (problem || !csrfMatches(token, form.csrf)) {
        const link = await options.findLink(token);
        if (!link) return html(reply, 404, deadPage());
        return html(reply, 400, badFormPage(problem ?? "The form is out of date."));
      }
      const valueProblem = options.valueProblem(form.value);
      if (valueProblem) {
        const link = await options.findLink(token);
        if (!link) return html(reply, 404, deadPage());
        return html(reply, 400, formPage(link, csrfFor(token), `The value ${valueProblem}.`));
      }
      const result = await options.useLink(token, formValue(form.value as string));
      if (!result) return html(reply, 404, deadPage());
      return html(reply, 200, donePage(result));
    },
    FORM_ROUTE_CONFIG,
  );

  linkRoute("PUT", async (token, req, reply) => {
    const body = req.body;
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new PlatformError("invalid_argument", "body: must be a JSON object { value }", {
        details: ["body: must be a JSON object"],
      });
    }
    const value = (body as Record<string, unknown>).value;
    const problem = options.valueProblem(value);
    if (problem) throw new PlatformError("invalid_argument", `value: ${problem}`, { details: [`value: ${problem}`] });
    const result = token ? await options.useLink(token, value as string) : undefined;
    if (!result) throw new PlatformError("not_found", "this link is unknown, used or expired");
    return reply.code(200).send({ name: result.name, version: result.version, setAt: result.setAt.getTime() });
  });
}
