/**
 * The security headers of the service's HTML pages (the secret-link page, the
 * dashboard, the API reference), from `@fastify/helmet`: each page registers
 * it in its own encapsulated scope with its own Content-Security-Policy, so a
 * page's policy applies to its routes only and the JSON API carries none of it.
 *
 * Beyond helmet's defaults: no `Strict-Transport-Security` (TLS usually ends at
 * a load balancer, which owns that decision for its domain and subdomains),
 * and frames denied outright (`X-Frame-Options: DENY`, with `frame-ancestors
 * 'none'` in every policy).
 */
import helmet, { type FastifyHelmetOptions } from "@fastify/helmet";
import type { FastifyInstance } from "fastify";

/** CSP directives, e.g. `{ "default-src": ["'none'"], "script-src": ["'self'"] }`. */
export type CspDirectives = Record<string, string[]>;

/** The helmet options of a page with these CSP directives (`frame-ancestors 'none'` is always added). */
function securityHeaderOptions(directives: CspDirectives): FastifyHelmetOptions {
  return {
    contentSecurityPolicy: { useDefaults: false, directives: { ...directives, "frame-ancestors": ["'none'"] } },
    strictTransportSecurity: false,
    frameguard: { action: "deny" },
    referrerPolicy: { policy: "no-referrer" },
  };
}

/** Registers the headers on `scope`, which must be an encapsulated scope holding only the page's routes. */
export async function registerSecurityHeaders(scope: FastifyInstance, directives: CspDirectives): Promise<void> {
  await scope.register(helmet, securityHeaderOptions(directives));
}

/** The policy as one header value, for a page that must compute part of it from its body (`api-docs.ts`). */
export function cspHeader(directives: CspDirectives): string {
  return Object.entries({ ...directives, "frame-ancestors": ["'none'"] })
    .map(([name, values]) => [name, ...values].join(" "))
    .join("; ");
}
