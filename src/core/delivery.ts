/**
 * Whether a call's answer reached its client, as the RPC doing the work sees
 * it. A consume leases messages and then answers with their receipts; when
 * that answer cannot be written (the client went away after the claim, while
 * the answer was still being written), nobody holds those receipts and the
 * messages would stay leased to nobody for the whole lease. The RPC registers
 * what undoes its work (`onUndelivered`); the protocol layer runs it when the
 * response closes without having been written in full (see
 * `http/delivery-watch.ts`). This lives outside the HTTP layer so that
 * protocol-neutral services can reach it through their `HandlerContext`.
 *
 * What it cannot see: an answer written in full to the operating system and
 * then dropped by a client that went away before reading it. A client must not
 * abandon a call that may have done such work (the client's worker lets its
 * consumes finish at stop and gives back what they bring).
 */
import { createContextKey, type HandlerContext } from "@connectrpc/connect";

export interface DeliveryWatch {
  /** Runs `undo` (once) if the call's answer is not written in full; at once if it already cannot be. */
  onUndelivered(undo: () => void): void;
}

export const deliveryKey = createContextKey<DeliveryWatch | undefined>(undefined, { description: "delivery watch" });

/** Registers `undo` to run if this call's answer is not delivered; a call without a watch (in-process) ignores it. */
export function onUndelivered(context: HandlerContext, undo: () => void): void {
  context.values.get(deliveryKey)?.onUndelivered(undo);
}
