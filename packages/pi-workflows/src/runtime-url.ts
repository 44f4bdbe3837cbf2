// Where the SDK a workflow imports lives: dist/sdk.js when the build bundled the runtime (it
// re-exports the runner's own runtime, see runtime.ts and scripts/bundle-runtime.mjs), else
// the plain entry (a tsc-only build). Decided once per process, the same way by the loader
// (which maps the SDK import) and the runner entry.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const BUNDLE_URL = new URL("./runtime.bundle.js", import.meta.url);
const SDK_SHIM_URL = new URL("./sdk.js", import.meta.url);
const PLAIN_URL = new URL("./index.js", import.meta.url);

/** The bundled runtime's URL, or undefined when it was not built. */
export function runtimeBundleUrl(): URL | undefined {
  return existsSync(fileURLToPath(BUNDLE_URL)) ? BUNDLE_URL : undefined;
}

/** The URL every workflow's SDK import resolves to. */
export const SDK_URL = (runtimeBundleUrl() && existsSync(fileURLToPath(SDK_SHIM_URL)) ? SDK_SHIM_URL : PLAIN_URL).href;
