// A private cache of bundled workflow code, so a resolver or runner whose sources did not
// change skips esbuild (and its service process) entirely. An entry is used only when the
// root file and every mounted file still hash to what the entry recorded and its code
// imports this process's SDK module; anything else is a miss. The directory is
// `PI_WORKFLOWS_CACHE_DIR` (user-only, 0700; files 0600); without it nothing is cached.
import { readFileSync } from "node:fs";
import { mkdir, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { sha256Hex } from "./canonical.js";
import { SDK_URL } from "./runtime-url.js";
import { hashFile, type WorkflowSource } from "./source-identity.js";

export const CACHE_DIR_ENV = "PI_WORKFLOWS_CACHE_DIR";
/** An entry's bundled code is bounded like any value the runner handles. */
const CACHED_CODE_BYTES_MAX = 16 * 1024 * 1024;

export interface CachedBundle {
  /** The bundled code, already checked against the hash its entry recorded. */
  code: string;
  source: WorkflowSource;
}

/**
 * An entry: the sources it was built from, the hash of the code built from them and the SDK
 * URL that code imports (a bundle made for another SDK module would load a second SDK).
 */
interface Entry {
  source: WorkflowSource;
  codeHash: string;
  sdk: string;
}

function cacheDir(env: NodeJS.ProcessEnv): string | undefined {
  const dir = env[CACHE_DIR_ENV];
  return dir && path.isAbsolute(dir) ? path.join(dir, "bundles") : undefined;
}

function metaPath(dir: string, rootPath: string): string {
  return path.join(dir, `${sha256Hex(Buffer.from(rootPath)).slice(0, 32)}.json`);
}

/** Modules are content-addressed: a name never holds other code, whoever writes it. */
function modulePath(dir: string, codeHash: string): string {
  return path.join(dir, `${codeHash}.mjs`);
}

/**
 * The cached bundle of `rootPath` if every recorded source still matches the disk and the
 * stored code still has the hash the entry recorded; anything else is a miss.
 */
export async function lookup(rootPath: string, env: NodeJS.ProcessEnv = process.env): Promise<CachedBundle | undefined> {
  const dir = cacheDir(env);
  if (!dir) return undefined;
  let entry: Entry;
  try {
    // Synchronous reads, like hashFile's: a few small files on a runner's start path.
    entry = JSON.parse(readFileSync(metaPath(dir, rootPath), "utf8")) as Entry;
  } catch {
    return undefined;
  }
  const source = entry?.source;
  if (source?.root?.path !== rootPath || !Array.isArray(source.mounted) || typeof entry.codeHash !== "string") return undefined;
  if (entry.sdk !== SDK_URL) return undefined;
  for (const file of [source.root, ...source.mounted]) {
    try {
      if (hashFile(file.path) !== file.hash) return undefined;
    } catch {
      return undefined;
    }
  }
  try {
    const code = readFileSync(modulePath(dir, entry.codeHash), "utf8");
    if (sha256Hex(Buffer.from(code)) !== entry.codeHash) return undefined;
    return { code, source };
  } catch {
    return undefined;
  }
}

/** Record a fresh bundle; a failure to cache never fails the load. */
export async function store(code: string, source: WorkflowSource, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const dir = cacheDir(env);
  if (!dir || Buffer.byteLength(code) > CACHED_CODE_BYTES_MAX) return;
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const codeHash = sha256Hex(Buffer.from(code));
    const suffix = `${process.pid}.${Date.now()}.tmp`;
    // Module first, then the entry that names it by hash; renames keep readers from ever
    // seeing a partial file, and a torn pair is only a miss (hashes disagree).
    const module = modulePath(dir, codeHash);
    await writeFile(`${module}.${suffix}`, code, { mode: 0o600 });
    await rename(`${module}.${suffix}`, module);
    const meta = metaPath(dir, source.root.path);
    const entry: Entry = { source, codeHash, sdk: SDK_URL };
    await writeFile(`${meta}.${suffix}`, JSON.stringify(entry), { mode: 0o600 });
    await rename(`${meta}.${suffix}`, meta);
  } catch {
    // Caching is an optimization only.
  }
}
