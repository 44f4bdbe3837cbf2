// Finding a workflow file by name (project first, then the user's agent directory) or by path.
import { realpathSync, statSync } from "node:fs";
import { opendir, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import path from "node:path";
import { WorkflowError } from "./errors.js";

export const WORKFLOW_EXTENSIONS = [".ts", ".js", ".mts", ".mjs"] as const;
const WORKFLOW_FILE = /^(.+)\.workflow\.(ts|js|mts|mjs)$/;

export function projectWorkflowsDir(projectPath: string): string {
  return path.join(projectPath, ".pi", "workflows");
}

/** `$PI_CODING_AGENT_DIR/workflows` (default `~/.pi/agent/workflows`); only `*.workflow.*` files there are workflows. */
export function globalWorkflowsDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(env.PI_CODING_AGENT_DIR || path.join(homedir(), ".pi", "agent"), "workflows");
}

/** The command name of a workflow file: its stem without `.workflow.<ext>` (or `.<ext>`). */
export function workflowNameOf(filePath: string): string {
  const base = path.basename(filePath);
  return WORKFLOW_FILE.exec(base)?.[1] ?? base.replace(/\.(ts|js|mts|mjs)$/, "");
}

async function isFile(candidate: string): Promise<boolean> {
  try {
    return (await stat(candidate)).isFile();
  } catch {
    return false;
  }
}

function looksLikePath(nameOrPath: string): boolean {
  return nameOrPath.includes("/") || nameOrPath.includes(path.sep) || nameOrPath.startsWith(".") || /\.(ts|js|mts|mjs)$/.test(nameOrPath);
}

export interface ResolvedWorkflowFile {
  name: string;
  path: string;
}

/** A `run.start` target's file and what its finding rested on: the candidate path that was a
 * file (`path` is its real path) and the candidates looked at before it, none a file. The
 * same looks give the same file while those hold. */
export interface ResolvedTarget extends ResolvedWorkflowFile {
  candidate: string;
  shadows: string[];
}

function isFileNow(candidate: string): boolean {
  try {
    return statSync(candidate).isFile();
  } catch {
    return false;
  }
}

/**
 * The file a `run.start` names. Its few looks are synchronous on purpose: only resolver
 * processes call this, one request at a time, and each look through the thread pool cost two
 * thread switches (up to eight stats for a name), on every start's path.
 */
export async function resolveWorkflowFile(nameOrPath: string, projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<ResolvedTarget> {
  if (looksLikePath(nameOrPath)) {
    const candidate = path.resolve(projectPath, nameOrPath);
    if (!isFileNow(candidate)) throw new WorkflowError("workflowNotFound", `no workflow file at ${candidate}`);
    const real = realpathSync.native(candidate);
    return { name: workflowNameOf(real), path: real, candidate, shadows: [] };
  }
  const dirs = [projectWorkflowsDir(projectPath), globalWorkflowsDir(env)];
  const shadows: string[] = [];
  for (const dir of dirs) {
    for (const ext of WORKFLOW_EXTENSIONS) {
      const candidate = path.join(dir, `${nameOrPath}.workflow${ext}`);
      if (isFileNow(candidate)) return { name: nameOrPath, path: realpathSync.native(candidate), candidate, shadows };
      shadows.push(candidate);
    }
  }
  throw new WorkflowError("workflowNotFound", `no workflow named "${nameOrPath}" in ${dirs.join(" or ")}`);
}

export type WorkflowScope = "project" | "global";

export interface DiscoveredWorkflow extends ResolvedWorkflowFile {
  scope: WorkflowScope;
}

/** Entries read from one workflow directory at most: a listing never reads an unbounded
 * directory; one with more entries is listed in part (`truncated`). */
export const DIRECTORY_ENTRIES_MAX = 1000;

export interface Discovery {
  /** Project workflows first, then global ones; each group by name (code-unit order). */
  workflows: DiscoveredWorkflow[];
  /** A directory had more than `DIRECTORY_ENTRIES_MAX` entries: some workflows may be missing. */
  truncated: boolean;
  /** Where workflows were looked for. */
  directories: Record<WorkflowScope, string>;
}

/** At most `max` entry names of `dir`, sorted; none when it cannot be read (it need not exist). */
async function readEntries(dir: string, max: number): Promise<{ names: string[]; truncated: boolean }> {
  const names: string[] = [];
  let truncated = false;
  try {
    // `opendir` streams: a huge directory costs no more than `max` entries. Leaving the loop
    // early closes it.
    for await (const entry of await opendir(dir)) {
      if (names.length >= max) {
        truncated = true;
        break;
      }
      names.push(entry.name);
    }
  } catch {
    // Missing or unreadable (or removed while read): what was read so far.
  }
  return { names: names.sort(), truncated };
}

/** Every discoverable workflow (bounded); a project file hides a global one of the same name. */
export async function discoverWorkflows(projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<Discovery> {
  const directories: Record<WorkflowScope, string> = { project: projectWorkflowsDir(projectPath), global: globalWorkflowsDir(env) };
  const found = new Map<string, DiscoveredWorkflow>();
  let truncated = false;
  for (const scope of ["project", "global"] as const) {
    const entries = await readEntries(directories[scope], DIRECTORY_ENTRIES_MAX);
    truncated ||= entries.truncated;
    // Extension order decides between two files of one name, as in resolveWorkflowFile.
    for (const ext of WORKFLOW_EXTENSIONS) {
      for (const entry of entries.names.filter((e) => e.endsWith(`.workflow${ext}`))) {
        const name = workflowNameOf(entry);
        const full = path.join(directories[scope], entry);
        if (found.has(name) || !(await isFile(full))) continue;
        // A file removed between the two looks is simply not listed.
        const real = await realpath(full).catch(() => undefined);
        if (real !== undefined) found.set(name, { name, path: real, scope });
      }
    }
  }
  const rank = (w: DiscoveredWorkflow) => (w.scope === "project" ? 0 : 1);
  const workflows = [...found.values()].sort((a, b) => rank(a) - rank(b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { workflows, truncated, directories };
}

/** Every discoverable workflow; a project file hides a global one of the same name. */
export async function listWorkflows(projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<DiscoveredWorkflow[]> {
  return (await discoverWorkflows(projectPath, env)).workflows;
}
