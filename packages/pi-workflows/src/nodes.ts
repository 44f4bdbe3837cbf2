// Node builders: each returns a plain, frozen node description checked for shape up front.
import type {
  ActionContext,
  ActionNode,
  AgentNode,
  AssistantMessageForm,
  CheckpointNode,
  ComputeNode,
  DecisionNode,
  Dynamic,
  EffectContract,
  NodeContext,
  NotifyNode,
  ShellNode,
  ShellReceipt,
  ShellSpec,
} from "./types.js";

const EFFECT_TYPE = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$/;

function effectContract(type: string, recovery: EffectContract["recovery"]): EffectContract {
  if (typeof type !== "string" || !EFFECT_TYPE.test(type)) {
    throw new Error(`invalid effect type ${JSON.stringify(type)}: use letters, digits, '_', '.', ':' or '-'`);
  }
  return Object.freeze({ type, recovery });
}

/** An effect whose repeat is safe (external idempotency key or read-back check). */
export function idempotentEffect(type: string): EffectContract {
  return effectContract(type, "idempotent");
}

/**
 * An effect the workflow can check: after an uncertain crash `observe` looks at the external
 * system, and only a proved `{applied: false}` applies it again (`{applied: true, result}`
 * completes the node with `result`). Action nodes only.
 */
export function readBackEffect(type: string, observe: EffectContract["observe"]): EffectContract {
  requireFunction(observe, "readBackEffect.observe");
  return Object.freeze({ ...effectContract(type, "readBack"), observe });
}

/** An effect that cannot be proved after an uncertain crash: it becomes ambiguous, never retried. */
export function manualEffect(type: string): EffectContract {
  return effectContract(type, "manual");
}

function requireFunction(value: unknown, what: string): void {
  if (typeof value !== "function") throw new Error(`${what} must be a function`);
}

function requireDynamicText(value: unknown, what: string): void {
  if (typeof value !== "string" && typeof value !== "function") {
    throw new Error(`${what} must be a string or a function of the node context`);
  }
}

function requireEffect(value: unknown, what: string): asserts value is EffectContract {
  const effect = value as EffectContract | undefined;
  const known = effect?.recovery === "idempotent" || effect?.recovery === "manual" || effect?.recovery === "readBack";
  if (!effect || typeof effect.type !== "string" || !known) {
    throw new Error(`${what} must be idempotentEffect(type), readBackEffect(type, observe) or manualEffect(type)`);
  }
  if (effect.recovery === "readBack" && typeof effect.observe !== "function") {
    throw new Error(`${what} is a read-back effect without an observe function`);
  }
}

function requireTimeout(value: unknown, what: string): void {
  if (value !== undefined && (typeof value !== "number" || !Number.isFinite(value) || value <= 0)) {
    throw new Error(`${what} must be a positive number of milliseconds`);
  }
}

/** A pure function of the context; it may run again after a crash. */
export function compute<I = any>(options: { run: (ctx: NodeContext<I>) => unknown; title?: string }): ComputeNode<I> {
  requireFunction(options?.run, "compute.run");
  return Object.freeze({ kind: "compute", run: options.run, title: options.title });
}

/** A side effect reserved and settled through the server before and after it runs. */
export function action<I = any>(options: {
  effect: EffectContract;
  /** What the effect asks of the external system (default: the node input); fingerprinted. */
  request?: (ctx: NodeContext<I>) => unknown;
  run: (ctx: ActionContext<I>) => unknown;
  title?: string;
}): ActionNode<I> {
  requireEffect(options?.effect, "action.effect");
  requireFunction(options.run, "action.run");
  if (options.request !== undefined) requireFunction(options.request, "action.request");
  return Object.freeze({ kind: "action", effect: options.effect, request: options.request, run: options.run, title: options.title });
}

/** A command owned by the workflow; without `effect` it is a manual effect of type "shell". */
export function shell<I = any>(options: {
  effect?: EffectContract;
  exec: (ctx: NodeContext<I>) => ShellSpec | Promise<ShellSpec>;
  parse?: (receipt: ShellReceipt) => unknown;
  title?: string;
}): ShellNode<I> {
  const effect = options?.effect ?? manualEffect("shell");
  requireEffect(effect, "shell.effect");
  if (effect.recovery === "readBack") {
    throw new Error("shell.effect cannot be a read-back effect: run the command from an action node with readBackEffect");
  }
  requireFunction(options.exec, "shell.exec");
  if (options.parse !== undefined) requireFunction(options.parse, "shell.parse");
  return Object.freeze({ kind: "shell", effect, exec: options.exec, parse: options.parse, title: options.title });
}

