// A workflow bundle run as a function instead of an ES module. Importing even a tiny module
// through Node's ES module loader costs a fresh process ~5–8 ms of CPU (the loader's own code
// compiles and runs cold), which is most of a snapshot runner's work after its start. A
// bundle that needs nothing only a module gives (its imports are the SDK's named exports and
// Node's builtins; no top-level await, no import.meta, no dynamic import or require) is
// converted once, when it is bundled, by esbuild into its CommonJS form and run here with
// `vm.compileFunction`: same code, same SDK instance, strict like a module. Anything else
// keeps the module path (loader.ts).
//
// Invariant: the function form is derived from the bundle's exact bytes and is stored and
// checked like them (bundle-cache.ts); it is given only the SDK and Node's builtins, never a
// general `require`, and workflow code sees no `require`, `module` or `exports` of its own.
import type { Metafile, transform as Transform } from "esbuild";
import { importModule, RUNTIME_GLOBAL_KEY } from "./module-import.js";
import { SDK_URL } from "./runtime-url.js";

/** What a function-form bundle is called with: the names esbuild's CommonJS output uses. */
const PARAMETERS = ["exports", "require", "module"];
/** A module's code is strict; so is its function form. */
const STRICT_PROLOGUE = '"use strict";\n';
/** esbuild's interop for a default or namespace import: the SDK has neither a default nor a plain namespace here. */
const SDK_INTEROP = `__toESM(require(${JSON.stringify(SDK_URL)})`;

type OutputImport = Metafile["outputs"][string]["imports"][number];

/** Whether this Node runs function-form bundles (`process.getBuiltinModule`: Node 20.16+). */
export function canRunFunctionForm(): boolean {
  return typeof process.getBuiltinModule === "function";
}

/**
 * The function form of an ES module bundle, or undefined when the bundle needs the module
 * loader. `transform` is esbuild's (the bundler already loaded it); `imports` are the
 * bundle's external imports (its metafile output's); `isBuiltin` tells Node's builtins.
 */
export async function functionFormOf(
  transform: typeof Transform,
  code: string,
  imports: readonly OutputImport[],
  isBuiltin: (specifier: string) => boolean,
): Promise<string | undefined> {
  const plain = imports.every((entry) => entry.kind === "import-statement" && (entry.path === SDK_URL || isBuiltin(entry.path)));
  if (!plain) return undefined;
  let converted;
  try {
    converted = await transform(code, {
      format: "cjs",
      platform: "node",
      target: "node20",
      logLevel: "silent",
      // The workflow's own free names stay unbound, as in a module.
      define: { require: "undefined", module: "undefined", exports: "undefined" },
    });
  } catch {
    return undefined; // top-level await: only a module has it
  }
  // A warning is something a module would do differently (import.meta is one).
  if (converted.warnings.length > 0 || converted.code.includes(SDK_INTEROP)) return undefined;
  return STRICT_PROLOGUE + converted.code;
}

/**
 * The SDK instance this process's workflows share: the runtime a snapshot runner holds, else
 * the module every workflow's SDK import maps to (dist/sdk.js, which re-exports the runner's).
 */
export async function processSdk(): Promise<object> {
  const held = (globalThis as Record<symbol, unknown>)[Symbol.for(RUNTIME_GLOBAL_KEY)];
  return (held as object | undefined) ?? (await importModule<object>(SDK_URL));
}

/** Run a function-form bundle (already checked against its recorded hash) with `sdk`: its exports. */
export function runFunctionForm(code: string, sdk: object): Record<string, unknown> {
  const vm = process.getBuiltinModule("node:vm");
  const require = (specifier: string): unknown => {
    if (specifier === SDK_URL) return sdk;
    const builtin = process.getBuiltinModule(specifier);
    if (builtin === undefined) throw new Error(`a workflow bundle cannot load ${JSON.stringify(specifier)} as a function`);
    return builtin;
  };
  const module = { exports: {} as Record<string, unknown> };
  // The name stack traces show: never the project's path (logs carry no paths).
  const run = vm.compileFunction(code, PARAMETERS, { filename: "workflow-bundle.cjs" });
  run.call(undefined, module.exports, require, module);
  return module.exports;
}
