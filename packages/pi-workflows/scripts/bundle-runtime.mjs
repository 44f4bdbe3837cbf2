// Build step after tsc: bundle dist/runtime.js (the SDK and the runner) into one ES module,
// dist/runtime.bundle.js, which the runner entry loads and every workflow's SDK import maps
// to (src/runtime.ts says why). esbuild stays external: the loader starts it only on a miss.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
await build({
  entryPoints: [`${dist}runtime.js`],
  outfile: `${dist}runtime.bundle.js`,
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external: ["esbuild"],
  logLevel: "warning",
});
