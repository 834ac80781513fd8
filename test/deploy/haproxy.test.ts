/**
 * The load-balancer example (`deploy/haproxy/haproxy.cfg`) with two instances
 * on one database behind Debian's HAProxy: HTTP/1.1 (REST, Connect) and h2c
 * (gRPC) on one port, HTTP/2 to the instances, readiness checks that keep
 * both in rotation (a plain `option httpchk` would mark every h2 backend down).
 * Skipped, saying why, only where haproxy is not installed (`.ci/run`
 * installs it).
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { startInstances, transportFor, type Instances, type TestServer } from "../support/harness.ts";

const HAPROXY = ["/usr/sbin/haproxy", "/usr/bin/haproxy"].find((p) => fs.existsSync(p));
const CONFIG = path.resolve(import.meta.dirname, "../../deploy/haproxy/haproxy.cfg");

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

async function requestsServed(server: TestServer): Promise<number> {
  const m = server.server.deps.metrics.registry.getSingleMetric("http_requests_total");
  return m ? (await m.get()).values.reduce((sum, v) => sum + v.value, 0) : 0;
}

describe.skipIf(!HAPROXY)(
  `HAProxy in front of two instances${HAPROXY ? "" : " (skipped: haproxy is not installed)"}`,
  () => {
    let instances: Instances;
    let haproxy: ChildProcess;
    let url = "";

    beforeAll(async () => {
      instances = await startInstances(2);
      const port = await freePort();
      url = `http://127.0.0.1:${port}`;
      const env = {
        ...process.env,
        PB_LISTEN: `127.0.0.1:${port}`,
        PB_SERVER_1: new URL(instances.servers[0].url).host,
        PB_SERVER_2: new URL(instances.servers[1].url).host,
      };
      haproxy = spawn(HAPROXY!, ["-db", "-f", CONFIG], { env, stdio: ["ignore", "ignore", "pipe"] });
      let stderr = "";
      haproxy.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
      // Both instances in rotation: each has answered a request through the balancer (its checks passed first).
      const started = Date.now();
      for (;;) {
        if (haproxy.exitCode !== null) throw new Error(`haproxy exited: ${stderr}`);
        try {
          const res = await fetch(`${url}/ready`);
          if (
            res.ok &&
            (await requestsServed(instances.servers[0])) > 0 &&
            (await requestsServed(instances.servers[1])) > 0
          )
            break;
        } catch {
          // not listening yet
        }
        if (Date.now() - started > 20_000) throw new Error(`instances never both in rotation: ${stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    });
    afterAll(async () => {
      haproxy?.kill("SIGTERM");
      await instances?.close();
    });

    it("serves REST over HTTP/1.1 and gRPC over h2c through one port, from both instances", async () => {
      const app = await instances.servers[0].createApp();
      const before = await Promise.all(instances.servers.map(requestsServed));
      for (let i = 0; i < 10; i++) {
        const put = await fetch(`${url}/v1/queues/lb`, {
          method: "POST",
          headers: { authorization: `Bearer ${app.token}`, "content-type": "application/json" },
          body: JSON.stringify({ payload: { i } }),
        });
        expect(put.status).toBe(200);
      }
      const after = await Promise.all(instances.servers.map(requestsServed));
      expect(after[0]).toBeGreaterThan(before[0]);
      expect(after[1]).toBeGreaterThan(before[1]);

      const meta = createClient(MetaService, transportFor(url, "grpc"));
      expect((await meta.getVersion({})).name).toBe("platform-batteries");
      const queues = createClient(QueueService, transportFor(url, "grpc", app.token));
      const { queues: list } = await queues.listQueues({});
      expect(Number(list.find((q) => q.name === "lb")?.depth)).toBe(10);
      const connect = createClient(QueueService, transportFor(url, "connect", app.token));
      expect((await connect.consumeMessage({ queue: "lb", waitSeconds: 0 })).message?.deliveries).toBe(1);
    });
  },
);
