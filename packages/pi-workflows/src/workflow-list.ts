// One page of the discoverable workflows (the resolver's `list` request, `workflow.list` on the
// client protocol): project workflows first, then global ones, each group by name. Each
// workflow of the page is loaded to read its title; one that does not load is still listed,
// with why (`loadError`), so one broken file never hides the others.
//
// Loading runs workflow code, so it runs in a worker thread (list-worker.ts), one file at a
// time and each bounded in time: a file whose top-level code never finishes is stopped with
// its worker, and the next file gets a new one. The whole page is bounded by a budget too;
// workflows it leaves unloaded are listed as `loadSkipped`.
import { stat } from "node:fs/promises";
import path from "node:path";
import { Worker } from "node:worker_threads";
import { titleProblem } from "./define.js";
import { type DiscoveredWorkflow, type WorkflowScope, discoverWorkflows } from "./discovery.js";
import { WorkflowError } from "./errors.js";

/** Workflows on one page by default and at most (prior art: `/workflow` lists ≤ 50). */
export const LIST_LIMIT_DEFAULT = 50;
export const LIST_LIMIT_MAX = 50;
/** A load error's message, in UTF-8 bytes: a table cell, not a log. */
export const LOAD_ERROR_MESSAGE_BYTES_MAX = 300;
/** One workflow's load (bundle, import, compile) at most. */
export const WORKFLOW_LOAD_TIMEOUT_MS = 5_000;
/** Loading one page at most, unless the request names its own budget (the server does, to
 * answer within its client's wait). */
export const LIST_BUDGET_MS_DEFAULT = 10_000;
export const LIST_BUDGET_MS_MAX = 60_000;
/** The old-generation heap of a load worker: workflow code that allocates without bound
 * ends its worker, not the resolver. */
const LOAD_WORKER_HEAP_MB = 512;

export interface ListRequest {
  /** The project directory (absolute). */
  project: string;
  offset: number;
  limit: number;
  /** How long loading the page's workflows may take in all. */
  budgetMs: number;
}

export interface LoadError {
  code: string;
  message: string;
}

export interface ListedWorkflow {
  name: string;
  scope: WorkflowScope;
  path: string;
  title?: string;
  loadError?: LoadError;
}

export interface WorkflowListPage {
  workflows: ListedWorkflow[];
  /** Every discoverable workflow (of the directory entries read). */
  total: number;
  offset: number;
  /** Present when more workflows follow this page. */
  nextOffset?: number;
  /** A workflow directory had more entries than were read: `total` may be short. */
  truncated: boolean;
  /** Where workflows were looked for. */
  directories: Record<WorkflowScope, string>;
}

/** A list request from untrusted fields (a served request or command-line arguments). */
export function listRequestOf(fields: Record<string, unknown>): ListRequest {
  const { project, offset = 0, limit = LIST_LIMIT_DEFAULT, budgetMs = LIST_BUDGET_MS_DEFAULT } = fields;
  if (typeof project !== "string" || !path.isAbsolute(project)) {
    throw new WorkflowError("invalidArguments", "a list request needs an absolute project directory");
  }
  if (!Number.isSafeInteger(offset) || (offset as number) < 0) {
    throw new WorkflowError("invalidArguments", "offset must be a whole number from 0");
  }
  if (!Number.isInteger(limit) || (limit as number) < 1 || (limit as number) > LIST_LIMIT_MAX) {
    throw new WorkflowError("invalidArguments", `limit must be 1 to ${LIST_LIMIT_MAX}`);
  }
  if (!Number.isInteger(budgetMs) || (budgetMs as number) < 1 || (budgetMs as number) > LIST_BUDGET_MS_MAX) {
    throw new WorkflowError("invalidArguments", `budgetMs must be 1 to ${LIST_BUDGET_MS_MAX}`);
  }
  return { project, offset: offset as number, limit: limit as number, budgetMs: budgetMs as number };
}

export async function listWorkflowPage(request: ListRequest, env: NodeJS.ProcessEnv = process.env): Promise<WorkflowListPage> {
  const isDirectory = await stat(request.project).then(
    (found) => found.isDirectory(),
    () => false,
  );
  if (!isDirectory) {
    throw new WorkflowError("projectNotFound", `the project directory ${request.project} does not exist; name an existing one`);
  }
  const discovery = await discoverWorkflows(request.project, env);
  const total = discovery.workflows.length;
  const slice = discovery.workflows.slice(request.offset, request.offset + request.limit);
  const workflows = await loadTitles(slice, request.budgetMs);
  const next = request.offset + workflows.length;
  return {
    workflows,
    total,
    offset: request.offset,
    ...(workflows.length > 0 && next < total ? { nextOffset: next } : {}),
    truncated: discovery.truncated,
    directories: discovery.directories,
  };
}

type LoadOutcome = { title?: string } | { error: LoadError };

