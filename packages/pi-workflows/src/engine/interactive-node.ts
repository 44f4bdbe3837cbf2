// Agent, decision and checkpoint nodes: a headless agent call, or a durable interaction request
// whose answer (settled later through resume/continue) becomes the node output.
import type { AgentNode, CheckpointNode, DecisionNode, Dynamic, HumanDecisionNode, NodeContext, NodeError } from "../types.js";
import { proposedDecision } from "../human-decision.js";
import { checkDecision, decisionPrompt, parseAgentJson } from "./agent-output.js";
import { type Attempt, attemptContext, complete, ensureStarted, fail, type StepOutcome } from "./attempt.js";
import type { AgentSubmission, AgentUpdate } from "../agent/executor.js";
import { canonicalJson } from "../canonical.js";
import { type AgentRunResult, HostRejectedError, type InteractionKind } from "./host.js";
import { checkedOutput, errorFrom, nodeError, OutputError, truncateUtf8, UPDATE_MESSAGE_BYTES_MAX } from "./limits.js";

export const DEFAULT_AGENT_TIMEOUT_MS = 15 * 60_000;
/** The longest delay `setTimeout` keeps (a 32-bit signed millisecond count). */
const TIMER_MS_MAX = 2_147_483_647;
type AskNode = AgentNode | DecisionNode | CheckpointNode | HumanDecisionNode;
/** A node a person answers: it asks in every mode, and no model or headless agent answers it. */
function askedOfPerson(node: AskNode): node is CheckpointNode | HumanDecisionNode {
  return node.kind === "checkpoint" || node.kind === "humanDecision";
}

export async function resolveDynamic<T>(value: Dynamic<T>, ctx: NodeContext): Promise<T> {
  return typeof value === "function" ? await (value as (ctx: NodeContext) => T | Promise<T>)(ctx) : value;
}

export async function runInteractiveNode(attempt: Attempt, node: AskNode): Promise<StepOutcome> {
  const validating = validatingCandidate(attempt);
  if (validating) return judgeCandidate(attempt, node, validating);
  if (attempt.prior?.status === "waiting" || answeredBefore(attempt)) {
    const settled = settledAnswer(attempt);
    if (settled.kind === "answer") return acceptAnswer(attempt, node, settled.value);
    if (settled.kind === "failed") return fail(attempt, settled.error);
    // Still pending: ask again under the same request ID; a server that already holds it may refuse.
    try {
      return await requestInteraction(attempt, node);
    } catch (error) {
      if (error instanceof HostRejectedError) return { kind: "waiting" };
      throw error;
    }
  }
  if (askedOfPerson(node) || attempt.env.interactive) return requestInteraction(attempt, node);
  return runHeadlessAgent(attempt, node);
}

type Settled = { kind: "answer"; value: unknown } | { kind: "failed"; error: NodeError } | { kind: "pending" };

function settledAnswer(attempt: Attempt): Settled {
  const { runState, command } = attempt.env;
  const continuation = runState.continuation;
  if (command === "continue" && continuation?.parentAttemptId === attempt.attemptId) {
    return { kind: "answer", value: continuation.answer };
  }
  const interaction = runState.interaction;
  if (!interaction || !ownsInteraction(attempt, interaction.attemptId)) return { kind: "pending" };
  switch (interaction.status) {
    case "settled":
    case "accepted":
    case "answered":
      return { kind: "answer", value: interaction.answer ?? null };
    case "timed_out":
    case "timedOut":
    case "expired":
      return { kind: "failed", error: nodeError("timedOut", `interaction for node "${attempt.node.path}" passed its deadline`) };
    case "cancelled":
      return { kind: "failed", error: nodeError("cancelled", `interaction for node "${attempt.node.path}" was cancelled`) };
    default:
      return { kind: "pending" };
  }
}

/** The request belongs to this attempt, or to the interrupted attempt it replaces. */
function ownsInteraction(attempt: Attempt, attemptId: string): boolean {
  return attempt.attemptId === attemptId || attempt.interrupted?.attemptId === attemptId;
}

