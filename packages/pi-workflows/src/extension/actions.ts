// What `/workflow` and the `workflow` tool do, as client.v1 requests. Both surfaces share
// these functions; they differ only in who acts (a person's command, or the model with the
// session's coordinator authority) and in how results are shown.
import { randomBytes } from "node:crypto";
import { ClientError, type WorkflowClient } from "../client/client.js";
import type { JsonObject, Operation } from "../client/protocol.js";
import type { SessionView } from "./session-view.js";

/** Workflows one list page shows (the server's page limit). */
export const LIST_PAGE_SIZE = 50;
/** Characters of one answer shown back, at most. */
export const RESULT_TEXT_CHARS_MAX = 4_000;
/** Retries of a submission the server answered `runBusy` (a runner is checking another one). */
export const RUN_BUSY_RETRIES = 5;
export const RUN_BUSY_WAIT_MS = 1_000;

export interface ActionContext {
  client: WorkflowClient;
  sessionId: string;
  cwd: string;
  view?: SessionView;
  /** The active coordinator epoch of this session, if this process holds it. */
  epoch?: number;
  idempotencyKey: string;
}

export class ActionError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ActionError";
  }
}

const isObject = (value: unknown): value is JsonObject => value !== null && typeof value === "object" && !Array.isArray(value);

export function newRunId(): string {
  return `run-${Math.floor(Date.now() / 1000).toString(16)}-${randomBytes(6).toString("hex")}`;
}

function bounded(text: string): string {
  return text.length <= RESULT_TEXT_CHARS_MAX ? text : `${text.slice(0, RESULT_TEXT_CHARS_MAX)}…`;
}

/** The run an action means: the one named, else the session's active (or retained) run. */
export function targetRun(ctx: Pick<ActionContext, "view">, runId: unknown, allowRetained = true): string {
  if (typeof runId === "string" && runId !== "") return runId;
  const run = ctx.view?.activeRun ?? (allowRetained ? ctx.view?.retainedTerminal : undefined);
  if (!run) throw new ActionError("noRun", "this session has no workflow run; name one with its runId, or start one with /workflow start <name>");
  return run.runId;
}

async function call(ctx: ActionContext, operation: Operation, runId: string | undefined, payload: JsonObject): Promise<JsonObject> {
  try {
    return await ctx.client.call(operation, { ...(runId !== undefined ? { runId } : {}), payload, idempotencyKey: ctx.idempotencyKey });
  } catch (error) {
    if (error instanceof ClientError) throw new ActionError(error.code, error.message);
    throw error;
  }
}

/** The coordinator authority a model-side submission carries (the server checks it). */
function coordinator(ctx: ActionContext): JsonObject {
  if (ctx.epoch === undefined) {
    throw new ActionError(
      "coordinatorRequired",
      "this Pi process does not coordinate this session right now (not connected, or another Pi process on this session took over); wait a moment and submit again with the same requestId",
    );
  }
  return { sessionId: ctx.sessionId, epoch: ctx.epoch };
}

/** A submission the server may answer `runBusy`: retried a bounded number of times with the same key. */
async function submitting(ctx: ActionContext, operation: Operation, runId: string, payload: JsonObject): Promise<JsonObject> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call(ctx, operation, runId, payload);
    } catch (error) {
      if (!(error instanceof ActionError) || error.code !== "runBusy" || attempt >= RUN_BUSY_RETRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, RUN_BUSY_WAIT_MS));
    }
  }
}

/** The run that holds a request: the message that named it, else the active run. */
function runOfRequest(ctx: ActionContext, requestId: string, runId: unknown): string {
  if (typeof runId === "string" && runId !== "") return runId;
  const message = ctx.view?.messages.find((m) => m.sourceId === requestId);
  if (message?.runId) return message.runId;
  // The step's run (active, or ended moments ago): the server says what became of the step.
  const run = ctx.view?.activeRun ?? ctx.view?.retainedTerminal;
  if (!run) {
    throw new ActionError("stepClosed", `step ${requestId} is no longer open in this session (its run ended or went on without it); nothing was submitted. End your turn.`);
  }
  return run.runId;
}

