// Loading a workflow file: bundle it with esbuild (hashing exactly the bytes it reads), run the
// bundle (as a function when it has a function form, function-form.ts; else imported as a
// module), and compile the default export.
import type { Plugin } from "esbuild";
import * as bundleCache from "./bundle-cache.js";
import { rmSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { sha256Hex } from "./canonical.js";
import { compileWorkflow, type CompiledWorkflow } from "./compile.js";
import { withEsbuild } from "./esbuild-service.js";
import { canRunFunctionForm, functionFormOf, processSdk, runFunctionForm } from "./function-form.js";
import { resolveWorkflowFile } from "./discovery.js";
// This package's SDK: every workflow shares it, with no node_modules of its own.
import { SDK_URL } from "./runtime-url.js";
import { WorkflowError } from "./errors.js";
import { importModule } from "./module-import.js";
import { compareLoadedSource, hashFile, type SourceFile, type WorkflowSource } from "./source-identity.js";
import type { WorkflowDefinition } from "./types.js";

export * from "./discovery.js";

const SDK_IMPORTS = /^(pi-workflows|@osolmaz\/pi-workflows)$/;
const LOADERS: Record<string, "ts" | "tsx" | "js" | "jsx" | "json"> = {
  ".ts": "ts", ".mts": "ts", ".cts": "ts", ".tsx": "tsx",
  ".js": "js", ".mjs": "js", ".cjs": "js", ".jsx": "jsx", ".json": "json",
};

export interface LoadedWorkflow {
  name: string;
  definition: WorkflowDefinition;
  compiled: CompiledWorkflow;
  source: WorkflowSource;
}

/** Maps the SDK import to the shared entry; other bare imports stay external but resolvable. */
function importsPlugin(): Plugin {
  return {
    name: "pi-workflows-imports",
    setup(pluginBuild) {
      pluginBuild.onResolve({ filter: SDK_IMPORTS }, () => ({ path: SDK_URL, external: true }));
      pluginBuild.onResolve({ filter: /^[^./]/ }, async (args) => {
        if (args.pluginData?.piwResolving || path.isAbsolute(args.path)) return undefined;
        // `node:module` and `node:os` load only on a bundle-cache miss: a runner's start-up
        // imports neither (each builtin costs start-up CPU in every runner process).
        const { isBuiltin } = await importModule<typeof import("node:module")>("node:module");
        if (args.path.startsWith("node:") || isBuiltin(args.path)) return { path: args.path, external: true };
        // The bundle is imported from a temp directory: point it at the absolute file.
        const resolved = await pluginBuild.resolve(args.path, {
          kind: args.kind,
          resolveDir: args.resolveDir,
          pluginData: { piwResolving: true },
        });
        if (resolved.errors.length === 0 && resolved.path && path.isAbsolute(resolved.path)) {
          return { path: pathToFileURL(resolved.path).href, external: true };
        }
        return { path: args.path, external: true };
      });
    },
  };
}

/** Reads every source file itself so the recorded hash is of exactly the bytes that were loaded. */
function hashingPlugin(hashes: Map<string, string>): Plugin {
  return {
    name: "pi-workflows-hash",
    setup(pluginBuild) {
      pluginBuild.onLoad({ filter: /\.(m|c)?(t|j)sx?$|\.json$/ }, async (args) => {
        const bytes = await readFile(args.path);
        hashes.set(args.path, sha256Hex(bytes));
        return { contents: bytes, loader: LOADERS[path.extname(args.path)] ?? "js" };
      });
    },
  };
}

/** A fresh bundle: its module code, its function form if it has one, and the sources it read. */
interface Bundle {
  code: string;
  functionCode?: string;
  source: WorkflowSource;
}

// Loaded only on a cache miss: esbuild starts a service process, stopped again when idle.
function bundle(filePath: string): Promise<Bundle> {
  return withEsbuild((esbuild) => bundleWith(esbuild, filePath));
}

async function bundleWith(esbuild: typeof import("esbuild"), filePath: string): Promise<Bundle> {
  const hashes = new Map<string, string>();
  const workingDir = path.dirname(filePath);
  let result;
  try {
    result = await esbuild.build({
      entryPoints: [filePath],
      absWorkingDir: workingDir,
      bundle: true,
      write: false,
      metafile: true,
      format: "esm",
      platform: "node",
      target: "node20",
      logLevel: "silent",
      plugins: [importsPlugin(), hashingPlugin(hashes)],
    });
  } catch (error) {
    const errors = (error as { errors?: { text: string; location?: { file: string; line: number; column: number } | null }[] }).errors;
    // Only build diagnostics say the definition is bad; anything else (the esbuild service
    // could not start, no memory) is transient: the runner exits and the run parks.
    if (!errors?.length) throw error;
    const detail = errors?.map((e) => (e.location ? `${e.location.file}:${e.location.line}:${e.location.column}: ${e.text}` : e.text)).join("; ");
    throw new WorkflowError("invalidDefinition", `cannot build ${filePath}: ${detail || (error as Error).message}`);
  }
  const mounted: SourceFile[] = [];
  for (const input of Object.keys(result.metafile.inputs)) {
    const absolute = path.resolve(workingDir, input);
    if (absolute === filePath) continue;
    mounted.push({ path: absolute, hash: hashes.get(absolute) ?? hashFile(absolute) });
  }
  mounted.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const rootHash = hashes.get(filePath) ?? hashFile(filePath);
  const code = result.outputFiles[0]!.text;
  const { isBuiltin } = await importModule<typeof import("node:module")>("node:module");
  const imports = Object.values(result.metafile.outputs).flatMap((output) => output.imports);
  const functionCode = await functionFormOf(esbuild.transform, code, imports, isBuiltin);
  return { code, functionCode, source: { root: { kind: "file", path: filePath, hash: rootHash }, mounted } };
}

/** Import bundled code through a 0600 file in a 0700 temp directory, removed right after. */
async function importBundle(code: string): Promise<Record<string, unknown>> {
  const { tmpdir } = await importModule<typeof import("node:os")>("node:os");
  const dir = await mkdtemp(path.join(tmpdir(), "pi-workflows-load-"));
  // A workflow module that ends the process while it is imported never reaches `finally`.
  const removeAtExit = () => rmSync(dir, { recursive: true, force: true });
  process.once("exit", removeAtExit);
  try {
    const file = path.join(dir, "workflow.mjs");
    await writeFile(file, code, { mode: 0o600 });
    return await importModule(pathToFileURL(file).href);
  } finally {
    process.off("exit", removeAtExit);
    await rm(dir, { recursive: true, force: true });
  }
}

/** The sources the caller expects: anything else is refused before its code runs. */
export class SourceChangedError extends Error {}

function refuseUnexpected(expected: WorkflowSource | undefined, source: WorkflowSource): void {
  const differs = expected && compareLoadedSource(expected, source);
  if (differs) throw new SourceChangedError(differs);
}

/**
 * The bundled module of `filePath`: from the cache when its sources are unchanged. With
 * `expected`, the identity of what would load is compared before any of its code runs (a
 * cache hit's files were just hashed against its entry; a fresh bundle hashed the very
 * bytes it read), so a caller needs no hashing pass of its own.
 */
async function loadModule(filePath: string, expected?: WorkflowSource): Promise<{ module: Record<string, unknown>; source: WorkflowSource }> {
  const cached = await bundleCache.lookup(filePath);
  if (cached) {
    refuseUnexpected(expected, cached.source);
    try {
      // Run from the very bytes that were checked: nothing can swap them in between.
      const module = await runAsFunction(cached.functionCode);
      return { module: module ?? (await importVerified(cached.code)), source: cached.source };
    } catch {
      // A cached bundle that no longer runs is rebuilt from the sources below.
    }
  }
  const fresh = await bundle(filePath);
  refuseUnexpected(expected, fresh.source);
  await bundleCache.store(fresh, fresh.source);
  const module = await runAsFunction(fresh.functionCode);
  return { module: module ?? (await importBundle(fresh.code)), source: fresh.source };
}

/** The bundle's exports run from its function form; undefined when it has none or this Node cannot. */
async function runAsFunction(functionCode: string | undefined): Promise<Record<string, unknown> | undefined> {
  if (functionCode === undefined || !canRunFunctionForm()) return undefined;
  return runFunctionForm(functionCode, await processSdk());
}

/** Import code held in memory (a data: URL; its imports are absolute file URLs or builtins). */
export async function importVerified(code: string): Promise<Record<string, unknown>> {
  return await importModule(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);
}

/**
 * Load and compile one workflow file (an absolute, canonical path). With `expected`, a load
 * whose sources differ from it throws `SourceChangedError` before any workflow code runs.
 */
export async function loadWorkflowFile(filePath: string, name?: string, expected?: WorkflowSource): Promise<LoadedWorkflow> {
  let module: Record<string, unknown>;
  let source: WorkflowSource;
  try {
    ({ module, source } = await loadModule(filePath, expected));
  } catch (error) {
    if (error instanceof WorkflowError || error instanceof SourceChangedError) throw error;
    // A system call failed (disk full, too many files): transient, not a definition error.
    if ((error as NodeJS.ErrnoException)?.syscall) throw error;
    throw new WorkflowError("invalidDefinition", `loading ${filePath} failed: ${(error as Error)?.message ?? error}`);
  }
  const { definition, compiled } = compileDefaultExport(filePath, module);
  return { name: name ?? definition.name, definition, compiled, source };
}

/** The workflow a module default-exports, compiled; `label` names the module in errors. */
export function compileDefaultExport(label: string, module: Record<string, unknown>): { definition: WorkflowDefinition; compiled: CompiledWorkflow } {
  const definition = module.default as WorkflowDefinition | undefined;
  if (definition?.kind !== "workflow") {
    throw new WorkflowError("invalidDefinition", `${label} must default-export defineWorkflow(...)`);
  }
  try {
    return { definition, compiled: compileWorkflow(definition) };
  } catch (error) {
    throw new WorkflowError("invalidDefinition", (error as Error).message);
  }
}

/** Resolve `<name>` or a path for `projectPath`, then load it. */
export async function loadWorkflow(nameOrPath: string, projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<LoadedWorkflow> {
  const file = await resolveWorkflowFile(nameOrPath, projectPath, env);
  return loadWorkflowFile(file.path, file.name);
}
