// Action and shell nodes: reserve the effect, run it per its contract, settle it, adopt stored results.
import type {
  ActionNode,
  ActionContext,
  EffectContract,
  EffectIdentity,
  NodeError,
  Observation,
  ShellNode,
  ShellReceipt,
  ShellSpec,
} from "../types.js";
import { type Attempt, attemptContext, complete, ensureStarted, fail, type StepOutcome } from "./attempt.js";
import { idempotencyKey, requestFingerprint } from "./effect-keys.js";
import { HostRejectedError } from "./host.js";
import { checkedOutput, errorFrom, nodeError, OutputError, truncateUtf8, UPDATE_MESSAGE_BYTES_MAX, VALUE_BYTES_MAX } from "./limits.js";
import { fitReceipt, normalizeShellSpec, runShell } from "./shell-exec.js";

/** The server's bound on a request summary (what a reviewer sees). */
const REQUEST_SUMMARY_BYTES_MAX = 200;
/** The environment variable a shell command finds its effect key in. */
export const EFFECT_KEY_ENV = "PI_WORKFLOWS_EFFECT_KEY";

/** What to do about an effect before (or instead of) running it. */
type EffectPlan =
  | { kind: "execute"; effectId: string; identity: EffectIdentity; observeFirst: boolean }
  | { kind: "adopt"; result: unknown }
  | { kind: "stop"; error: NodeError };

/** Decide from RunState first, then from the server's reservation; only a granted attempt executes. */
async function planEffect(attempt: Attempt, effect: EffectContract, request: unknown, summary?: string): Promise<EffectPlan> {
  const { env, node, visit } = attempt;
  const key = idempotencyKey(env.runId, effect.type, node.path, visit);
  const stored = env.replay.effect(key);
  if (stored) {
    const verdict = terminalVerdict(stored.status, stored.result, node.path, effect.type);
    if (verdict) return verdict;
  }
  let reservation;
  try {
    reservation = await env.host.effectReserve(attempt.attemptId, {
      effectType: effect.type,
      idempotencyKey: key,
      requestFingerprint: requestFingerprint(request),
      recovery: effect.recovery,
      ...(summary ? { requestSummary: printableSummary(summary) } : {}),
    });
  } catch (error) {
    // The same node visit computed another request: running it under the old key would
    // let the external system deduplicate a different request away.
    if (error instanceof HostRejectedError && error.code === "effectRequestChanged") {
      return { kind: "stop", error: nodeError("effectRequestChanged", error.message) };
    }
    throw error;
  }
  if (reservation.execute) {
    const identity = Object.freeze({ type: effect.type, key, attempt: reservation.attempt ?? 1 });
    return { kind: "execute", effectId: reservation.effectId, identity, observeFirst: reservation.observeFirst === true };
  }
  const result = reservation.result !== undefined ? reservation.result : stored?.result;
  const verdict = terminalVerdict(reservation.status, result, node.path, effect.type);
  return verdict ?? { kind: "stop", error: ambiguous(node.path, effect.type, reservation.status) };
}

function printableSummary(text: string): string {
  return truncateUtf8(text.replace(/[\u0000-\u001f\u007f-\u009f]/g, " "), REQUEST_SUMMARY_BYTES_MAX);
}

function ambiguous(nodePath: string, effectType: string, status: string): NodeError {
  return nodeError(
    "effectAmbiguous",
    `effect "${effectType}" of node "${nodePath}" is ${status}: its outcome is unknown, so it is never run again automatically; inspect the external system and recover it explicitly`,
  );
}

function terminalVerdict(status: string, result: unknown, nodePath: string, effectType: string): EffectPlan | undefined {
  switch (status) {
    case "applied":
      if (result === undefined) {
        return { kind: "stop", error: nodeError("effectResultUnavailable", `effect "${effectType}" of node "${nodePath}" applied, but its stored result was not provided`) };
      }
      return { kind: "adopt", result };
    case "rejected": {
      const stored = (result as { error?: NodeError } | null | undefined)?.error;
      return { kind: "stop", error: nodeError("effectRejected", `effect "${effectType}" of node "${nodePath}" was rejected: ${stored?.message ?? "no detail"}`) };
    }
    case "cancelled":
      return { kind: "stop", error: nodeError("cancelled", `effect "${effectType}" of node "${nodePath}" was cancelled`) };
    case "applying":
    case "ambiguous":
      return { kind: "stop", error: ambiguous(nodePath, effectType, status) };
    default:
      return undefined; // pending (or unknown): let the server decide through a reservation
  }
}

/** A read-back check's answer, validated: anything else cannot prove either way. */
function checkedObservation(value: unknown): Observation {
  const observed = value as Observation | null | undefined;
  if (observed && observed.applied === false) return { applied: false };
  if (observed && observed.applied === true) return { applied: true, result: checkedOutput(observed.result ?? null) };
  throw new Error("observe must return {applied: true, result?} or {applied: false}");
}

