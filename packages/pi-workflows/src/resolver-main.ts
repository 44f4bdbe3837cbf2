// Source resolver child. One-shot: `node dist/resolver-main.js <name-or-path> --project <dir>
// [--input-json J]` prints one JSON line: the workflow's source identity, definition digest,
// snapshot and normalized input; or `{ "error": { code, message } }` with exit code 2.
// Served: `node dist/resolver-main.js --serve` answers the same requests
// (`{id, target, project, inputJson?}` → `{id, answer}` or `{id, error}`) on the channel at
// fd 3, so the server keeps one resolver warm and `run start` needs no Node start-up. Its last
// answer before it retires (an import or request quota below) also carries `retiring: true`.
// Listing (workflow-list.ts): `--list --project <dir> [--offset N] [--limit N]`, or served
// `{id, list: {project, offset, limit, budgetMs?}}`, answers one page of the discoverable
// workflows with their titles (`workflow.list`).
import path from "node:path";
import { canonicalDigest, canonicalJson, toJsonValue } from "./canonical.js";
import { WorkflowError } from "./errors.js";
import { LoadedWorkflowCache } from "./loaded-cache.js";
import { loadWorkflowFile, resolveWorkflowFile, type LoadedWorkflow, type ResolvedTarget } from "./loader.js";
import { FrameChannel } from "./runner/channel.js";
import { listRequestOf, listWorkflowPage } from "./workflow-list.js";

function parseArgs(argv: string[]): { target: string; project: string; inputJson?: string } {
  let target: string | undefined;
  let project: string | undefined;
  let inputJson: string | undefined;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg === "--project" || arg === "--input-json") {
      const value = argv[++i];
      if (value === undefined) throw new WorkflowError("invalidArguments", `${arg} needs a value`);
      if (arg === "--project") project = value;
      else inputJson = value;
    } else if (target === undefined && !arg.startsWith("--")) {
      target = arg;
    } else {
      throw new WorkflowError("invalidArguments", `unexpected argument ${JSON.stringify(arg)}`);
    }
  }
  if (!target) throw new WorkflowError("invalidArguments", "usage: resolver-main.js <name-or-path> --project <dir> [--input-json J]");
  return { target, project: path.resolve(project ?? process.cwd()), inputJson };
}

interface ResolveArgs {
  target: string;
  project: string;
  inputJson?: string;
}

/** Discovery runs every time; the load is reused only for byte-identical sources (served). */
async function load(args: ResolveArgs, cache?: LoadedWorkflowCache): Promise<{ loaded: LoadedWorkflow; file: ResolvedTarget }> {
  const file = await resolveWorkflowFile(args.target, args.project);
  const cached = await cache?.lookup(file.path);
  if (cached) return { loaded: { ...cached, name: file.name }, file };
  const loaded = await loadWorkflowFile(file.path, file.name);
  cache?.remember(loaded);
  return { loaded, file };
}

async function resolve(args: ResolveArgs, cache?: LoadedWorkflowCache): Promise<unknown> {
  let raw: unknown = {};
  if (args.inputJson !== undefined) {
    try {
      raw = JSON.parse(args.inputJson);
    } catch (error) {
      throw new WorkflowError("invalidInput", `--input-json is not JSON: ${(error as Error).message}`);
    }
  }
  const { loaded, file } = await load(args, cache);
  let input: unknown;
  try {
    input = toJsonValue(loaded.definition.input ? loaded.definition.input(raw) : raw);
  } catch (error) {
    throw new WorkflowError("invalidInput", `workflow "${loaded.name}" rejected its input: ${(error as Error)?.message ?? error}`);
  }
  return {
    name: loaded.name,
    workflowSource: loaded.source,
    definitionDigest: loaded.compiled.definitionDigest,
    snapshot: loaded.compiled.snapshot,
    input,
    inputHash: canonicalDigest(input),
    // Without an input normalizer no workflow code ran for this answer: it follows from the
    // sources above, the discovery looks below and the raw input alone, so the server may
    // give it again while those hold (src/server/resolvers/reuse.rs). A normalizer may read
    // the clock, a file or git, so its answers are never reused.
    ...(loaded.definition.input ? {} : { reuse: { candidate: file.candidate, shadows: file.shadows } }),
  };
}

