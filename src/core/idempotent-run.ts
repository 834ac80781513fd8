/**
 * The run of an `Idempotency-Key` request, as the RPC doing the work sees it
 * (the keys themselves are handled in `http/idempotency.ts`). This lives
 * outside the HTTP layer so that protocol-neutral services can reach it
 * through their `HandlerContext`.
 */
import type { DescMessage, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Db, InTransactionWith } from "./database/index.ts";

/**
 * The run of a keyed request, for an RPC whose work is one transaction of the
 * platform database: `answerIn` stores the answer on that transaction, so a
 * process dying after the commit leaves the answer for the repeat instead of
 * a held key whose lapse would run the work a second time.
 */
interface IdempotentRun<O extends DescMessage> {
  /**
   * Stores `output` as the answer on `trx`, the transaction doing the work;
   * the RPC must then return the same output. Throws `idempotency_key_in_use`
   * (rolling the work back) when the run lost its key to a repeat that took
   * it over after the lock lapsed.
   */
  answerIn(trx: Db, output: MessageInitShape<O>): Promise<void>;
}

export interface RunInContext {
  method: DescMethodUnary;
  answerIn(trx: Db, output: object): Promise<void>;
}

const runKey = createContextKey<RunInContext | undefined>(undefined, { description: "idempotent run" });

/** The keyed run of `method` this request is, if any (see `IdempotentRun`). */
function idempotentRun<I extends DescMessage, O extends DescMessage>(
  context: HandlerContext,
  method: DescMethodUnary<I, O>,
): IdempotentRun<O> | undefined {
  const run = context.values.get(runKey);
  return run?.method === method ? run : undefined;
}

/**
 * Where the RPC doing the work stores its answer, if this request is a keyed
 * run of `method`: called on the work's transaction with what the work made,
 * which `map` turns into the answer. Undefined without a keyed run, so the
 * caller keeps its path without a transaction of its own.
 */
export function answerInRun<I extends DescMessage, O extends DescMessage, Made>(
  context: HandlerContext,
  method: DescMethodUnary<I, O>,
  map: (made: Made) => MessageInitShape<O>,
): InTransactionWith<Made> | undefined {
  const run = idempotentRun(context, method);
  return run && ((trx, made) => run.answerIn(trx, map(made)));
}

/** Makes `run` the keyed run of this request (by `http/idempotency.ts`, before it calls the RPC). */
export function setIdempotentRun(context: HandlerContext, run: RunInContext): void {
  context.values.set(runKey, run);
}