export async function listWorkflows(ctx: ActionContext, offset = 0): Promise<{ text: string; names: string[]; receipt: JsonObject }> {
  const receipt = await call(ctx, "workflow.list", undefined, { projectPath: ctx.cwd, offset, limit: LIST_PAGE_SIZE });
  const workflows = Array.isArray(receipt.workflows) ? receipt.workflows.filter(isObject) : [];
  const names = workflows.map((w) => String(w.name ?? ""));
  const lines = workflows.map((w) => {
    const error = isObject(w.loadError) ? ` (does not load: ${String(w.loadError.message ?? w.loadError.code ?? "")})` : "";
    return `${String(w.name)}  [${String(w.scope ?? "?")}]${w.title ? `  ${String(w.title)}` : ""}${error}`;
  });
  if (lines.length === 0) lines.push(`no workflows found (looked in ${Array.isArray(receipt.directories) ? receipt.directories.join(", ") : ".pi/workflows and ~/.pi/agent/workflows"})`);
  if (typeof receipt.nextOffset === "number") lines.push(`more: /workflow list ${receipt.nextOffset}`);
  return { text: bounded(lines.join("\n")), names, receipt };
}

export async function startRun(ctx: ActionContext, workflow: string, input: unknown): Promise<{ text: string; runId: string }> {
  const runId = newRunId();
  const payload: JsonObject = {
    workflow,
    projectPath: ctx.cwd,
    executionMode: "interactive",
    originSessionId: ctx.sessionId,
  };
  if (input !== undefined) payload.inputJson = JSON.stringify(input);
  const receipt = await call(ctx, "run.start", runId, payload);
  const id = typeof receipt.runId === "string" ? receipt.runId : runId;
  return { text: `started ${String(receipt.workflowName ?? workflow)} as run ${id}; its steps arrive in this conversation`, runId: id };
}

export async function runStatus(ctx: ActionContext, runId: unknown): Promise<string> {
  const id = targetRun(ctx, runId);
  const receipt = await call(ctx, "run.status", id, {});
  return bounded(`run ${id}: ${JSON.stringify(receipt)}`);
}

export async function control(ctx: ActionContext, action: "pause" | "resume" | "cancel", runId: unknown): Promise<string> {
  const id = targetRun(ctx, runId);
  // Cancelling a run that already ended only clears it from this session's view.
  if (action === "cancel" && ctx.view?.retainedTerminal?.runId === id && !ctx.view.activeRun) {
    const cleared = await clearTerminal(ctx);
    return cleared ? `run ${id} had already ended; it is cleared from this session` : `run ${id} had already ended`;
  }
  const receipt = await call(ctx, `run.${action}` as Operation, id, {});
  return `${action} of run ${id}: done (revision ${String(receipt.revision ?? "?")})`;
}

export async function restartRun(ctx: ActionContext, runId: unknown): Promise<string> {
  const id = targetRun(ctx, runId);
  const newRunIdValue = newRunId();
  const receipt = await call(ctx, "run.restart", id, { newRunId: newRunIdValue });
  return `restarted run ${id} as ${String(receipt.runId ?? newRunIdValue)}`;
}

export async function clearTerminal(ctx: ActionContext): Promise<boolean> {
  const receipt = await call(ctx, "sessionView.clearTerminal", undefined, { sessionId: ctx.sessionId });
  return receipt.cleared === true;
}

/** A person's answer: the pending checkpoint's (`checkpoint.answer`) or protected decision's (`decision.answer`). */
export async function personAnswer(ctx: ActionContext, runId: unknown, answer: unknown): Promise<string> {
  const id = targetRun(ctx, runId, false);
  const request = ctx.view?.activeRun?.runId === id && isObject(ctx.view.activeRun.display.request) ? ctx.view.activeRun.display.request : undefined;
  const requestId = typeof request?.requestId === "string" ? request.requestId : undefined;
  const kind = request?.kind;
  if (kind === "decision") {
    const receipt = await call(ctx, "decision.answer", id, { answer: decisionResponse(answer), ...(requestId ? { requestId } : {}) });
    return `decision of run ${id} answered: ${typeof receipt.choice === "string" ? receipt.choice : "accepted"}; the workflow goes on`;
  }
  const payload: JsonObject = { answer: answer as JsonObject, ...(requestId ? { requestId } : {}) };
  return continued(id, await call(ctx, "checkpoint.answer", id, payload));
}

/**
 * A decision answer as typed: `<choice> [text]` (the text is the rest of the line), or an
 * object `{choice, text?}` as JSON. The server checks it against the declared choices.
 */
function decisionResponse(answer: unknown): JsonObject {
  if (isObject(answer)) return answer as JsonObject;
  const typed = String(answer ?? "").trim();
  const space = typed.search(/\s/);
  if (space < 0) return { choice: typed };
  const text = typed.slice(space).trim();
  return { choice: typed.slice(0, space), ...(text !== "" ? { text } : {}) };
}

