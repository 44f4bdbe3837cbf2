// Action and shell nodes: reserve the effect, run it at most once, settle it, adopt stored results.
import type { ActionNode, ActionContext, EffectContract, NodeError, ShellNode, ShellReceipt, ShellSpec } from "../types.js";
import { type Attempt, attemptContext, complete, ensureStarted, fail, type StepOutcome } from "./attempt.js";
import { idempotencyKey, requestFingerprint } from "./effect-keys.js";
import { checkedOutput, errorFrom, nodeError, OutputError, truncateUtf8, UPDATE_MESSAGE_BYTES_MAX, VALUE_BYTES_MAX } from "./limits.js";
import { fitReceipt, normalizeShellSpec, runShell } from "./shell-exec.js";

/** What to do about an effect before (or instead of) running it. */
type EffectPlan = { kind: "execute"; effectId: string } | { kind: "adopt"; result: unknown } | { kind: "stop"; error: NodeError };

/** Decide from RunState first, then from the server's reservation; only a fresh reservation executes. */
async function planEffect(attempt: Attempt, effect: EffectContract, request: unknown): Promise<EffectPlan> {
  const { env, node, visit } = attempt;
  const key = idempotencyKey(env.runId, effect.type, node.path, visit);
  const stored = env.replay.effect(key);
  if (stored) {
    const verdict = terminalVerdict(stored.status, stored.result, node.path, effect.type);
    if (verdict) return verdict;
  }
  const reservation = await env.host.effectReserve(attempt.attemptId, {
    effectType: effect.type,
    idempotencyKey: key,
    requestFingerprint: requestFingerprint(request),
  });
  if (reservation.execute) return { kind: "execute", effectId: reservation.effectId };
  const result = reservation.result !== undefined ? reservation.result : stored?.result;
  const verdict = terminalVerdict(reservation.status, result, node.path, effect.type);
  return verdict ?? { kind: "stop", error: ambiguous(node.path, effect.type, reservation.status) };
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

export async function runAction(attempt: Attempt, node: ActionNode): Promise<StepOutcome> {
  await ensureStarted(attempt);
  const request = { kind: "action", effectType: node.effect.type, nodePath: attempt.node.path, visit: attempt.visit };
  const plan = await planEffect(attempt, node.effect, request);
  if (plan.kind === "stop") return fail(attempt, plan.error);
  if (plan.kind === "adopt") return complete(attempt, plan.result);
  const { env } = attempt;
  const ctx: ActionContext = {
    ...attemptContext(attempt),
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

export async function runShellNode(attempt: Attempt, node: ShellNode): Promise<StepOutcome> {
  const { env } = attempt;
  await ensureStarted(attempt);
  let spec: Required<ShellSpec>;
  try {
    spec = normalizeShellSpec(await node.exec(attemptContext(attempt)), env.projectPath);
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  const plan = await planEffect(attempt, node.effect, { kind: "shell", ...spec });
  if (plan.kind === "stop") return fail(attempt, plan.error);
  if (plan.kind === "adopt") return finishShell(attempt, node, spec, plan.result as ShellReceipt);
  let receipt: ShellReceipt;
  try {
    receipt = await runShell(spec, {
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
