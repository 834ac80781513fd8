/**
 * Postgres LISTEN/NOTIFY for the whole process: one listening connection,
 * shared by every channel. When it dies (database restarted, network cut) it
 * reconnects with backoff, LISTENs on every channel again and tells each
 * subscriber, which then re-checks what it may have missed, all without
 * restarting the service.
 */
import pg from "pg";

/** A notification listener: `unlisten` stops it. */
export type Unlisten = () => Promise<void>;

export interface Notifications {
  subscribe(channel: string, onNotify: (payload: string) => void, onReconnect?: () => void): Promise<Unlisten>;
  stop(): Promise<void>;
}

export function createPgNotifications(
  connectionString: string,
  onError?: (err: Error) => void,
  onConnect?: () => void,
): Notifications {
  return new PgNotifications(connectionString, onError, onConnect);
}

class PgNotifications implements Notifications {
  private client: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private listening = new Set<string>();
  private readonly subscribers = new Map<
    string,
    Set<{ onNotify: (payload: string) => void; onReconnect?: (() => void) | undefined }>
  >();
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly connectionString: string;
  private readonly onError: ((err: Error) => void) | undefined;
  private readonly onConnect: (() => void) | undefined;

  constructor(
    connectionString: string,
    onError: ((err: Error) => void) | undefined,
    onConnect: (() => void) | undefined,
  ) {
    this.connectionString = connectionString;
    this.onError = onError;
    this.onConnect = onConnect;
  }

  async subscribe(channel: string, onNotify: (payload: string) => void, onReconnect?: () => void): Promise<Unlisten> {
    const subscriber = { onNotify, onReconnect };
    let set = this.subscribers.get(channel);
    if (!set) this.subscribers.set(channel, (set = new Set()));
    set.add(subscriber);
    if (!this.client) await (this.connecting ??= this.connect(false).finally(() => (this.connecting = undefined)));
    if (this.client && !this.listening.has(channel)) {
      this.listening.add(channel);
      await this.client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    }
    return async () => {
      set.delete(subscriber);
      if (set.size === 0 && this.subscribers.get(channel) === set) {
        this.subscribers.delete(channel);
        if (this.listening.delete(channel))
          await this.client?.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => {});
      }
    };
  }

  private async connect(isReconnect: boolean): Promise<void> {
    const client = new pg.Client({ connectionString: this.connectionString });
    client.on("notification", (msg) => {
      for (const s of this.subscribers.get(msg.channel) ?? []) s.onNotify(msg.payload ?? "");
    });
    client.on("error", (err) => {
      this.onError?.(err);
      this.scheduleReconnect(client);
    });
    client.on("end", () => this.scheduleReconnect(client));
    const channels = [...this.subscribers.keys()];
    try {
      await client.connect();
      this.onConnect?.();
      // LISTEN fails on a standby ("cannot execute LISTEN during recovery"): during a failover the proxy in front
      // may send this connection to the standby before it is promoted. The connection is ended (not left open,
      // unused) and the next attempt, a moment later, reaches the new primary.
      for (const channel of channels) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (this.stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.listening = new Set(channels);
    if (isReconnect) for (const set of this.subscribers.values()) for (const s of set) s.onReconnect?.();
  }

  private scheduleReconnect(dead: pg.Client, delayMs = 100): void {
    if (this.stopped || this.client !== dead || this.retryTimer) return;
    this.client = undefined;
    this.listening = new Set();
    dead.end().catch(() => {});
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connect(true).catch((err: Error) => {
        this.onError?.(err);
        this.client = dead; // so the next schedule is not ignored
        // At most a second apart: a failover is over in seconds, and consumers waiting on this instance
        // hear of other instances' puts only through this connection (one connection, so no load to spare).
        this.scheduleReconnect(dead, Math.min(delayMs * 2, 1000));
      });
    }, delayMs);
    this.retryTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }
}