/** Stdout carries exactly one JSON line: workflow code's console output goes to stderr. */
function keepStdoutForTheAnswer() {
  for (const method of ["log", "info", "debug"] as const) console[method] = console.error;
}

function errorOf(error: unknown): { code: string; message: string } {
  const code = error instanceof WorkflowError ? error.code : "invalidDefinition";
  return { code, message: (error as Error)?.message ?? String(error) };
}

/** The one-shot `--list` form's request. */
function parseListArgs(argv: string[]): Record<string, unknown> {
  const fields: Record<string, unknown> = { project: process.cwd() };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg === "--list") continue;
    const value = argv[i + 1];
    if (!["--project", "--offset", "--limit"].includes(arg)) {
      throw new WorkflowError("invalidArguments", `unexpected argument ${JSON.stringify(arg)}; usage: resolver-main.js --list [--project <dir>] [--offset N] [--limit N]`);
    }
    if (value === undefined) throw new WorkflowError("invalidArguments", `${arg} needs a value`);
    i += 1;
    if (arg === "--project") fields.project = path.resolve(value);
    else fields[arg.slice(2)] = /^\d+$/.test(value) ? Number(value) : value;
  }
  return fields;
}

async function once(): Promise<void> {
  let line: string;
  let code = 0;
  try {
    const argv = process.argv.slice(2);
    const answer = argv.includes("--list") ? await listWorkflowPage(listRequestOf(parseListArgs(argv))) : await resolve(parseArgs(argv));
    line = canonicalJson(answer);
  } catch (error) {
    line = canonicalJson({ error: errorOf(error) });
    code = 2;
  }
  // Exit explicitly: timers left by workflow code must not keep the resolver alive.
  process.stdout.write(line + "\n", () => process.exit(code));
}

/** A served resolver exits after this many imports: every workflow version it imported stays
 * in memory (the cache drops only its reference), so it is replaced before that grows. */
const SERVED_IMPORTS_MAX = 64;
/** ...and after this many requests whatever they were, so nothing else can grow unbounded. */
const SERVED_REQUESTS_MAX = 4096;

async function serve(): Promise<void> {
  const channel = FrameChannel.fromFd(3);
  const cache = new LoadedWorkflowCache();
  for (let served = 0; served < SERVED_REQUESTS_MAX && cache.misses < SERVED_IMPORTS_MAX; served += 1) {
    let request: Record<string, unknown>;
    try {
      request = await channel.readFrame();
    } catch {
      break; // the server closed the channel (it stopped or replaced this resolver)
    }
    const id = request.id;
    let reply: Record<string, unknown>;
    try {
      if (request.list !== undefined) {
        // A listing, not a resolution: the resolve request's form stays as it is.
        const fields = request.list;
        if (!fields || typeof fields !== "object" || Array.isArray(fields)) {
          throw new WorkflowError("invalidArguments", "a list request is {id, list: {project, offset?, limit?, budgetMs?}}");
        }
        reply = { id, answer: await listWorkflowPage(listRequestOf(fields as Record<string, unknown>)) };
      } else {
        reply = { id, answer: await resolve(servedArgs(request), cache) };
      }
    } catch (error) {
      reply = { id, error: errorOf(error) };
    }
    // The last answer says so: the server replaces this process at once instead of taking
    // its exit for a crash.
    if (served + 1 >= SERVED_REQUESTS_MAX || cache.misses >= SERVED_IMPORTS_MAX) reply.retiring = true;
    await channel.writeFrame(reply);
  }
  // Its last answer must leave before the exit.
  await channel.end();
  process.exit(0);
}

function servedArgs(request: Record<string, unknown>): ResolveArgs {
  const { target, project, inputJson } = request;
  if (typeof target !== "string" || typeof project !== "string" || !path.isAbsolute(project)) {
    throw new WorkflowError("invalidArguments", "a resolve request needs target and an absolute project");
  }
  if (inputJson !== undefined && typeof inputJson !== "string") {
    throw new WorkflowError("invalidArguments", "inputJson must be a string of JSON");
  }
  return { target, project, inputJson };
}

keepStdoutForTheAnswer();
if (process.argv.includes("--serve")) await serve();
else await once();
