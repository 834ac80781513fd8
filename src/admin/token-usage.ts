/**
 * Coarse "last used" tracking of service and operator tokens at no write per request.
 * The authenticator reports a token only when it looks it up in the
 * database (found tokens are remembered for a while), and this recorder
 * writes at most once per `intervalMs` per token and instance; the UPDATE
 * itself also skips rows written within the interval by another instance.
 * The write is not awaited by the request and a failure only loses a mark.
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";

export type TokenUsageRecorder = (tokenId: string) => void;

/** Where a token's use is marked: the app store or the operator store. */
export interface TokenUseMarker {
  markTokenUsed(tokenId: string, intervalSeconds: number): Promise<void>;
}

export function createTokenUsageRecorder(
  apps: TokenUseMarker,
  logger: Logger,
  intervalMs = 60_000,
  clock: () => number = Date.now,
): TokenUsageRecorder {
  const written = new Map<string, number>();
  return (tokenId) => {
    const now = clock();
    const last = written.get(tokenId);
    if (last !== undefined && now - last < intervalMs) return;
    if (written.size >= 100_000) written.clear();
    written.set(tokenId, now);
    apps.markTokenUsed(tokenId, intervalMs / 1000).catch((err: unknown) => {
      logger.warn({ err: err instanceof Error ? err.message : String(err) }, "could not record a token's last use");
    });
  };
}

/** A token as the admin API lists it (an app's or an operator's): never the token, only its id and use. */
export function tokenMessage(t: { id: string; label: string; createdAt: Date; lastUsedAt: Date | null }) {
  return {
    id: t.id,
    label: t.label,
    createdAt: timestampFromDate(t.createdAt),
    lastUsedAt: t.lastUsedAt ? timestampFromDate(t.lastUsedAt) : undefined,
  };
}
