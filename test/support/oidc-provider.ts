/**
 * A real OpenID provider for the single sign-on tests: `oidc-provider` (a
 * certified implementation) on a port of its own, with one confidential
 * client (the dashboard) and test accounts. Its development sign-in form takes
 * any login and password; the login is the account's subject, and its e-mail
 * is `<login>@example.test`, verified. Consent is granted at once (the
 * dashboard is the platform's own client), so a sign-in is one form.
 *
 * The issuer is `http://localhost:<port>` while the dashboard is served on
 * `127.0.0.1`: two different sites, so the browser treats the provider's
 * redirect back as the cross-site navigation it is in production.
 */
import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import Provider from "oidc-provider";

export interface TestProvider {
  readonly issuer: string;
  readonly clientId: string;
  readonly clientSecret: string;
  close(): Promise<void>;
}

export async function startOidcProvider(redirectUri: string): Promise<TestProvider> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://localhost:${(server.address() as AddressInfo).port}`;
  const clientId = "platform-dashboard";
  const clientSecret = crypto.randomBytes(24).toString("base64url");
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [redirectUri],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    claims: { openid: ["sub"], email: ["email", "email_verified"] },
    cookies: { keys: [crypto.randomBytes(24).toString("base64url")] },
    features: { devInteractions: { enabled: true } },
    // Its own signing key and lifetimes, so it does not warn about its development defaults.
    jwks: { keys: [signingKey()] },
    ttl: { Interaction: 600, Session: 600, Grant: 600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
    findAccount: (_ctx, id) => ({
      accountId: id,
      claims: () => ({ sub: id, email: `${id}@example.test`, email_verified: true }),
    }),
    async loadExistingGrant(ctx) {
      const session = ctx.oidc.session;
      const client = ctx.oidc.client;
      if (!session?.accountId || !client) return undefined;
      const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
      grant.addOIDCScope("openid email");
      await grant.save();
      return grant;
    },
  });
  const handle = provider.callback();
  server.on("request", (req, res) => void handle(req, res));
  return {
    issuer,
    clientId,
    clientSecret,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function signingKey() {
  const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { ...privateKey.export({ format: "jwk" }), use: "sig", alg: "RS256", kid: "test" };
}

/** A port nobody listens on now, for a server whose URL the provider must know before it starts. */
export async function freePort(): Promise<number> {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