export async function runAction(attempt: Attempt, node: ActionNode): Promise<StepOutcome> {
  await ensureStarted(attempt);
  const base = attemptContext(attempt);
  let request: unknown;
  try {
    request = checkedOutput(node.request ? await node.request(base) : base.input);
  } catch (error) {
    return fail(attempt, errorFrom(error, "effectRequestInvalid"));
  }
  const fingerprinted = { kind: "action", effectType: node.effect.type, nodePath: attempt.node.path, visit: attempt.visit, request };
  const plan = await planEffect(attempt, node.effect, fingerprinted, node.title);
  if (plan.kind === "stop") return fail(attempt, plan.error);
  if (plan.kind === "adopt") return complete(attempt, plan.result);
  const { env } = attempt;
  if (plan.observeFirst) {
    const observed = await observe(attempt, node, plan, request);
    if (observed.kind !== "apply") return observed.outcome;
  }
  const ctx: ActionContext = {
    ...base,
    effect: plan.identity,
    request,
    update: (progress) =>
      env.host.nodeUpdate(attempt.attemptId, { ...progress, message: truncateUtf8(String(progress.message), UPDATE_MESSAGE_BYTES_MAX) }),
  };
  let output: unknown;
  try {
    output = checkedOutput(await node.run(ctx));
  } catch (error) {
    const failure = error instanceof OutputError ? nodeError(error.code, error.message) : errorFrom(error);
    // An oversized or non-JSON result still ran: record it applied, with no result to adopt.
    const outcome = error instanceof OutputError ? "applied" : "rejected";
    await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome, result: outcome === "applied" ? null : { error: failure } });
    return fail(attempt, failure);
  }
  await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome: "applied", result: output });
  return complete(attempt, output);
}

type Observed = { kind: "apply" } | { kind: "done"; outcome: StepOutcome };

/**
 * A read-back effect after an interrupted attempt: only a proved "not applied" applies it
 * again. A check that fails or answers nonsense proves nothing, so the effect becomes
 * ambiguous (an operator reviews it), exactly as a manual effect would.
 */
async function observe(attempt: Attempt, node: ActionNode, plan: Extract<EffectPlan, { kind: "execute" }>, request: unknown): Promise<Observed> {
  const { env } = attempt;
  let observation: Observation;
  try {
    observation = checkedObservation(await node.effect.observe!({ ...attemptContext(attempt), effect: plan.identity, request }));
  } catch (error) {
    await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome: "ambiguous" });
    const why = errorFrom(error).message;
    const failure = ambiguous(attempt.node.path, node.effect.type, `unproved (its read-back check failed: ${truncateUtf8(why, 500)})`);
    return { kind: "done", outcome: await fail(attempt, failure) };
  }
  if (!observation.applied) return { kind: "apply" };
  const result = observation.result ?? null;
  await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome: "applied", result });
  return { kind: "done", outcome: await complete(attempt, result) };
}

export async function runShellNode(attempt: Attempt, node: ShellNode): Promise<StepOutcome> {
  const { env } = attempt;
  await ensureStarted(attempt);
  let spec: Required<ShellSpec>;
  try {
    spec = normalizeShellSpec(await node.exec(attemptContext(attempt)), env.projectPath);
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  // Only the command's name is shown to a reviewer: its arguments may carry secrets.
  const summary = `${spec.command.split("/").pop()}`;
  const plan = await planEffect(attempt, node.effect, { kind: "shell", ...spec }, summary);
  if (plan.kind === "stop") return fail(attempt, plan.error);
  if (plan.kind === "adopt") return finishShell(attempt, node, spec, plan.result as ShellReceipt);
  let receipt: ShellReceipt;
  try {
    receipt = await runShell(spec, {
      env: { [EFFECT_KEY_ENV]: plan.identity.key },
      signal: env.signal,
      onSpawn: (pid) => env.host.processRegister(pid),
      onGroupGone: (pid) => env.host.processUnregister(pid),
    });
  } catch (error) {
    const failure = errorFrom(error, "shellSpawnFailed");
    await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome: "rejected", result: { error: failure } });
    return fail(attempt, failure);
  }
  // The stored receipt must fit the result limit; the node sees exactly what a resume would adopt.
  receipt = fitReceipt(receipt, VALUE_BYTES_MAX);
  await env.host.effectSettle(attempt.attemptId, { effectId: plan.effectId, outcome: "applied", result: receipt });
  return finishShell(attempt, node, spec, receipt);
}

async function finishShell(attempt: Attempt, node: ShellNode, spec: Required<ShellSpec>, receipt: ShellReceipt): Promise<StepOutcome> {
  const what = [spec.command, ...spec.args].join(" ");
  if (receipt.timedOut) {
    return fail(attempt, nodeError("timedOut", `command \`${what}\` timed out after ${spec.timeoutMs} ms`));
  }
  if (receipt.exitCode !== 0 && !(spec.allowNonZeroExit && receipt.exitCode !== null)) {
    const how = receipt.exitCode === null ? `was killed by ${receipt.signal}` : `exited with code ${receipt.exitCode}`;
    const tail = receipt.stderr.trim().slice(-1000);
    return fail(attempt, nodeError("shellFailed", `command \`${what}\` ${how}${tail ? `: ${tail}` : ""}`));
  }
  if (!node.parse) return complete(attempt, receipt);
  try {
    return complete(attempt, await node.parse(receipt));
  } catch (error) {
    return fail(attempt, errorFrom(error, "parseFailed"));
  }
}
