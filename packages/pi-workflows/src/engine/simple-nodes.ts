// Compute and notify nodes.
import type { ComputeNode, NotifyNode } from "../types.js";
import { type Attempt, attemptContext, complete, ensureStarted, fail, type StepOutcome } from "./attempt.js";
import { resolveDynamic } from "./interactive-node.js";
import { checkedOutput, errorFrom, NOTIFICATION_BYTES_MAX, nodeError, OutputError, truncateUtf8 } from "./limits.js";

/** Pure: no start message; start and finish travel together (a runner gathers the results of one tick into one `nodes.finished`). */
export async function runCompute(attempt: Attempt, node: ComputeNode): Promise<StepOutcome> {
  let output: unknown;
  try {
    output = await node.run(attemptContext(attempt));
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  return complete(attempt, output);
}

/** The attempt and its notification commit together in `notification.requested`. */
export async function runNotify(attempt: Attempt, node: NotifyNode): Promise<StepOutcome> {
  const { env } = attempt;
  let message: string;
  try {
    message = truncateUtf8(String(await resolveDynamic(node.message, attemptContext(attempt))), NOTIFICATION_BYTES_MAX);
  } catch (error) {
    return fail(attempt, errorFrom(error));
  }
  let output: unknown;
  try {
    output = checkedOutput({ kind: node.notifyKind, message });
  } catch (error) {
    return fail(attempt, nodeError((error as OutputError).code ?? "invalidOutput", (error as Error).message));
  }
  await ensureStarted(attempt);
  await env.host.notificationRequested(attempt.attemptId, { output, notification: { kind: node.notifyKind, message } });
  return { kind: "result", result: { outcome: "ok", output, visit: attempt.visit } };
}
