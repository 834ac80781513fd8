/**
 * A call that waited (a long-poll consume, a stream, the event feed) and whose
 * deadline (`connect-timeout-ms`, `grpc-timeout`) passed meanwhile ends with
 * `deadline_exceeded`, as the protocols say, not with an empty success the
 * client cannot tell from "nothing came".
 */
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { PlatformError } from "./errors.ts";

/** Throws `deadline_exceeded` when the call's deadline passed; `what` names what did not come in time. */
export function throwIfPastDeadline(context: Pick<HandlerContext, "signal" | "timeoutMs">, what: string): void {
  const left = context.timeoutMs();
  if (left === undefined) return;
  // The deadline's timer can fire a millisecond before the clock says the deadline passed,
  // so the signal's reason decides too: an abort by the deadline is the deadline.
  const { signal } = context;
  const byDeadline =
    signal.aborted && signal.reason instanceof ConnectError && signal.reason.code === Code.DeadlineExceeded;
  if (left <= 0 || byDeadline)
    throw new PlatformError("deadline_exceeded", `the call's deadline passed before ${what} came`);
}
