// A private cache of bundled workflow code, so a resolver or runner whose sources did not
// change skips esbuild (and its service process) entirely. An entry is used only when the
// root file and every mounted file still hash to what the entry recorded and its code
// imports this process's SDK module; anything else is a miss. With the module it keeps the
// bundle's function form when it has one (function-form.ts), stored and checked the same
// way. The directory is `PI_WORKFLOWS_CACHE_DIR` (user-only, 0700; files 0600); without it
// nothing is cached.
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
  /** Its function form, if it has one, checked the same way. */
  functionCode?: string;
  source: WorkflowSource;
}

/** Entries of another layout are misses (rebuilt once): older ones recorded no function form. */
const ENTRY_VERSION = 2;

/**
 * An entry: the sources it was built from, the hash of the code built from them and the SDK
 * URL that code imports (a bundle made for another SDK module would load a second SDK).
 */
interface Entry {
  version: number;
  source: WorkflowSource;
  codeHash: string;
  /** The function form's hash, when the bundle has one. */
  functionHash?: string;
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

/** Function forms too. */
function functionPath(dir: string, functionHash: string): string {
  return path.join(dir, `${functionHash}.cjs`);
}

/** The stored text at `file` if it has `hash`, else undefined. */
function readVerified(file: string, hash: string): string | undefined {
  const text = readFileSync(file, "utf8");
  return sha256Hex(Buffer.from(text)) === hash ? text : undefined;
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
  if (entry.version !== ENTRY_VERSION || entry.sdk !== SDK_URL) return undefined;
  if (entry.functionHash !== undefined && typeof entry.functionHash !== "string") return undefined;
  for (const file of [source.root, ...source.mounted]) {
    try {
      if (hashFile(file.path) !== file.hash) return undefined;
    } catch {
      return undefined;
    }
  }
  try {
    const code = readVerified(modulePath(dir, entry.codeHash), entry.codeHash);
    if (code === undefined) return undefined;
    if (entry.functionHash === undefined) return { code, source };
    const functionCode = readVerified(functionPath(dir, entry.functionHash), entry.functionHash);
    return functionCode === undefined ? undefined : { code, functionCode, source };
  } catch {
    return undefined;
  }
}

/** Write `text` to `file` whole or not at all: a reader never sees a partial file. */
async function writeWhole(file: string, text: string, suffix: string): Promise<void> {
  await writeFile(`${file}.${suffix}`, text, { mode: 0o600 });
  await rename(`${file}.${suffix}`, file);
}

/** Record a fresh bundle (and its function form, if any); a failure to cache never fails the load. */
export async function store(bundle: Omit<CachedBundle, "source">, source: WorkflowSource, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const { code, functionCode } = bundle;
  const dir = cacheDir(env);
  const bytes = Buffer.byteLength(code) + (functionCode === undefined ? 0 : Buffer.byteLength(functionCode));
  if (!dir || bytes > CACHED_CODE_BYTES_MAX) return;
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const codeHash = sha256Hex(Buffer.from(code));
    const functionHash = functionCode === undefined ? undefined : sha256Hex(Buffer.from(functionCode));
    const suffix = `${process.pid}.${Date.now()}.tmp`;
    // Code first, then the entry that names it by hash; a torn set is only a miss (hashes
    // disagree).
    await writeWhole(modulePath(dir, codeHash), code, suffix);
    if (functionCode !== undefined && functionHash !== undefined) await writeWhole(functionPath(dir, functionHash), functionCode, suffix);
    const meta = metaPath(dir, source.root.path);
    const entry: Entry = { version: ENTRY_VERSION, source, codeHash, functionHash, sdk: SDK_URL };
    await writeWhole(meta, JSON.stringify(entry), suffix);
  } catch {
    // Caching is an optimization only.
  }
}
