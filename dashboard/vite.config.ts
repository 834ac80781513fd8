/**
 * The dashboard's build: served by the service under `/dashboard/`, so every
 * asset URL starts there; hashed file names let the server cache them forever.
 * After the build, the JS bundle's gzip size is printed (the number the
 * dashboard's speed budget is watched by).
 */
import { gzipSync } from "node:zlib";
import { defineConfig, type Plugin } from "vite";
import react from "@vitejs/plugin-react";

function reportGzipSize(): Plugin {
  return {
    name: "report-gzip-size",
    apply: "build",
    generateBundle(_options, bundle) {
      let raw = 0;
      let gzip = 0;
      let entryGzip = 0;
      for (const file of Object.values(bundle)) {
        if (file.type !== "chunk") continue;
        const size = gzipSync(file.code).length;
        raw += file.code.length;
        gzip += size;
        if (file.isEntry) entryGzip += size;
      }
      const kb = (n: number) => (n / 1024).toFixed(1);
      console.log(
        `dashboard JS bundle: ${kb(gzip)} kB gzip in all (${kb(raw)} kB raw); ${kb(entryGzip)} kB gzip before sign-in`,
      );
    },
  };
}

export default defineConfig({
  root: import.meta.dirname,
  base: "/dashboard/",
  plugins: [react(), reportGzipSize()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // No inline scripts or data: URLs anywhere: the CSP allows 'self' only.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
});
