// A private cache of bundled workflow code, so a resolver or runner whose sources did not
// change skips esbuild (and its service process) entirely. An entry is used only when the
// root file and every mounted file still hash to what the entry recorded; anything else is
// a miss. The directory is `PI_WORKFLOWS_CACHE_DIR` (user-only, 0700; files 0600); without
// it nothing is cached.
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { sha256Hex } from "./canonical.js";
import { hashFile, type WorkflowSource } from "./source-identity.js";

export const CACHE_DIR_ENV = "PI_WORKFLOWS_CACHE_DIR";
/** An entry's bundled code is bounded like any value the runner handles. */
const CACHED_CODE_BYTES_MAX = 16 * 1024 * 1024;

export interface CachedBundle {
  /** The bundled module file to import (0600). */
  moduleFile: string;
  source: WorkflowSource;
}

function cacheDir(env: NodeJS.ProcessEnv): string | undefined {
  const dir = env[CACHE_DIR_ENV];
  return dir && path.isAbsolute(dir) ? path.join(dir, "bundles") : undefined;
}

function entryPaths(dir: string, rootPath: string): { meta: string; module: string } {
  const key = sha256Hex(Buffer.from(rootPath)).slice(0, 32);
  return { meta: path.join(dir, `${key}.json`), module: path.join(dir, `${key}.mjs`) };
}

/** The cached bundle of `rootPath` if every recorded source still matches the disk. */
export async function lookup(rootPath: string, env: NodeJS.ProcessEnv = process.env): Promise<CachedBundle | undefined> {
  const dir = cacheDir(env);
  if (!dir) return undefined;
  const paths = entryPaths(dir, rootPath);
  let source: WorkflowSource;
  try {
    source = JSON.parse(await readFile(paths.meta, "utf8")) as WorkflowSource;
  } catch {
    return undefined;
  }
  if (source?.root?.path !== rootPath || !Array.isArray(source.mounted)) return undefined;
  for (const file of [source.root, ...source.mounted]) {
    try {
      if ((await hashFile(file.path)) !== file.hash) return undefined;
    } catch {
      return undefined;
    }
  }
  return { moduleFile: paths.module, source };
}

/** Record a fresh bundle; a failure to cache never fails the load. Returns the module file. */
export async function store(code: string, source: WorkflowSource, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const dir = cacheDir(env);
  if (!dir || Buffer.byteLength(code) > CACHED_CODE_BYTES_MAX) return undefined;
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const paths = entryPaths(dir, source.root.path);
    const suffix = `${process.pid}.${Date.now()}.tmp`;
    // Module first, then the entry that vouches for it: a reader never sees an entry
    // without its module. Renames keep concurrent writers from tearing files.
    await writeFile(`${paths.module}.${suffix}`, code, { mode: 0o600 });
    await rename(`${paths.module}.${suffix}`, paths.module);
    await writeFile(`${paths.meta}.${suffix}`, JSON.stringify(source), { mode: 0o600 });
    await rename(`${paths.meta}.${suffix}`, paths.meta);
    return paths.module;
  } catch {
    return undefined;
  }
}
