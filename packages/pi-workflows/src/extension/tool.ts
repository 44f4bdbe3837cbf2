// The model-facing `workflow` tool: one flat object schema with an `action` enum (strict
// providers reject a top-level union; an earlier implementation broke every request of one
// provider that way), and per-action validation in the handler with at most
// TOOL_ERRORS_MAX readable errors. Validation is pure, so it is tested without Pi.
import { canonicalJson } from "../canonical.js";

export const TOOL_ACTIONS = [
  "list",
  "start",
  "status",
  "pause",
  "resume",
  "cancel",
  "restart",
  "answer",
  "update",
  "submit",
  "change-settings",
  "queue-follow-up",
  "remove-follow-up",
  "read-step",
] as const;
export type ToolAction = (typeof TOOL_ACTIONS)[number];

/** Errors one refused call lists, at most (the rest are counted). */
export const TOOL_ERRORS_MAX = 3;
/** The largest value (output, input, answer) one call may carry, canonical JSON bytes (the server's submission limit). */
export const TOOL_VALUE_BYTES_MAX = 256 * 1024;
/** An update's data, at most (the server's limit). */
export const UPDATE_DATA_BYTES_MAX = 64 * 1024;
/** A follow-up prompt, at most (the server's limit). */
export const FOLLOW_UP_BYTES_MAX = 64 * 1024;
/** Operations in one settings patch, at most (the server's limit). */
export const PATCH_OPERATIONS_MAX = 256;
/** A workflow name or path, at most. */
export const WORKFLOW_TARGET_BYTES_MAX = 4096;

const ID = /^[A-Za-z0-9._:@|+=~-]{1,256}$/;

/** Fields each action takes; `required` ones must be present. */
const FIELDS: Readonly<Record<ToolAction, { required: readonly string[]; optional: readonly string[] }>> = {
  list: { required: [], optional: ["offset"] },
  start: { required: ["workflow"], optional: ["input"] },
  status: { required: [], optional: ["runId"] },
  pause: { required: [], optional: ["runId"] },
  resume: { required: [], optional: ["runId"] },
  cancel: { required: [], optional: ["runId"] },
  restart: { required: [], optional: ["runId"] },
  answer: { required: ["input"], optional: ["runId", "requestId"] },
  update: { required: ["requestId", "update"], optional: ["runId"] },
  submit: { required: ["requestId", "output"], optional: ["runId"] },
  "change-settings": { required: ["patch"], optional: ["runId", "expectedChangeNumber"] },
  "queue-follow-up": { required: ["prompt"], optional: ["runId"] },
  "remove-follow-up": { required: ["followUpId"], optional: ["runId"] },
  "read-step": { required: ["requestId"], optional: ["runId", "offset"] },
};
const ALL_FIELDS = ["action", "workflow", "input", "runId", "requestId", "output", "update", "patch", "expectedChangeNumber", "prompt", "followUpId", "offset"];

/** The tool's parameters: ONE flat object (no top-level anyOf/oneOf), every field but `action` optional. */
export const TOOL_PARAMETERS = Object.freeze({
  type: "object",
  properties: {
    action: { type: "string", enum: [...TOOL_ACTIONS], description: "What to do." },
    workflow: { type: "string", description: "start: the workflow's name or path." },
    input: { description: "start: the run's input (JSON). answer: the checkpoint's answer (JSON)." },
    runId: { type: "string", description: "The run (default: this session's run)." },
    requestId: { type: "string", description: "submit/update/answer/read-step: the requestId the step message names." },
    output: { description: "submit: the step's output (JSON), as the step's expected output says." },
    update: {
      type: "object",
      description: "update: progress for the open step, {type, key, data}.",
      properties: { type: { type: "string" }, key: { type: "string" }, data: {} },
    },
    patch: { type: "array", items: { type: "object" }, description: "change-settings: a JSON Patch (RFC 6902)." },
    expectedChangeNumber: { type: "integer", description: "change-settings: refuse when the settings changed since this number." },
    prompt: { type: "string", description: "queue-follow-up: the prompt to run after the workflow completes." },
    followUpId: { type: "string", description: "remove-follow-up: the follow-up to remove." },
    offset: { type: "integer", description: "list: where the page starts. read-step: the character to read from." },
  },
  required: ["action"],
  additionalProperties: false,
});

export type ToolParams = Record<string, unknown> & { action: ToolAction };

export class ToolInputError extends Error {
  constructor(readonly errors: readonly string[]) {
    super(formatErrors(errors));
    this.name = "ToolInputError";
  }
}

function formatErrors(errors: readonly string[]): string {
  const shown = errors.slice(0, TOOL_ERRORS_MAX).map((error) => `- ${error}`);
  if (errors.length > TOOL_ERRORS_MAX) shown.push(`- and ${errors.length - TOOL_ERRORS_MAX} more`);
  return `The workflow tool call was refused and changed nothing:\n${shown.join("\n")}`;
}

function jsonBytes(value: unknown): number | undefined {
  try {
    return Buffer.byteLength(canonicalJson(value));
  } catch {
    return undefined;
  }
}

