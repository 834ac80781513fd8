/**
 * One shared setup for every test that needs a running service: a fresh
 * database (a new database on the PostgreSQL of DATABASE_URL, or a new PGlite
 * directory when it is unset), a server on a random port, and real clients.
 */
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fsSync from "node:fs";
import fs from "node:fs/promises";
import http2 from "node:http2";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { createScratchDatabase } from "./scratch-database.ts";
import { afterAll, beforeAll, describe } from "vitest";
import { ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { AdminService, AppStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { loadConfig } from "../../src/core/config.ts";
import { resolveDataDirSecrets } from "../../src/core/data-dir.ts";
import { createLogger } from "../../src/core/logger.ts";
import { createPlatformServer, type PlatformServer, type ServerOptions } from "../../src/platform-server.ts";
import { migrate, openDatabase, type Database } from "../../src/core/database/index.ts";

/** Which backend this run uses: "postgres" when DATABASE_URL is set, else "pglite". */
export const backend: "postgres" | "pglite" = process.env.DATABASE_URL ? "postgres" : "pglite";

/**
 * The PostgreSQL server the PostgreSQL-only guarantees run on: DATABASE_URL's, or, in a PGlite run,
 * the one the global set-up (test/support/global-setup.ts) found answering on 127.0.0.1:5432. So a
 * plain `npm test` on a machine with a PostgreSQL runs them too; without one they skip, and the
 * global set-up says so in one line.
 */
export const postgresUrl: string | undefined = process.env.DATABASE_URL ?? process.env.PB_TEST_POSTGRES_URL;

/**
 * A block of tests only a PostgreSQL server can run (a second connection holding a lock, a LISTEN
 * connection to cut, a database made read-only): runs whenever `postgresUrl` is set. In a PGlite run
 * the block's own databases and servers (made in its own hooks, after this one's) are made on that
 * server: DATABASE_URL is set for the block and unset after it. `why` says what PGlite lacks, for
 * the skipped block's name.
 */
export function describeOnPostgres(name: string, why: string, body: () => void): void {
  const label = postgresUrl ? `${name} (PostgreSQL)` : `${name} (skipped: needs a PostgreSQL server; ${why})`;
  describe.skipIf(postgresUrl === undefined)(label, () => {
    if (!process.env.DATABASE_URL) {
      beforeAll(() => {
        process.env.DATABASE_URL = postgresUrl;
      });
      afterAll(() => {
        delete process.env.DATABASE_URL;
      });
    }
    body();
  });
}

/**
 * One set-up that loops over both backends, as a test about both must (kysely runs its tests over
 * each real dialect in one run): `body` is declared once per backend that this machine has, with a
 * fresh database of that backend from `createTestDatabase()` inside it.
 */
export function describeEachBackend(name: string, body: (kind: "postgres" | "pglite") => void): void {
  const kinds = postgresUrl ? (["pglite", "postgres"] as const) : (["pglite"] as const);
  for (const kind of kinds) {
    describe(`${name} (${kind === "postgres" ? "PostgreSQL" : "PGlite"})`, () => {
      const saved = process.env.DATABASE_URL;
      beforeAll(() => {
        if (kind === "postgres") process.env.DATABASE_URL = postgresUrl;
        else delete process.env.DATABASE_URL;
      });
      afterAll(() => {
        if (saved === undefined) delete process.env.DATABASE_URL;
        else process.env.DATABASE_URL = saved;
      });
      body(kind);
    });
  }
}

export interface TestDatabase {
  /** A connection string for a fresh database, or undefined for PGlite. */
  url: string | undefined;
  dataDir: string;
  /** What every server on this database shares (instances on one database must): the admin token and SECRETS_KEY. */
  adminToken: string;
  secretsKey: string;
  drop(): Promise<void>;
}

/** A fresh, empty database for one test file (a new PostgreSQL database, or a new PGlite directory). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-test-"));
  const shared = {
    adminToken: "pba_test_" + crypto.randomBytes(24).toString("base64url"),
    secretsKey: crypto.randomBytes(32).toString("base64"),
  };
  const base = process.env.DATABASE_URL;
  if (!base) {
    return { url: undefined, dataDir, ...shared, drop: () => fs.rm(dataDir, { recursive: true, force: true }) };
  }
  const database = await createScratchDatabase(base, "pb_test");
  return {
    url: database.url,
    dataDir,
    ...shared,
    async drop() {
      await database.drop();
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

export type Protocol = "connect" | "grpc" | "grpc-web";

/**
 * How a REST request travels: HTTP/1.1 (fetch, or node:https on a TLS
 * server), cleartext HTTP/2 with prior knowledge (node:http2), or HTTP/2
 * over TLS chosen by ALPN, as browsers and load balancers speak to a server
 * with TLS_KEY_FILE/TLS_CERT_FILE set. "h2-tls" needs a TLS server (see
 * `StartOptions.tls`), "h2c" a cleartext one; HTTP/1.1 works on both.
 */
export type HttpVersion = "http/1.1" | "h2c" | "h2-tls";
/** All three, for tests that run every REST call over each. */
export const HTTP_VERSIONS: readonly HttpVersion[] = ["http/1.1", "h2c", "h2-tls"];

/** A self-signed certificate for 127.0.0.1: the files a TLS server is started with, and the CA its clients trust. */
export interface TestCertificate {
  keyFile: string;
  certFile: string;
  ca: Buffer;
}

const certificateKey = Symbol.for("platform-batteries.test-certificate");

/**
 * The test process's certificate, made once with openssl (the tool an
 * operator would use) into a temporary directory that is removed when the
 * process exits. Kept on `globalThis` because test files re-evaluate this
 * module, and one key pair per process is enough.
 */
export function testCertificate(): Promise<TestCertificate> {
  const store = globalThis as { [certificateKey]?: Promise<TestCertificate> };
  store[certificateKey] ??= (async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-tls-"));
    process.once("exit", () => fsSync.rmSync(dir, { recursive: true, force: true }));
    const keyFile = path.join(dir, "key.pem");
    const certFile = path.join(dir, "cert.pem");
    await promisify(execFile)("openssl", [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      keyFile,
      "-out",
      certFile,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ]);
    return { keyFile, certFile, ca: await fs.readFile(certFile) };
  })();
  return store[certificateKey];
}

export interface RequestOptions {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Default `http/1.1` (see `setDefaultHttpVersion`). */
  http?: HttpVersion;
  /** Aborting it cancels the request (the client goes away). */
  signal?: AbortSignal;
}

let defaultHttp: HttpVersion = "http/1.1";

/**
 * The HTTP version of `request` calls that do not name one, for the rest of
 * this test file: a suite written once can be run again over h2c by a file
 * that sets this and imports it. With "h2-tls", servers started afterwards
 * serve TLS unless told otherwise (`StartOptions.tls`).
 */
export function setDefaultHttpVersion(http: HttpVersion): void {
  defaultHttp = http;
}

export type RequestFn = (method: string, pathname: string, options?: RequestOptions) => Promise<JsonResponse>;

export interface TestServer {
  readonly url: string;
  /** Whether the server serves TLS (its url is https). */
  readonly tls: boolean;
  readonly adminToken: string;
  readonly server: PlatformServer;
  readonly database: TestDatabase;
  /** AdminService over Connect, authenticated with the admin token. */
  readonly admin: Client<typeof AdminService>;
  /** A generated client of `service` over `protocol`, sending `token` as bearer. */
  client<S extends DescService>(service: S, token?: string, protocol?: Protocol): Client<S>;
  /** Creates an app and issues it a token. */
  createApp(name?: string): Promise<TestApp>;
  /** `fetch` relative to the server, with JSON in and the bearer token given. */
  request: RequestFn;
  /** `request` fixed to one HTTP version (HTTP/2 requests share one HTTP/2 session per server). */
  rest(http: HttpVersion): RequestFn;
  close(): Promise<void>;
}

export interface TestApp {
  id: string;
  name: string;
  token: string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export interface JsonResponse {
  /** How the response came: "http/1.1", "h2c", or the protocol ALPN chose on a TLS connection. */
  protocol: string;
  status: number;
  headers: Headers;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** A Connect, gRPC or gRPC-web transport to `url`; for an https url, trusting `ca` (the test certificate by default). */
export function transportFor(
  url: string,
  protocol: Protocol,
  token?: string,
  ca: Buffer | undefined = url.startsWith("https:") ? trustedCa : undefined,
): Transport {
  const interceptors = token
    ? [
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (next: any) => async (req: any) => {
          req.header.set("authorization", `Bearer ${token}`);
          return next(req);
        },
      ]
    : [];
  const nodeOptions = ca ? { ca } : {};
  switch (protocol) {
    case "connect":
      return createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors, nodeOptions });
    case "grpc":
      return createGrpcTransport({ baseUrl: url, interceptors, nodeOptions });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", interceptors, nodeOptions });
  }
}

let appCounter = 0;
/** The CA of the test certificate once one was made: what `transportFor` trusts for https urls. */
let trustedCa: Buffer | undefined;

export interface StartOptions {
  /** Extra environment for `loadConfig` (e.g. MAIL_PROVIDER). */
  env?: Record<string, string>;
  database?: TestDatabase;
  /** Where the server's log lines go (default: nowhere, unless TEST_LOG_LEVEL is set). */
  logLines?: string[];
  /**
   * An already open database the server uses (and does not close), e.g. one
   * PGlite shared by two servers in this process (see `startInstances`).
   */
  openDatabase?: Database;
  /**
   * Serve TLS with the test certificate (`testCertificate`), as with
   * TLS_KEY_FILE/TLS_CERT_FILE in production. Default: whether the file's
   * default HTTP version is "h2-tls".
   */
  tls?: boolean;
  /** Test-only services served beside the facilities (`ServerOptions.testServices`). */
  testServices?: ServerOptions["testServices"];
}

export async function startServer(options: StartOptions = {}): Promise<TestServer> {
  const database = options.database ?? (await createTestDatabase());
  const certificate = (options.tls ?? defaultHttp === "h2-tls") ? await testCertificate() : undefined;
  if (certificate) trustedCa = certificate.ca;
  // Resolved as `npm start` resolves it; both values are given, so nothing is read from DATA_DIR.
  const { config } = await resolveDataDirSecrets(
    loadConfig({
      PORT: "0",
      HOST: "127.0.0.1",
      DATA_DIR: database.dataDir,
      ...(database.url ? { DATABASE_URL: database.url } : {}),
      ADMIN_TOKEN: database.adminToken,
      SECRETS_KEY: database.secretsKey,
      LOG_LEVEL: options.logLines ? "info" : (process.env.TEST_LOG_LEVEL ?? "silent"),
      // Fair shares refuse by the machine's load, which on a test machine is the other test files': a test
      // that counts exact outcomes of one app's concurrent calls would meet refusals it did not cause. The
      // fair-share tests turn it on with their own threshold.
      FAIR_SHARE_UTILIZATION: "0",
      ...(certificate ? { TLS_KEY_FILE: certificate.keyFile, TLS_CERT_FILE: certificate.certFile } : {}),
      ...options.env,
    }),
  );
  const { adminToken } = config;
  const server = await createPlatformServer({
    config,
    logger: createLogger(
      config.logLevel,
      options.logLines ? { write: (line: string) => void options.logLines!.push(line) } : undefined,
    ),
    ...(options.openDatabase ? { database: options.openDatabase } : {}),
    testServices: options.testServices,
  });
  const listened = await server.listen();
  const url = listened;
  const clients: Client<DescService>[] = [];
  const tls = url.startsWith("https:");
  const ca = certificate?.ca;
  // fetch cannot be given a CA to trust, node:https can; offering
  // "http/1.1" by ALPN is what an HTTP/1.1-only client on TLS does.
  const httpsAgent = tls ? new https.Agent({ keepAlive: true, ca, ALPNProtocols: ["http/1.1"] }) : undefined;
  const http1Request = async (method: string, pathname: string, opts: RequestOptions): Promise<JsonResponse> => {
    const { headers, body } = requestParts(opts);
    if (!tls) {
      const res = await fetch(url + pathname, { method, headers, body, signal: opts.signal });
      return { protocol: "http/1.1", status: res.status, headers: res.headers, body: parseBody(await res.text()) };
    }
    const [res, text] = await new Promise<[import("node:http").IncomingMessage, string]>((resolve, reject) => {
      const req = https.request(url + pathname, { method, headers, agent: httpsAgent, signal: opts.signal }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve([res, Buffer.concat(chunks).toString("utf8")]));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(body);
    });
    const alpn = (res.socket as import("node:tls").TLSSocket).alpnProtocol;
    return {
      protocol: typeof alpn === "string" ? alpn : "none",
      status: res.statusCode!,
      headers: toHeaders(res.headers),
      body: parseBody(text),
    };
  };
  let h2session: http2.ClientHttp2Session | undefined;
  const h2Request = async (
    http: "h2c" | "h2-tls",
    method: string,
    pathname: string,
    opts: RequestOptions,
  ): Promise<JsonResponse> => {
    if (tls !== (http === "h2-tls"))
      throw new Error(`${http} needs a ${http === "h2c" ? "cleartext" : "TLS"} server; this one is ${url}`);
    if (!h2session || h2session.closed || h2session.destroyed) {
      // On TLS, node:http2 offers only "h2" by ALPN: the session exists only if the server chose it.
      h2session = http2.connect(url, tls ? { ca } : {});
      h2session.on("error", () => {});
    }
    const session = h2session;
    const { headers, body } = requestParts(opts);
    const stream = session.request(
      { ":method": method, ":path": pathname, ...headers },
      opts.signal ? { signal: opts.signal } : {},
    );
    stream.end(body);
    const [responseHeaders, text] = await new Promise<[http2.IncomingHttpHeaders, string]>((resolve, reject) => {
      let got: http2.IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      stream.on("response", (h) => (got = h));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => resolve([got, Buffer.concat(chunks).toString("utf8")]));
      stream.on("error", reject);
    });
    return {
      protocol: tls ? String(session.alpnProtocol) : "h2c",
      status: Number(responseHeaders[":status"]),
      headers: toHeaders(responseHeaders),
      body: parseBody(text),
    };
  };
  const self: TestServer = {
    url,
    tls,
    adminToken,
    server,
    database,
    admin: createClient(AdminService, transportFor(url, "connect", adminToken)),
    client(service, token, protocol = "connect") {
      const c = createClient(service, transportFor(url, protocol, token));
      clients.push(c);
      return c;
    },
    async createApp(name) {
      const appName = name ?? `app-${process.pid}-${++appCounter}`;
      const { app } = await self.admin.createApp({ name: appName });
      const { token } = await self.admin.issueToken({ appId: app!.id });
      return {
        id: app!.id,
        name: appName,
        token,
        stop: async () => void (await self.admin.updateApp({ appId: app!.id, status: AppStatus.STOPPED })),
        start: async () => void (await self.admin.updateApp({ appId: app!.id, status: AppStatus.RUNNING })),
      };
    },
    request: (method, pathname, opts = {}) => {
      const http = opts.http ?? defaultHttp;
      return http === "http/1.1" ? http1Request(method, pathname, opts) : h2Request(http, method, pathname, opts);
    },
    rest:
      (http) =>
      (method, pathname, opts = {}) =>
        self.request(method, pathname, { ...opts, http }),
    async close() {
      h2session?.close();
      httpsAgent?.destroy();
      await server.close();
      if (!options.database) await database.drop();
    },
  };
  return self;
}