/** An interrupted attempt whose request was answered: the answer completes the rerun. */
function answeredBefore(attempt: Attempt): boolean {
  const interaction = attempt.env.runState.interaction;
  return attempt.interrupted !== undefined && interaction?.attemptId === attempt.interrupted.attemptId && interaction.status === "settled";
}

type Candidate = { requestId: string; submissionId: string; payload: unknown };

/** A submitted candidate for this attempt's pending request, waiting for this runner's verdict. */
function validatingCandidate(attempt: Attempt): Candidate | undefined {
  const interaction = attempt.env.runState.interaction;
  const validating = interaction?.validating;
  if (!interaction || !validating || interaction.status !== "pending") return undefined;
  if (attempt.prior?.status !== "waiting" || interaction.attemptId !== attempt.attemptId) return undefined;
  return { requestId: interaction.requestId, submissionId: validating.submissionId, payload: validating.payload };
}

/**
 * Judge a submitted candidate with the node's own checks (only a runner loads workflow code):
 * accepted completes the node with the shaped output; rejected leaves the request pending
 * with an actionable error, and the run waits again.
 */
async function judgeCandidate(attempt: Attempt, node: AskNode, candidate: Candidate): Promise<StepOutcome> {
  const verdict = judgeSubmission(node, candidate.payload);
  if (!verdict.accepted) {
    await attempt.env.host.interactionRejected(attempt.attemptId, { requestId: candidate.requestId, submissionId: candidate.submissionId, error: verdict.error });
    return { kind: "waiting" };
  }
  const output = verdict.output;
  await attempt.env.host.interactionAccepted(attempt.attemptId, { requestId: candidate.requestId, submissionId: candidate.submissionId, output });
  return { kind: "result", result: { outcome: "ok", output, visit: attempt.visit } };
}

type Verdict = { accepted: true; output: unknown } | { accepted: false; error: NodeError };

/**
 * The node's own checks on one submitted value, shared by an interactive candidate (judgeCandidate)
 * and a headless step's bridge submission (runHeadlessAgent): the shaped output within the value
 * limit, or the actionable error the model gets back.
 */
function judgeSubmission(node: AskNode, payload: unknown): Verdict {
  try {
    return { accepted: true, output: checkedOutput(shapeAnswer(node, payload)) };
  } catch (error) {
    return { accepted: false, error: error instanceof OutputError ? nodeError(error.code, error.message) : errorFrom(error, "invalidOutput") };
  }
}

/** Check an answer (or headless reply) against the node's contract and commit it. */
async function acceptAnswer(attempt: Attempt, node: AskNode, value: unknown): Promise<StepOutcome> {
  let output: unknown;
  try {
    output = shapeAnswer(node, value);
  } catch (error) {
    return fail(attempt, errorFrom(error, "invalidOutput"));
  }
  return complete(attempt, output);
}

function shapeAnswer(node: AskNode, value: unknown): unknown {
  // The server verified a decision's response against its declared choices and completed it.
  if (node.kind === "checkpoint" || node.kind === "humanDecision") return value;
  if (node.kind === "decision") {
    // A person answers with the bare choice; a model with JSON text or an object.
    if (typeof value === "string" && node.choices.includes(value)) return { [node.field]: value };
    return checkDecision(typeof value === "string" ? decisionText(value, node.choices) : value, node.choices, node.field);
  }
  if (typeof node.expectedOutput === "string") {
    const parsed = typeof value === "string" ? parseAgentJson(value) : value;
    if (!node.validate) return parsed;
    const validated = node.validate(parsed);
    return validated === undefined ? parsed : validated;
  }
  const text = typeof value === "string" ? value : (value as { text?: unknown } | null)?.text;
  if (typeof text !== "string" || text.trim() === "") throw new Error("the assistant reply is empty");
  const maxChars = node.expectedOutput?.maxChars;
  if (maxChars !== undefined && text.length > maxChars) throw new Error(`the assistant reply has ${text.length} characters; the limit is ${maxChars}`);
  return text;
}