/** Check one call's parameters; throws ToolInputError listing at most TOOL_ERRORS_MAX problems. */
export function validateToolParams(raw: unknown): ToolParams {
  const errors: string[] = [];
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new ToolInputError(["the arguments must be a JSON object with an action"]);
  const params = raw as Record<string, unknown>;
  const action = params.action;
  if (typeof action !== "string" || !(TOOL_ACTIONS as readonly string[]).includes(action)) {
    throw new ToolInputError([`action must be one of: ${TOOL_ACTIONS.join(", ")}`]);
  }
  const spec = FIELDS[action as ToolAction];
  const allowed = new Set(["action", ...spec.required, ...spec.optional]);
  for (const key of Object.keys(params)) {
    if (!ALL_FIELDS.includes(key)) errors.push(`unknown field "${key.slice(0, 40)}"`);
    else if (!allowed.has(key) && params[key] !== undefined) errors.push(`${action} does not take "${key}" (it takes ${[...spec.required, ...spec.optional].join(", ") || "nothing"})`);
  }
  for (const key of spec.required) if (params[key] === undefined) errors.push(`${action} needs "${key}"`);
  const id = (key: string) => {
    const value = params[key];
    if (value !== undefined && (typeof value !== "string" || !ID.test(value))) errors.push(`${key} must be an ID (1 to 256 letters, digits and ._:@|+=~-)`);
  };
  id("runId");
  id("requestId");
  id("followUpId");
  const value = (key: string, max: number) => {
    if (params[key] === undefined) return;
    const bytes = jsonBytes(params[key]);
    if (bytes === undefined) errors.push(`${key} must be a JSON value`);
    else if (bytes > max) errors.push(`${key} is ${bytes} bytes of JSON, above the ${max}-byte limit; send less (a summary, or a file path)`);
  };
  value("output", TOOL_VALUE_BYTES_MAX);
  value("input", TOOL_VALUE_BYTES_MAX);
  if (params.workflow !== undefined && (typeof params.workflow !== "string" || params.workflow.length === 0 || Buffer.byteLength(params.workflow) > WORKFLOW_TARGET_BYTES_MAX)) {
    errors.push(`workflow must be a name or path of 1 to ${WORKFLOW_TARGET_BYTES_MAX} bytes`);
  }
  if (params.update !== undefined) {
    const update = params.update as Record<string, unknown> | null;
    if (update === null || typeof update !== "object" || Array.isArray(update)) errors.push("update must be an object {type, key, data}");
    else {
      if (typeof update.type !== "string" || !/^[a-z][a-z0-9.-]{0,63}$/.test(update.type)) errors.push("update.type must match [a-z][a-z0-9.-]{0,63}");
      if (typeof update.key !== "string" || !/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/.test(update.key)) errors.push("update.key must match [A-Za-z0-9][A-Za-z0-9._:/-]{0,127}");
      const bytes = jsonBytes(update.data);
      if (update.data === undefined || bytes === undefined) errors.push("update.data must be a JSON value");
      else if (bytes > UPDATE_DATA_BYTES_MAX) errors.push(`update.data is ${bytes} bytes, above the ${UPDATE_DATA_BYTES_MAX}-byte limit`);
    }
  }
  if (params.patch !== undefined) {
    if (!Array.isArray(params.patch) || params.patch.length === 0 || params.patch.some((op) => op === null || typeof op !== "object" || Array.isArray(op))) {
      errors.push("patch must be a non-empty array of JSON Patch operations ({op, path, value?})");
    } else if (params.patch.length > PATCH_OPERATIONS_MAX) errors.push(`patch has ${params.patch.length} operations, above ${PATCH_OPERATIONS_MAX}`);
  }
  const integer = (key: string) => {
    const v = params[key];
    if (v !== undefined && (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0)) errors.push(`${key} must be a whole number ≥ 0`);
  };
  integer("expectedChangeNumber");
  integer("offset");
  if (params.prompt !== undefined) {
    if (typeof params.prompt !== "string" || params.prompt.trim() === "") errors.push("prompt must be non-empty text");
    else if (Buffer.byteLength(params.prompt) > FOLLOW_UP_BYTES_MAX) errors.push(`prompt is above ${FOLLOW_UP_BYTES_MAX} bytes`);
  }
  if (errors.length > 0) throw new ToolInputError(errors);
  return params as ToolParams;
}

/** The idempotency key of a tool call: its call ID, made an ID when a provider's is not one. */
export function idempotencyKeyOf(toolCallId: string): string {
  const key = `tool:${toolCallId}`;
  if (ID.test(key)) return key;
  // A provider ID with other characters: a stable digest of it (the same call, the same key).
  let hash = 0x811c9dc5;
  for (let i = 0; i < toolCallId.length; i++) hash = Math.imul(hash ^ toolCallId.charCodeAt(i), 0x01000193) >>> 0;
  return `tool:${hash.toString(16)}:${toolCallId.replace(/[^A-Za-z0-9._:@|+=~-]/g, "").slice(0, 200) || "x"}`;
}

export const TOOL_DESCRIPTION = [
  "Work with pi-workflows durable workflows in this session.",
  "A workflow step arrives as a message that names a requestId and the expected output: do the work, then call this tool with action \"submit\", that requestId and the output.",
  "A rejected submission explains why; fix the output and submit again with the same requestId.",
  "After an accepted submission, end your turn: the next step arrives only once your turn has ended (never wait, sleep or poll inside your turn).",
  "Other actions: list, start {workflow, input?}, status, pause, resume, cancel, restart, answer {input} (checkpoints only; decisions are answered by a person), update {requestId, update:{type,key,data}}, change-settings {patch}, queue-follow-up {prompt}, remove-follow-up {followUpId}, read-step {requestId, offset} (the rest of a step prompt that was cut).",
  "When the user asks to continue or resume a workflow, call resume at once (not status).",
].join(" ");