export interface Instances {
  readonly servers: TestServer[];
  close(): Promise<void>;
}

/**
 * `n` servers on one database, as several instances of the service are in
 * production. On PostgreSQL each has its own pools and LISTEN connection on
 * the same database. On PGlite (one process, one connection) they share one
 * open database: notifications still go from one server's statements to the
 * other's listeners, through PGlite's LISTEN/NOTIFY.
 */
export async function startInstances(n: number, options: StartOptions = {}): Promise<Instances> {
  const database = options.database ?? (await createTestDatabase());
  const shared = database.url ? undefined : await openDatabase({ dataDir: database.dataDir });
  const servers: TestServer[] = [];
  for (let i = 0; i < n; i++) servers.push(await startServer({ ...options, database, openDatabase: shared }));
  return {
    servers,
    async close() {
      for (const server of servers.reverse()) await server.close();
      await shared?.close();
      if (!options.database) await database.drop();
    },
  };
}

/**
 * The test file's server: started before its first test (`beforeAll`) and
 * closed after its last (`afterAll`). The returned object stands for the
 * server; using it before `beforeAll` ran throws. `setup` runs once the
 * server is up (e.g. to declare secrets).
 */
export function useTestServer(
  options: StartOptions | (() => StartOptions) = {},
  setup?: (t: TestServer) => Promise<void>,
): TestServer {
  let server: TestServer | undefined;
  beforeAll(async () => {
    server = await startServer(typeof options === "function" ? options() : options);
    await setup?.(server);
  });
  afterAll(() => server?.close());
  return lateBound<TestServer>(() => server, "useTestServer");
}