/** A model's JSON reply; a person's text that is neither JSON nor a choice names the choices. */
function decisionText(text: string, choices: readonly string[]): unknown {
  try {
    return parseAgentJson(text);
  } catch {
    throw new Error(`${JSON.stringify(text.slice(0, 100))} is not one of: ${choices.join(", ")}`);
  }
}

/**
 * The request's kind: a protected decision is `decision` (a person's, verified by the server);
 * an agent's `decision` node is an ordinary agent step whose output names a choice.
 */
function interactionKind(node: AskNode): InteractionKind {
  if (node.kind === "checkpoint") return "checkpoint";
  if (node.kind === "humanDecision") return "decision";
  if (node.kind === "decision") return "agent";
  return typeof node.expectedOutput === "string" ? "agent" : "assistant";
}

async function promptOf(node: AgentNode | DecisionNode, ctx: NodeContext): Promise<{ prompt: string; expectedOutput?: string }> {
  if (node.kind === "decision") return decisionPrompt(await resolveDynamic(node.question, ctx), node.choices, node.field);
  const prompt = await resolveDynamic(node.prompt, ctx);
  return { prompt, expectedOutput: typeof node.expectedOutput === "string" ? node.expectedOutput : undefined };
}

async function requestInteraction(attempt: Attempt, node: AskNode): Promise<StepOutcome> {
  const { env } = attempt;
  const ctx = attemptContext(attempt);
  const requestId = `req:${attempt.attemptId}`;
  const contract: Record<string, unknown> = { workflow: env.runState.workflowName, nodePath: attempt.node.path, attemptId: attempt.attemptId };
  let timing: { deadlineAt?: number; timeoutMs?: number } = {};
  let subject: unknown;
  try {
    if (node.kind === "checkpoint") {
      contract.summary = String(await resolveDynamic(node.summary, ctx));
    } else if (node.kind === "humanDecision") {
      const afterMs = node.onTimeout?.afterMs ?? node.timeoutMs;
      if (afterMs !== undefined) timing = { deadlineAt: env.now() + afterMs };
      const proposed = proposedDecision(node, await node.request(ctx), timing.deadlineAt);
      contract.decision = proposed.decision;
      subject = proposed.subject;
    } else {
      Object.assign(contract, await promptOf(node, ctx));
      if (node.kind === "decision") Object.assign(contract, { choices: node.choices, field: node.field });
      if (node.kind === "agent" && node.allowedTools) contract.allowedTools = node.allowedTools;
      if (node.kind === "agent" && typeof node.expectedOutput !== "string") {
        contract.form = "assistantMessage";
        if (node.expectedOutput?.maxChars !== undefined) contract.maxChars = node.expectedOutput.maxChars;
      }
      const timeoutMs = await stepTimeout(node, ctx, attempt.node.path);
      if (timeoutMs !== null) timing = { timeoutMs, deadlineAt: env.now() + timeoutMs };
    }
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  // The deadline is committed with the attempt before the request is proposed.
  await ensureStarted(attempt, timing);
  await env.host.interactionRequested(attempt.attemptId, {
    requestId,
    kind: interactionKind(node),
    contract,
    ...(timing.deadlineAt !== undefined ? { deadlineAt: timing.deadlineAt } : {}),
    ...(node.kind === "humanDecision" ? { subject } : {}),
  });
  return { kind: "waiting" };
}

/**
 * A step's time limit for this attempt: `timeoutMs` (default 15 min), `null` for none, or what
 * its function returns for this context. Anything but a positive finite number or null is an
 * error of the workflow: the attempt fails with that message.
 */
async function stepTimeout(node: AgentNode | DecisionNode, ctx: NodeContext, nodePath: string): Promise<number | null> {
  const declared = node.timeoutMs === undefined ? DEFAULT_AGENT_TIMEOUT_MS : await resolveDynamic(node.timeoutMs as Dynamic<number | null>, ctx);
  if (declared === null) return null;
  if (typeof declared !== "number" || !Number.isFinite(declared) || declared <= 0) {
    throw new Error(`timeoutMs of node "${nodePath}" must be a positive number of milliseconds or null, not ${String(declared)}`);
  }
  return declared;
}

async function runHeadlessAgent(attempt: Attempt, node: AgentNode | DecisionNode): Promise<StepOutcome> {
  const { env } = attempt;
  const ctx = attemptContext(attempt);
  let timeoutMs: number | null;
  let request: { prompt: string; expectedOutput?: string };
  try {
    timeoutMs = await stepTimeout(node, ctx, attempt.node.path);
    await ensureStarted(attempt, timeoutMs === null ? {} : { timeoutMs, deadlineAt: env.now() + timeoutMs });
    request = await promptOf(node, ctx);
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  let executor;
  try {
    executor = await env.loadAgentExecutor();
  } catch (error) {
    return fail(attempt, errorFrom(error, "agentUnavailable"));
  }
  const controller = new AbortController();
  let timedOut = false;
  const timer =
    timeoutMs === null
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          controller.abort(new Error("agent step timed out"));
        }, timeoutMs);
  const onRunAbort = () => controller.abort(env.signal.reason);
  env.signal.addEventListener("abort", onRunAbort, { once: true });
  const requestId = `req:${attempt.attemptId}`;
  const maxChars = node.kind === "agent" && typeof node.expectedOutput !== "string" ? node.expectedOutput?.maxChars : undefined;
  const submission: AgentSubmission = {
    requestId,
    workflow: env.runState.workflowName,
    nodePath: attempt.node.path,
    ...(maxChars !== undefined ? { maxChars } : {}),
    ...(node.kind === "agent" && node.allowedTools ? { allowedTools: node.allowedTools } : {}),
    check: async (payload) => {
      const verdict = judgeSubmission(node, payload);
      return verdict.accepted ? verdict : { accepted: false, message: verdict.error.message };
    },
    // A headless step has no interactive request to keep updates on: each becomes a progress event.
    update: (update) => env.host.nodeUpdate(attempt.attemptId, { message: updateMessage(update) }),
  };
  let reply: AgentRunResult;
  try {
    reply = await executor.runAgent({
      ...request,
      submission,
      // No limit: the longest timer Node keeps (about 24.8 days); the run's cancel still ends it.
      timeoutMs: timeoutMs ?? TIMER_MS_MAX,
      cwd: env.projectPath,
      signal: controller.signal,
      registerProcess: (pid) => env.host.processRegister(pid),
      unregisterProcess: (pid) => env.host.processUnregister(pid),
    });
  } catch (error) {
    reply = { ok: false, code: "agentFailed", message: (error as Error)?.message ?? String(error) };
  } finally {
    clearTimeout(timer);
    env.signal.removeEventListener("abort", onRunAbort);
  }
  if (timedOut || (!reply.ok && reply.code === "timedOut")) {
    return fail(attempt, nodeError("timedOut", `agent step "${attempt.node.path}" timed out after ${timeoutMs} ms`));
  }
  if (!reply.ok) return fail(attempt, nodeError(reply.code || "agentFailed", reply.message));
  // The bridge's accepted value was shaped by judgeSubmission already; a bare reply text (an
  // executor without a bridge) goes through the same checks here.
  if ("output" in reply) return complete(attempt, reply.output);
  return acceptAnswer(attempt, node, reply.text);
}

/** A bridge update as a `node.update` message: `<type> <key>: <data as JSON>`, within its limit. */
function updateMessage(update: AgentUpdate): string {
  let data: string;
  try {
    data = canonicalJson(update.data);
  } catch {
    data = "(not JSON)";
  }
  return truncateUtf8(`${update.type} ${update.key}: ${data}`, UPDATE_MESSAGE_BYTES_MAX);
}
