// The runner's one module: the SDK (every export of index.ts) and the runner's own parts.
// `npm run build` bundles it into dist/runtime.bundle.js (scripts/bundle-runtime.mjs), so a
// runner start loads one file instead of resolving some sixty, and a workflow's
// `import ... from "pi-workflows"` is mapped to dist/sdk.js (runtime-url.ts), which re-exports
// this module as the process holds it (a snapshot runner's copy, else this file): the SDK
// the workflow uses and the engine that runs it are one module instance (its error classes
// are checked with instanceof). Nothing is bundled while a runner starts.
export * from "./index.js";
export { runnerMain, runnerMainFromCommandLine } from "./runner/main.js";
