// Runner child entry: loads the runtime (one bundled file when built, see runtime.ts) and runs
// one generation (runner/main.ts). A warm runner does this load while it waits for a launch.
import type * as Runtime from "./runtime.js";
import { runtimeBundleUrl } from "./runtime-url.js";

const runtime = (await import((runtimeBundleUrl() ?? new URL("./runtime.js", import.meta.url)).href)) as typeof Runtime;
process.exit(await runtime.runnerMainFromCommandLine(new URL("./", import.meta.url)));
