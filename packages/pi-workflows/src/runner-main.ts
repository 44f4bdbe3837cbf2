// Runner child entry: loads the runtime (one bundled file when built, see runtime.ts) and runs
// one generation (runner/main.ts). A warm runner does this load while it waits for a launch.
import type * as Runtime from "./runtime.js";
import { runtimeBundleUrl } from "./runtime-url.js";

/** Keep in step with `NO_WARM_UP_FLAG` in the server's src/server/runners/pool.rs. */
const NO_WARM_UP_FLAG = "--no-warm-up";

const runtime = (await import((runtimeBundleUrl() ?? new URL("./runtime.js", import.meta.url)).href)) as typeof Runtime;
process.exit(
  await runtime.runnerMain({
    executorUrl: new URL("./agent/executor.js", import.meta.url),
    // The server's pool passes this while runs are running: a rehearsal's CPU would go to them.
    warmUp: !process.argv.includes(NO_WARM_UP_FLAG),
  }),
);