/** An answered checkpoint settles its run; a continuation run goes on from it. */
function continued(runId: string, receipt: JsonObject): string {
  const next = typeof receipt.continuationRunId === "string" ? receipt.continuationRunId : undefined;
  return next ? `checkpoint of run ${runId} answered; the workflow continues as run ${next}` : `checkpoint of run ${runId} answered`;
}

/** The model's answer: checkpoints only (a protected decision is a person's). */
export async function modelAnswer(ctx: ActionContext, runId: unknown, requestId: unknown, input: unknown): Promise<string> {
  const id = targetRun(ctx, runId, false);
  const request = ctx.view?.activeRun?.runId === id && isObject(ctx.view.activeRun.display.request) ? ctx.view.activeRun.display.request : undefined;
  if (request?.kind === "decision") {
    throw new ActionError("decisionForPerson", "this is a protected decision: only a person answers it, with /workflow answer. Tell the user and end your turn.");
  }
  const payload: JsonObject = { answer: input as JsonObject };
  const named = typeof requestId === "string" ? requestId : typeof request?.requestId === "string" ? request.requestId : undefined;
  if (named) payload.requestId = named;
  return `${continued(id, await call(ctx, "checkpoint.answer", id, payload))}; end your turn now`;
}

/** Characters of a step's prompt one `read-step` call returns, at most (16 KiB of ASCII). */
export const STEP_READ_CHARS_MAX = 16 * 1024;

/**
 * `read-step`: the step prompt the server stores whole, from `offset` (characters), at most
 * STEP_READ_CHARS_MAX of it — how the model reads the rest of a prompt that was cut.
 */
export async function readStep(ctx: ActionContext, requestId: string, runId: unknown, offset: number): Promise<string> {
  const id = runOfRequest(ctx, requestId, runId);
  const receipt = await call(ctx, "run.status", id, { includeResult: true });
  const contract = isObject(receipt.request) ? receipt.request : undefined;
  const pending = isObject(receipt.pendingRequest) ? receipt.pendingRequest.requestId : undefined;
  if (!contract || pending !== requestId || typeof contract.prompt !== "string") {
    throw new ActionError("stepClosed", `step ${requestId} is not open in run ${id}; nothing to read. End your turn.`);
  }
  const prompt = contract.prompt;
  const start = Math.min(offset, prompt.length);
  const end = Math.min(prompt.length, start + STEP_READ_CHARS_MAX);
  const more = end < prompt.length ? `; more: {"action": "read-step", "requestId": "${requestId}", "offset": ${end}}` : "; that is the end";
  return `${prompt.slice(start, end)}\n[characters ${start} to ${end} of ${prompt.length}${more}]`;
}

export async function submit(ctx: ActionContext, requestId: string, runId: unknown, output: unknown): Promise<JsonObject> {
  const id = runOfRequest(ctx, requestId, runId);
  return submitting(ctx, "interaction.submit", id, { output: output as JsonObject, requestId, coordinator: coordinator(ctx) });
}

export async function update(ctx: ActionContext, requestId: string, runId: unknown, value: JsonObject): Promise<JsonObject> {
  const id = runOfRequest(ctx, requestId, runId);
  return call(ctx, "interaction.update", id, { update: value, requestId, coordinator: coordinator(ctx) });
}

export async function submitAssistant(ctx: ActionContext, runId: string, requestId: string, text: string): Promise<JsonObject> {
  return submitting(ctx, "interaction.assistant", runId, { text, requestId, coordinator: coordinator(ctx) });
}

export async function changeSettings(ctx: ActionContext, runId: unknown, patch: unknown, expected: unknown, actor: "human" | "session"): Promise<string> {
  const id = targetRun(ctx, runId, false);
  const payload: JsonObject = { patch: patch as JsonObject[], actor };
  if (typeof expected === "number") payload.expectedChangeNumber = expected;
  const receipt = await call(ctx, "run.changeSettings", id, payload);
  return `settings of run ${id} changed (change ${String(receipt.changeNumber ?? "?")})`;
}

export async function queueFollowUp(ctx: ActionContext, runId: unknown, prompt: string): Promise<string> {
  const id = targetRun(ctx, runId, false);
  const receipt = await call(ctx, "followUp.queue", id, { prompt });
  return `follow-up ${String(receipt.followUpId ?? "?")} queued for run ${id}; it runs after the workflow completes`;
}

export async function removeFollowUp(ctx: ActionContext, runId: unknown, followUpId: string): Promise<string> {
  const id = targetRun(ctx, runId);
  await call(ctx, "followUp.remove", id, { followUpId });
  return `follow-up ${followUpId} removed from run ${id}`;
}
