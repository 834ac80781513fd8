/**
 * A TCP proxy a test puts between the service and its PostgreSQL, to make the
 * database hang without stopping it: `hold()` stops forwarding bytes either
 * way (connections stay open, new ones are accepted, nothing answers), as a
 * stopped server or a network that drops packets would; `holdAnswers()` stops
 * only the server's side (statements arrive and run, their answers are lost on
 * the way, so the client cannot know whether they committed); `release()`
 * forwards what was held and carries on.
 */
import net from "node:net";
import { afterAll, beforeAll } from "vitest";
import { createTestDatabase, lateBound, startServer, type TestDatabase, type TestServer } from "./harness.ts";

export interface TcpProxy {
  /** `url` with its host and port replaced by the proxy's. */
  readonly url: string;
  hold(): void;
  holdAnswers(): void;
  release(): void;
  close(): Promise<void>;
}

/** A proxy to `targetUrl`'s host and port, listening on `port` of 127.0.0.1 (default: any free one). */
export async function startTcpProxy(targetUrl: string, port = 0): Promise<TcpProxy> {
  const target = new URL(targetUrl);
  let held: "none" | "both" | "answers" = "none";
  const pending: (() => void)[] = [];
  const sockets = new Set<net.Socket>();
  const forward = (from: net.Socket, to: net.Socket, answers: boolean) => {
    from.on("data", (chunk: Buffer) => {
      if (held === "both" || (held === "answers" && answers)) pending.push(() => to.write(chunk));
      else to.write(chunk);
    });
    from.on("close", () => to.destroy());
    from.on("error", () => to.destroy());
  };
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    client.on("close", () => sockets.delete(client));
    upstream.on("close", () => sockets.delete(upstream));
    forward(client, upstream, false);
    forward(upstream, client, true);
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const url = new URL(targetUrl);
  url.hostname = "127.0.0.1";
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    hold() {
      held = "both";
    },
    holdAnswers() {
      held = "answers";
    },
    release() {
      held = "none";
      for (const write of pending.splice(0)) write();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * The set-up of the tests (the describe block that calls it) whose server reaches a fresh database of its
 * own through a proxy, started with `env`: made before them; after them the proxy releases what it held
 * (so the server's stop is not held up), then the server stops, the proxy closes and the database is dropped.
 */
export function useServerBehindProxy(env: Record<string, string> = {}): { proxy: TcpProxy; t: TestServer } {
  let database: TestDatabase | undefined;
  let proxy: TcpProxy | undefined;
  let t: TestServer | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startTcpProxy(database.url!);
    t = await startServer({ database: { ...database, url: proxy.url }, env });
  });
  afterAll(async () => {
    proxy?.release();
    await t?.close();
    await proxy?.close();
    await database?.drop();
  });
  return {
    proxy: lateBound<TcpProxy>(() => proxy, "useServerBehindProxy"),
    t: lateBound<TestServer>(() => t, "useServerBehindProxy"),
  };
}
