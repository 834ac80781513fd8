/**
 * `@platform-batteries/client`: a typed client of the Platform Batteries
 * `/v1` API. Start with `createClient()`; see the package README.
 */
export { createClient, TOKEN_ENV, URL_ENV } from "./client.ts";
export type { ClientOptions, EventHandler, EventsOptions, PlatformClient, WatchOptions } from "./client.ts";
export { ERROR_CODES, PlatformError, parseRetryAfter } from "./platform-error.ts";
export type { ErrorCode, PlatformErrorInit } from "./platform-error.ts";
export type { CallOptions, RetryInfo, RetryOptions } from "./transport.ts";
export type { HandlerContext, LeaseLost, MessageHandler, WorkOptions, Worker, WorkerPause } from "./worker.ts";
export type { DropInfo, DropReason, FlushResult, SentInfo, TrackerOptions, UndeclaredInfo } from "./tracker.ts";
export type { SecretCacheOptions } from "./secret-cache.ts";
export * from "./types.ts";
