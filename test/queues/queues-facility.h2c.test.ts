/**
 * The queue facility's REST suite once more, every REST call over cleartext
 * HTTP/2 (h2c, prior knowledge) instead of HTTP/1.1: the same state table,
 * long-polls, caps and errors, through the HTTP/2 side of the one port.
 */
import { setDefaultHttpVersion } from "../support/harness.ts";

setDefaultHttpVersion("h2c");
await import("./queues-facility.test.ts");