/** The agent's visible reply becomes the node output. */
export function assistantMessage(options: { maxChars?: number } = {}): AssistantMessageForm {
  if (options.maxChars !== undefined && (!Number.isInteger(options.maxChars) || options.maxChars <= 0)) {
    throw new Error("assistantMessage.maxChars must be a positive integer");
  }
  return Object.freeze({ kind: "assistantMessage", maxChars: options.maxChars });
}

/** Tools one agent step may allow, at most. */
const ALLOWED_TOOLS_MAX = 64;
const TOOL_NAME = /^[A-Za-z0-9_.:-]{1,64}$/;

/** A model step: a JSON submission (`expectedOutput` text) or an assistant message. */
export function agent<I = any>(options: {
  prompt: Dynamic<string, I>;
  expectedOutput?: string | AssistantMessageForm;
  validate?: (output: unknown) => unknown;
  /** Absent: 15 min; `null`: no limit; a function of the context: per attempt (see AgentNode). */
  timeoutMs?: number | null | ((ctx: NodeContext<I>) => number | null | Promise<number | null>);
  /** Headless runs: the only tools (besides `workflow`) the agent may call, e.g. ["read", "bash"]. */
  allowedTools?: readonly string[];
  title?: string;
}): AgentNode<I> {
  requireDynamicText(options?.prompt, "agent.prompt");
  const expected = options.expectedOutput;
  if (expected !== undefined && typeof expected !== "string" && expected?.kind !== "assistantMessage") {
    throw new Error("agent.expectedOutput must be a string or assistantMessage()");
  }
  if (options.validate !== undefined) {
    requireFunction(options.validate, "agent.validate");
    if (typeof expected !== "string") throw new Error("agent.validate needs a string expectedOutput");
  }
  if (options.timeoutMs !== null && typeof options.timeoutMs !== "function") requireTimeout(options.timeoutMs, "agent.timeoutMs");
  const allowedTools = options.allowedTools;
  if (allowedTools !== undefined) {
    if (!Array.isArray(allowedTools) || allowedTools.length > ALLOWED_TOOLS_MAX || allowedTools.some((name) => typeof name !== "string" || !TOOL_NAME.test(name))) {
      throw new Error(`agent.allowedTools must be a list of at most ${ALLOWED_TOOLS_MAX} tool names (letters, digits, _ . : -)`);
    }
  }
  return Object.freeze({
    kind: "agent",
    prompt: options.prompt,
    expectedOutput: expected,
    validate: options.validate,
    timeoutMs: options.timeoutMs,
    ...(allowedTools !== undefined ? { allowedTools: Object.freeze([...new Set(allowedTools)]) } : {}),
    title: options.title,
  });
}

/** Stops for an answer; the answer becomes this node's output. */
export function checkpoint<I = any>(options: { summary: Dynamic<string, I>; title?: string }): CheckpointNode<I> {
  requireDynamicText(options?.summary, "checkpoint.summary");
  return Object.freeze({ kind: "checkpoint", summary: options.summary, title: options.title });
}

const FIELD = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** An agent step that must answer one of `choices` in `field` (default "route"). */
export function decision<I = any>(options: {
  question: Dynamic<string, I>;
  choices: readonly string[];
  field?: string;
  timeoutMs?: number;
  title?: string;
}): DecisionNode<I> {
  requireDynamicText(options?.question, "decision.question");
  const choices = options.choices;
  if (!Array.isArray(choices) || choices.length === 0 || choices.some((c) => typeof c !== "string" || c === "")) {
    throw new Error("decision.choices must be a non-empty list of strings");
  }
  if (new Set(choices).size !== choices.length) throw new Error("decision.choices has a duplicate");
  const field = options.field ?? "route";
  if (!FIELD.test(field)) throw new Error(`decision.field ${JSON.stringify(field)} is not a plain field name`);
  requireTimeout(options.timeoutMs, "decision.timeoutMs");
  return Object.freeze({
    kind: "decision",
    question: options.question,
    choices: Object.freeze([...choices]),
    field,
    timeoutMs: options.timeoutMs,
    title: options.title,
  });
}

/** A passive message for the origin session (`progress` or `final`). */
export function notify<I = any>(options: {
  kind: "progress" | "final";
  message: Dynamic<string, I>;
  title?: string;
}): NotifyNode<I> {
  if (options?.kind !== "progress" && options?.kind !== "final") {
    throw new Error('notify.kind must be "progress" or "final"');
  }
  requireDynamicText(options.message, "notify.message");
  return Object.freeze({ kind: "notify", notifyKind: options.kind, message: options.message, title: options.title });
}
