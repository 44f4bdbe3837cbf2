// Finding a workflow file by name (project first, then the user's agent directory) or by path.
import { realpath, readdir, stat } from "node:fs/promises";
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

export async function resolveWorkflowFile(nameOrPath: string, projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<ResolvedWorkflowFile> {
  if (looksLikePath(nameOrPath)) {
    const candidate = path.resolve(projectPath, nameOrPath);
    if (!(await isFile(candidate))) throw new WorkflowError("workflowNotFound", `no workflow file at ${candidate}`);
    const real = await realpath(candidate);
    return { name: workflowNameOf(real), path: real };
  }
  const dirs = [projectWorkflowsDir(projectPath), globalWorkflowsDir(env)];
  for (const dir of dirs) {
    for (const ext of WORKFLOW_EXTENSIONS) {
      const candidate = path.join(dir, `${nameOrPath}.workflow${ext}`);
      if (await isFile(candidate)) return { name: nameOrPath, path: await realpath(candidate) };
    }
  }
  throw new WorkflowError("workflowNotFound", `no workflow named "${nameOrPath}" in ${dirs.join(" or ")}`);
}

/** Every discoverable workflow; a project file hides a global one of the same name. */
export async function listWorkflows(projectPath: string, env: NodeJS.ProcessEnv = process.env): Promise<(ResolvedWorkflowFile & { scope: "project" | "global" })[]> {
  const found = new Map<string, ResolvedWorkflowFile & { scope: "project" | "global" }>();
  for (const [scope, dir] of [["project", projectWorkflowsDir(projectPath)], ["global", globalWorkflowsDir(env)]] as const) {
    let entries: string[] = [];
    try {
      entries = (await readdir(dir)).sort();
    } catch {
      continue;
    }
    // Extension order decides between two files of one name, as in resolveWorkflowFile.
    for (const ext of WORKFLOW_EXTENSIONS) {
      for (const entry of entries.filter((e) => e.endsWith(`.workflow${ext}`))) {
        const name = workflowNameOf(entry);
        const full = path.join(dir, entry);
        if (!found.has(name) && (await isFile(full))) found.set(name, { name, path: await realpath(full), scope });
      }
    }
  }
  return [...found.values()];
}