/** Each workflow with its title, or its load error; in order, one at a time. */
async function loadTitles(found: DiscoveredWorkflow[], budgetMs: number): Promise<ListedWorkflow[]> {
  const deadline = Date.now() + budgetMs;
  const listed: ListedWorkflow[] = [];
  let worker: LoadWorker | undefined;
  try {
    for (const workflow of found) {
      const entry: ListedWorkflow = { name: workflow.name, scope: workflow.scope, path: workflow.path };
      const remaining = deadline - Date.now();
      let outcome: LoadOutcome;
      if (remaining <= 0) {
        outcome = { error: { code: "loadSkipped", message: `not loaded: listing this page took over ${Math.ceil(budgetMs / 1000)} s; list it again (loaded workflows are cached)` } };
      } else {
        worker ??= new LoadWorker();
        const waitMs = Math.min(WORKFLOW_LOAD_TIMEOUT_MS, remaining);
        const answer = await worker.load(workflow, waitMs);
        if (answer === undefined || !worker.usable) {
          // Timed out or ended: its worker may still be stuck in that workflow's code.
          await worker.close();
          worker = undefined;
        }
        outcome =
          answer ??
          (waitMs === WORKFLOW_LOAD_TIMEOUT_MS
            ? { error: { code: "loadTimeout", message: `did not finish loading within ${WORKFLOW_LOAD_TIMEOUT_MS / 1000} s; look for top-level code that never finishes (a loop, or an await that never settles)` } }
            : { error: { code: "loadSkipped", message: `not loaded: listing this page took over ${Math.ceil(budgetMs / 1000)} s; list it again (loaded workflows are cached)` } });
      }
      if ("error" in outcome) entry.loadError = { code: outcome.error.code, message: boundedText(outcome.error.message, LOAD_ERROR_MESSAGE_BYTES_MAX) };
      else if (outcome.title !== undefined && titleProblem(outcome.title) === undefined) entry.title = outcome.title;
      listed.push(entry);
    }
  } finally {
    await worker?.close();
  }
  return listed;
}

/** One load worker thread: one request at a time. */
class LoadWorker {
  private readonly worker: Worker;
  private settle?: (outcome: LoadOutcome) => void;
  /** False once the worker ended (an uncaught error in workflow code, out of memory). */
  usable = true;

  constructor() {
    this.worker = new Worker(new URL("./list-worker.js", import.meta.url), {
      stdout: true,
      stderr: true,
      resourceLimits: { maxOldGenerationSizeMb: LOAD_WORKER_HEAP_MB },
    });
    // Its output is workflow code's, never an answer: to the resolver's stderr.
    this.worker.stdout.pipe(process.stderr);
    this.worker.stderr.pipe(process.stderr);
    this.worker.on("message", (message: { loaded: boolean; title?: unknown; error?: { code?: unknown; message?: unknown } }) => {
      if (message.loaded) this.finish(typeof message.title === "string" ? { title: message.title } : {});
      else this.finish({ error: { code: String(message.error?.code ?? "loadFailed"), message: String(message.error?.message ?? "") } });
    });
    this.worker.on("error", (error) => {
      this.usable = false;
      this.finish({ error: { code: "loadFailed", message: `its code failed while loading: ${error?.message ?? error}` } });
    });
    this.worker.on("exit", (code) => {
      this.usable = false;
      this.finish({ error: { code: "loadFailed", message: `its code ended the loader (exit code ${code})` } });
    });
  }

  /** Its outcome, or undefined when it did not answer within `waitMs`. */
  load(workflow: DiscoveredWorkflow, waitMs: number): Promise<LoadOutcome | undefined> {
    if (!this.usable) return Promise.resolve({ error: { code: "loadFailed", message: "the loader ended before this workflow" } });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.settle = undefined;
        resolve(undefined);
      }, waitMs);
      this.settle = (outcome) => {
        clearTimeout(timer);
        resolve(outcome);
      };
      this.worker.postMessage({ path: workflow.path, name: workflow.name });
    });
  }

  private finish(outcome: LoadOutcome) {
    const settle = this.settle;
    this.settle = undefined;
    settle?.(outcome);
  }

  async close(): Promise<void> {
    this.usable = false;
    await this.worker.terminate();
  }
}

/** `text` on one line, at most `bytesMax` UTF-8 bytes (cut at a character, marked with …). */
export function boundedText(text: string, bytesMax: number): string {
  const line = text.replace(/\s+/g, " ").replace(/\p{Cc}/gu, "\uFFFD").trim();
  if (Buffer.byteLength(line) <= bytesMax) return line;
  const ellipsis = "…";
  const room = bytesMax - Buffer.byteLength(ellipsis);
  let out = "";
  let bytes = 0;
  for (const char of line) {
    const size = Buffer.byteLength(char);
    if (bytes + size > room) break;
    out += char;
    bytes += size;
  }
  return out + ellipsis;
}