/**
 * A fresh database of this run's backend, migrated and open, for the tests of the block (or file) that
 * calls it: opened before the first (`beforeAll`), closed and dropped after the last. The returned object
 * stands for the database; using it before `beforeAll` ran throws.
 */
export function useMigratedDatabase(): Database {
  let tdb: TestDatabase | undefined;
  let database: Database | undefined;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    database = await openDatabase({ databaseUrl: tdb.url, dataDir: tdb.dataDir });
    await migrate(database.db);
  }, 120_000);
  afterAll(async () => {
    await database?.close();
    await tdb?.drop();
  });
  return lateBound<Database>(() => database, "useMigratedDatabase");
}

/**
 * An app (with a token) on the file's server, created before the first test,
 * after the server's own setup. `setup` runs once it exists.
 */
export function useTestApp(t: TestServer, setup?: (app: TestApp) => Promise<void>): TestApp {
  let app: TestApp | undefined;
  beforeAll(async () => {
    app = await t.createApp();
    await setup?.(app);
  });
  return lateBound<TestApp>(() => app, "useTestApp");
}

/** An object that forwards to `get()`'s value, which exists only once the hooks ran. */
export function lateBound<T extends object>(get: () => T | undefined, what: string): T {
  return new Proxy({} as T, {
    get(_target, key) {
      const value = get();
      if (value === undefined) throw new Error(`${what}: used before its beforeAll ran`);
      const member = (value as Record<PropertyKey, unknown>)[key];
      return typeof member === "function" ? (member as (...args: unknown[]) => unknown).bind(value) : member;
    },
  });
}

function requestParts(opts: RequestOptions): { headers: Record<string, string>; body: string | undefined } {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | undefined;
  if (opts.body !== undefined) {
    body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    headers["content-type"] ??= "application/json";
  }
  return { headers, body };
}

/** Response headers as `Headers`, without HTTP/2 pseudo-headers. */
function toHeaders(raw: NodeJS.Dict<string | string[]>): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (name.startsWith(":") || value === undefined) continue;
    out.set(name, Array.isArray(value) ? value.join(", ") : String(value));
  }
  return out;
}

function parseBody(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return text; // not JSON: keep the text
  }
}

/** REST calls as an app on `t`: `rest(app, method, path, body?)`, the answer whatever its status. */
export function restAs(t: TestServer) {
  return (app: TestApp, method: string, pathname: string, body?: unknown) =>
    t.request(method, pathname, { token: app.token, body });
}

/** The ConnectError a call fails with (a call that succeeds fails the test). */
export async function connectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}
