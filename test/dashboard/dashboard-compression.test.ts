/**
 * The dashboard's files are compressed once, at build time
 * (scripts/build-dashboard.ts writes `.br` and `.gz` beside each text file),
 * and served compressed as the client accepts (src/dashboard/dashboard-routes.ts):
 * brotli for `br`, gzip for `gzip`, the file itself otherwise. Over a real
 * socket, reading the bytes as sent.
 */
import fs from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { precompress } from "../../scripts/build-dashboard.ts";
import { registerDashboard } from "../../src/dashboard/dashboard-routes.ts";

let root: string;
let fastify: FastifyInstance;
let port: number;
const script = "export const rows = [" + Array.from({ length: 2000 }, (_, i) => `{ id: ${i} }`).join(", ") + "];\n";
const page = `<!doctype html><html><head><script type="module" src="/dashboard/assets/app-1a2b.js"></script></head><body>${"<p>dashboard</p>".repeat(200)}</body></html>\n`;

beforeAll(async () => {
  root = await fs.mkdtemp(path.join(os.tmpdir(), "pb-dashboard-"));
  await fs.mkdir(path.join(root, "assets"));
  await fs.writeFile(path.join(root, "index.html"), page);
  await fs.writeFile(path.join(root, "assets/app-1a2b.js"), script);
  expect(await precompress(root)).toBe(2);
  fastify = Fastify();
  await registerDashboard(fastify, root);
  await fastify.listen({ port: 0, host: "127.0.0.1" });
  port = (fastify.server.address() as { port: number }).port;
});
afterAll(async () => {
  await fastify?.close();
  await fs.rm(root, { recursive: true, force: true });
});

function get(urlPath: string, acceptEncoding?: string): Promise<{ headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: "127.0.0.1", port, path: urlPath, headers: acceptEncoding ? { "accept-encoding": acceptEncoding } : {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
      },
    );
    req.on("error", reject);
  });
}

describe("the dashboard's files, precompressed", () => {
  it.each([
    ["/dashboard/assets/app-1a2b.js", script],
    ["/dashboard/", page],
  ])("%s: brotli for br, gzip for gzip, the file itself otherwise", async (urlPath, original) => {
    const br = await get(urlPath, "gzip, deflate, br");
    expect(br.headers["content-encoding"]).toBe("br");
    expect(br.body.length).toBeLessThan(original.length / 4);
    expect(zlib.brotliDecompressSync(br.body).toString()).toBe(original);

    const gzip = await get(urlPath, "gzip");
    expect(gzip.headers["content-encoding"]).toBe("gzip");
    expect(zlib.gunzipSync(gzip.body).toString()).toBe(original);

    const plain = await get(urlPath);
    expect(plain.headers["content-encoding"]).toBeUndefined();
    expect(plain.body.toString()).toBe(original);
    // Caches keep the encodings apart, and the page's security headers come with every one.
    for (const res of [br, gzip, plain]) {
      expect(res.headers.vary).toMatch(/accept-encoding/i);
      expect(res.headers["content-security-policy"]).toContain("default-src 'none'");
    }
  });
});
