/**
 * The logger of one request (`req.log`), made only when something is logged
 * at an enabled level.
 *
 * Why: fastify gives every request a pino child bound to its request id. Made
 * eagerly, with the service's redaction in place, that child costs a few
 * microseconds and a few objects per request, for a logger that at the usual
 * levels writes nothing: the request line is `info`, and a request that goes
 * well logs nothing else. This logger answers a call at a disabled level at
 * once and makes the real child, with the same bindings, the first time a
 * line is written, so what is logged is unchanged.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Bindings, ChildLoggerOptions, LevelWithSilentOrString, Logger } from "pino";

type Level = "fatal" | "error" | "warn" | "info" | "debug" | "trace";

type LogMethod = (...args: unknown[]) => void;

/** Methods on the prototype, not per-instance closures: one small object per request. */
class RequestLogger {
  // One method per level, each writing through #write (set on the prototype below, where #write is in reach).
  declare fatal: LogMethod;
  declare error: LogMethod;
  declare warn: LogMethod;
  declare info: LogMethod;
  declare debug: LogMethod;
  declare trace: LogMethod;

  static {
    for (const level of ["fatal", "error", "warn", "info", "debug", "trace"] as const)
      this.prototype[level] = function (this: RequestLogger, ...args: unknown[]) {
        this.#write(level, args);
      };
  }

  #real: FastifyBaseLogger | undefined;
  readonly #parent: Logger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions | undefined;

  constructor(parent: Logger, bindings: Bindings, options: ChildLoggerOptions | undefined) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  #logger(): FastifyBaseLogger {
    return (this.#real ??= this.#parent.child(this.#bindings, this.#options));
  }

  #write(level: Level, args: unknown[]): void {
    if (this.#real === undefined && !this.#parent.isLevelEnabled(level)) return;
    const real = this.#logger();
    Reflect.apply(real[level], real, args);
  }

  get level(): LevelWithSilentOrString {
    return this.#real ? this.#real.level : this.#parent.level;
  }
  set level(level: LevelWithSilentOrString) {
    this.#logger().level = level;
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#logger().child(bindings, options);
  }
}

/**
 * fastify's `childLoggerFactory`: the request's logger, made lazily (see above).
 * Options that change nothing (fastify passes `{}`) are dropped, so that the
 * real child, when made, takes pino's short path.
 */
export function createRequestLogger(
  parent: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  const given = Object.keys(options).length > 0 ? options : undefined;
  return new RequestLogger(parent as Logger, bindings, given);
}
