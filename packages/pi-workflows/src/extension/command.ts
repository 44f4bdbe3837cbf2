// `/workflow` argument parsing and completion (pure: tested without Pi).
import type { PiAutocompleteItem } from "./pi-types.js";

export const SUBCOMMANDS = [
  ["list", "list the workflows of this project and global ones: list [offset]"],
  ["start", "start an interactive run here: start <name|path> [task text] [--input-json JSON]"],
  ["status", "show a run: status [runId]"],
  ["pause", "pause the run: pause [runId]"],
  ["resume", "resume the run: resume [runId]"],
  ["cancel", "cancel the run: cancel [runId]"],
  ["clear", "remove an ended run from this session's widget"],
  ["restart", "start an ended run again: restart [runId]"],
  ["answer", "answer a checkpoint or a decision: answer [runId] <json|text>"],
  ["change-settings", "change settings: change-settings [runId] <JSON Patch> [--expect N]"],
  ["queue-follow-up", "run a prompt after the workflow completes: queue-follow-up <prompt>"],
  ["remove-follow-up", "remove a queued follow-up: remove-follow-up <followUpId>"],
] as const;
export type Subcommand = (typeof SUBCOMMANDS)[number][0];

/** Completions offered at once, at most. */
export const COMPLETIONS_MAX = 50;
/** Bytes of a command's arguments, at most (a JSON answer or patch included). */
export const COMMAND_ARGS_BYTES_MAX = 256 * 1024;

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

export type Parsed =
  | { sub: "list"; offset: number }
  | { sub: "start"; workflow: string; input?: unknown }
  | { sub: "status" | "pause" | "resume" | "cancel" | "restart"; runId?: string }
  | { sub: "clear" }
  | { sub: "answer"; runId?: string; answer: unknown }
  | { sub: "change-settings"; runId?: string; patch: unknown[]; expect?: number }
  | { sub: "queue-follow-up"; prompt: string }
  | { sub: "remove-follow-up"; followUpId: string };

const RUN_ID = /^run-[A-Za-z0-9._:@|+=~-]+$/;
const usage = (sub: Subcommand) => SUBCOMMANDS.find(([name]) => name === sub)?.[1] ?? "";

function splitFirst(text: string): [string, string] {
  const trimmed = text.trimStart();
  const space = trimmed.search(/\s/);
  return space < 0 ? [trimmed, ""] : [trimmed.slice(0, space), trimmed.slice(space).trim()];
}

function json(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(`${what} is not JSON`);
  }
}

/** An optional leading run ID (`run-…`). */
function takeRunId(rest: string): [string | undefined, string] {
  const [first, after] = splitFirst(rest);
  return RUN_ID.test(first) ? [first, after] : [undefined, rest];
}

export function parseCommand(args: string): Parsed {
  if (Buffer.byteLength(args) > COMMAND_ARGS_BYTES_MAX) throw new UsageError(`the arguments are above ${COMMAND_ARGS_BYTES_MAX} bytes`);
  const [sub, rest] = splitFirst(args.trim());
  switch (sub) {
    case "":
    case "list": {
      if (rest === "") return { sub: "list", offset: 0 };
      const offset = Number(rest);
      if (!Number.isSafeInteger(offset) || offset < 0) throw new UsageError(`usage: /workflow ${usage("list")}`);
      return { sub: "list", offset };
    }
    case "start": {
      if (rest === "") throw new UsageError(`usage: /workflow ${usage("start")}`);
      const flag = rest.search(/(^|\s)--input-json(\s|$)/);
      const before = flag < 0 ? rest : rest.slice(0, flag).trim();
      const inputJson = flag < 0 ? undefined : rest.slice(flag).trim().replace(/^--input-json/, "").trim();
      const [workflow, task] = splitFirst(before);
      if (workflow === "") throw new UsageError(`usage: /workflow ${usage("start")}`);
      if (inputJson !== undefined && task !== "") throw new UsageError("give either task text or --input-json, not both");
      if (inputJson !== undefined) {
        if (inputJson === "") throw new UsageError("--input-json needs a JSON value");
        return { sub: "start", workflow, input: json(inputJson, "--input-json") };
      }
      return task === "" ? { sub: "start", workflow } : { sub: "start", workflow, input: { task } };
    }
    case "status":
    case "pause":
    case "resume":
    case "cancel":
    case "restart": {
      if (rest === "") return { sub };
      if (!RUN_ID.test(rest)) throw new UsageError(`usage: /workflow ${usage(sub)} (a run ID looks like run-…)`);
      return { sub, runId: rest };
    }
    case "clear":
      return { sub: "clear" };
    case "answer": {
      const [runId, text] = takeRunId(rest);
      if (text === "") throw new UsageError(`usage: /workflow ${usage("answer")}`);
      // JSON when it is JSON; otherwise the text itself (a decision's choice, or free text).
      let answer: unknown = text;
      if (/^[[{"]|^(true|false|null|-?\d)/.test(text)) {
        try {
          answer = JSON.parse(text);
        } catch {
          answer = text;
        }
      }
      return { sub: "answer", ...(runId ? { runId } : {}), answer };
    }
    case "change-settings": {
      const [runId, after] = takeRunId(rest);
      const expectAt = after.search(/\s--expect\s+\d+\s*$/);
      const patchText = expectAt < 0 ? after : after.slice(0, expectAt);
      const expect = expectAt < 0 ? undefined : Number(after.slice(expectAt).replace(/\s*--expect\s+/, ""));
      if (patchText.trim() === "") throw new UsageError(`usage: /workflow ${usage("change-settings")}`);
      const patch = json(patchText, "the patch");
      if (!Array.isArray(patch)) throw new UsageError('the patch must be a JSON array like [{"op":"replace","path":"/mode","value":"fast"}]');
      return { sub: "change-settings", ...(runId ? { runId } : {}), patch, ...(expect !== undefined ? { expect } : {}) };
    }
    case "queue-follow-up":
      if (rest === "") throw new UsageError(`usage: /workflow ${usage("queue-follow-up")}`);
      return { sub: "queue-follow-up", prompt: rest };
    case "remove-follow-up":
      if (rest === "" || /\s/.test(rest)) throw new UsageError(`usage: /workflow ${usage("remove-follow-up")}`);
      return { sub: "remove-follow-up", followUpId: rest };
    default:
      throw new UsageError(`unknown /workflow subcommand "${sub.slice(0, 40)}"; one of: ${SUBCOMMANDS.map(([name]) => name).join(", ")}`);
  }
}

/** Completions for the text after `/workflow `. */
export function completions(prefix: string, known: { workflows: readonly string[]; runIds: readonly string[] }): PiAutocompleteItem[] | null {
  const [sub, rest] = splitFirst(prefix);
  const hasSpace = /\s/.test(prefix.trimStart());
  if (!hasSpace) {
    const items = SUBCOMMANDS.filter(([name]) => name.startsWith(sub)).map(([name, description]) => ({ value: name, label: name, description }));
    return items.length > 0 ? items : null;
  }
  const pick = (values: readonly string[]) => {
    const items = values
      .filter((value) => value.startsWith(rest))
      .slice(0, COMPLETIONS_MAX)
      .map((value) => ({ value: `${sub} ${value}`, label: value }));
    return items.length > 0 ? items : null;
  };
  if (sub === "start" && !/\s/.test(rest)) return pick(known.workflows);
  if (["status", "pause", "resume", "cancel", "restart", "answer", "change-settings"].includes(sub) && !/\s/.test(rest)) return pick(known.runIds);
  return null;
}
