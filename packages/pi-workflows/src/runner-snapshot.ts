// The runner's startup-snapshot entry. `npm run build` bundles it into one CommonJS file,
// dist/runner-snapshot.cjs (scripts/bundle-runtime.mjs). The server builds a V8 startup
// snapshot from it once per Node binary and package (`node --snapshot-blob B --build-snapshot
// dist/runner-snapshot.cjs`), checks it (`node --snapshot-blob B pi-workflows-runner
// --check`), and then starts warm runners from it (`node --snapshot-blob B
// pi-workflows-runner [--no-warm-up]`); the build's V8 flags (one hash seed per build, no
// rehash: src/server/runners/snapshot.rs) go on every start too. Such a runner starts with
// the runtime's modules already evaluated and its run's path already compiled: the build
// rehearses one whole generation over a socket pair (runner/warmup.ts) and the reads before a
// launch's code runs, and the snapshot keeps the code that compiled.
//
// A deserialized main has no `import()` (ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING), so the main
// installs one from `vm`, made at its first use (module-import.ts; a function-form bundle needs
// none, and making it compiles Node's CommonJS loader), and leaves its runtime
// where dist/sdk.js finds it, so a workflow uses the runner's own SDK instance. Then it runs
// what runner-main.ts runs.
//
// Invariant: the snapshot holds no state of a run, a user or the machine. The runtime's
// modules compute nothing at load time but URLs inside this package, and the rehearsal reads
// only this package's files, writes none (its socket pair's directory is gone before it
// starts) and leaves no timer, socket or handle behind.
import { startupSnapshot } from "node:v8";
import type { Duplex } from "node:stream";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CACHE_DIR_ENV, lookup } from "./bundle-cache.js";
import { hashFile } from "./source-identity.js";
import type { ModuleImporter } from "./module-import.js";
import { RUNTIME_GLOBAL_KEY, setModuleImporter } from "./module-import.js";
import { unixSocketPair } from "./runner/socket-pair.js";
import { memoryPair, warmUp, warmUpAsFunction, warmUpAsModule } from "./runner/warmup.js";
import * as runtime from "./runtime.js";

/** Keep in step with `SNAPSHOT_CHECK_FLAG` in the server's src/server/runners/snapshot.rs. */
const CHECK_FLAG = "--check";
/** A check's exit codes: 0 the snapshot works here; this, it does not. */
const EXIT_CHECK_FAILED = 78;

/** Whether the build's rehearsal completed before the snapshot was taken. */
let rehearsed = false;

/** `import()` for a deserialized main: Node's default ESM loader, through a `vm` script. */
function snapshotImporter(): ModuleImporter {
  const vm = process.getBuiltinModule("node:vm");
  const { createRequire } = process.getBuiltinModule("node:module");
  const { pathToFileURL } = process.getBuiltinModule("node:url");
  // Bare package names (esbuild) resolve from this package, as they do for the plain runtime.
  const resolveFromPackage = createRequire(new URL(import.meta.url));
  // Node marks the loader constant experimental and says so at the first import; the
  // runner's stderr is for its own words, so that one warning is dropped.
  const emitWarning = process.emitWarning.bind(process);
  process.emitWarning = ((warning: string | Error, ...rest: never[]) => {
    const text = typeof warning === "string" ? warning : warning?.message;
    if (typeof text === "string" && text.includes("USE_MAIN_CONTEXT_DEFAULT_LOADER")) return;
    emitWarning(warning, ...rest);
  }) as typeof process.emitWarning;
  const dynamicImport = new vm.Script("(specifier) => import(specifier)", {
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  }).runInThisContext() as (specifier: string) => Promise<unknown>;
  return (specifier) => {
    const bare = !/^(node:|file:|data:)/.test(specifier) && !process.getBuiltinModule(specifier);
    return dynamicImport(bare ? pathToFileURL(resolveFromPackage.resolve(specifier)).href : specifier);
  };
}

/** The check the server runs once before it starts runners from a new snapshot. */
async function check(): Promise<number> {
  if (!rehearsed) throw new Error("the snapshot was taken before its rehearsal completed");
  // Both ways a launched run's bundle loads: as a function, and as a module importing the
  // SDK by its URL (a bundle without a function form).
  if (!(await warmUp(warmUpAsFunction(runtime)))) throw new Error("the rehearsal of a function-form bundle failed");
  if (!(await warmUp(warmUpAsModule))) throw new Error("the rehearsal through import() failed");
  return 0;
}

/**
 * The build rehearses over a real socket pair, as a runner talks on fd 3, so node:net's path
 * is compiled in the snapshot; where no pair can be made (no usable temp dir), in memory.
 */
async function rehearsalPair(): Promise<[Duplex, Duplex]> {
  try {
    return await unixSocketPair();
  } catch (error) {
    const why = (error as NodeJS.ErrnoException)?.code ?? (error as Error)?.message;
    process.stderr.write(`pi-workflows runner snapshot: rehearsing in memory, no socket pair (${why})\n`);
    return memoryPair();
  }
}

/**
 * What a runner reads before its launch's code runs, rehearsed on this package's own
 * package.json: hashing a source file, and the bundle cache's lookup (a miss: no entry there).
 */
function rehearseFiles(): void {
  const packageJson = fileURLToPath(new URL("../package.json", import.meta.url));
  hashFile(packageJson);
  void lookup(packageJson, { [CACHE_DIR_ENV]: path.dirname(packageJson) });
}

/**
 * Node's timers remember the earliest expiry they scheduled, also after that timer was
 * cleared, and schedule a new timer only when it expires sooner. The snapshot keeps that
 * number but not the libuv timer behind it, so a runner deserialized from it would never
 * schedule a timer expiring later than the build's cleared ones (a workflow's `setTimeout`
 * after a warm runner waited ~2 s never fired). A timer that fires with none pending resets it.
 */
function letATimerFire(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 1));
}

function main(): void {
  // Made at the first import: most runs never import (their bundle runs as a function).
  let importer: ModuleImporter | undefined;
  setModuleImporter((specifier) => (importer ??= snapshotImporter())(specifier));
  (globalThis as Record<symbol, unknown>)[Symbol.for(RUNTIME_GLOBAL_KEY)] = runtime;
  if (process.argv.includes(CHECK_FLAG)) {
    check().then(
      (code) => process.exit(code),
      (error: Error) => {
        process.stderr.write(`pi-workflows runner snapshot check: ${error.message}\n`);
        process.exit(EXIT_CHECK_FAILED);
      },
    );
    return;
  }
  void runtime.runnerMainFromCommandLine(new URL("./", import.meta.url)).then((code) => process.exit(code));
}

if (!startupSnapshot.isBuildingSnapshot()) {
  throw new Error("runner-snapshot.cjs is a startup snapshot's entry: node --snapshot-blob B --build-snapshot runner-snapshot.cjs");
}
if (typeof process.getBuiltinModule !== "function") {
  // Node 20.16 added it (and 20.12 the vm loader constant): an older Node starts runners the plain way.
  throw new Error(`Node ${process.version} cannot start runners from a snapshot: it needs 20.16 or newer`);
}
startupSnapshot.setDeserializeMainFunction(main);
// Node takes the snapshot once the event loop is empty, so this completes first; the check
// refuses a snapshot where it did not. The rehearsal loads its workflow as a function-form
// bundle, so that path is in the snapshot too (a build has no `import()`).
rehearseFiles();
warmUp(warmUpAsFunction(runtime), rehearsalPair).then(async (ok) => {
  if (!ok) throw new Error("the runner's rehearsal failed while building the snapshot");
  await letATimerFire();
  rehearsed = true;
});
