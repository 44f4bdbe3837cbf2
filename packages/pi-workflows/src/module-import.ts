// Every dynamic import of the runtime goes through `importModule`: a runner started from a V8
// startup snapshot (runner-snapshot.ts) has no `import()` of its own — Node gives a
// deserialized main none — and installs one here before it loads anything.

/** Imports one module by an absolute URL, a builtin's name or a bare package name. */
export type ModuleImporter = (specifier: string) => Promise<unknown>;

/** Where a runner from a startup snapshot leaves the runtime for the SDK a workflow imports (dist/sdk.js). */
export const RUNTIME_GLOBAL_KEY = "pi-workflows.runtime.v1";

// Bare specifiers resolve from this module's own place (the package's dist/), as before.
let importer: ModuleImporter = (specifier) => import(specifier);

export function importModule<T = Record<string, unknown>>(specifier: string): Promise<T> {
  return importer(specifier) as Promise<T>;
}

export function setModuleImporter(next: ModuleImporter): void {
  importer = next;
}
