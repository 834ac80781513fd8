/**
 * The queue facility's REST suite once more, on a server with TLS (a
 * self-signed certificate through TLS_KEY_FILE/TLS_CERT_FILE), every REST call
 * over HTTP/2 chosen by ALPN, as browsers and load balancers speak to it: the
 * same state table, long-polls, caps and errors, through the TLS side of the
 * one port. Connect and gRPC calls of the suite go over TLS too.
 */
import { setDefaultHttpVersion } from "../support/harness.ts";

setDefaultHttpVersion("h2-tls");
await import("./queues-facility.test.ts");
