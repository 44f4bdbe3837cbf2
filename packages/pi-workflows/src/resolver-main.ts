// Source resolver child: `node dist/resolver-main.js <name-or-path> --project <dir> [--input-json J]`.
// Prints one JSON line: the workflow's source identity, definition digest, snapshot and normalized
// input; or `{ "error": { code, message } }` with exit code 2.
import path from "node:path";
import { canonicalDigest, canonicalJson, toJsonValue } from "./canonical.js";
import { WorkflowError } from "./errors.js";
import { loadWorkflow } from "./loader.js";

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

async function resolve(argv: string[]): Promise<unknown> {
  const args = parseArgs(argv);
  let raw: unknown = {};
  if (args.inputJson !== undefined) {
    try {
      raw = JSON.parse(args.inputJson);
    } catch (error) {
      throw new WorkflowError("invalidInput", `--input-json is not JSON: ${(error as Error).message}`);
    }
  }
  const loaded = await loadWorkflow(args.target, args.project);
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
  };
}

/** Stdout carries exactly one JSON line: workflow code's console output goes to stderr. */
function keepStdoutForTheAnswer() {
  for (const method of ["log", "info", "debug"] as const) console[method] = console.error;
}

async function main() {
  keepStdoutForTheAnswer();
  let line: string;
  let code = 0;
  try {
    line = canonicalJson(await resolve(process.argv.slice(2)));
  } catch (error) {
    const errorCode = error instanceof WorkflowError ? error.code : "invalidDefinition";
    line = canonicalJson({ error: { code: errorCode, message: (error as Error)?.message ?? String(error) } });
    code = 2;
  }
  // Exit explicitly: timers left by workflow code must not keep the resolver alive.
  process.stdout.write(line + "\n", () => process.exit(code));
}

await main();
