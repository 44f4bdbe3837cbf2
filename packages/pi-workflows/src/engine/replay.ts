// Committed progress from RunState, looked up by (node path, visit) while the engine walks again.
import type { NodeError, NodeResult, Outcome } from "../types.js";
import type { RunState, RunStateAttempt, RunStateEffect } from "./host.js";

const FINISHED: Record<string, Outcome> = { completed: "ok", failed: "failed", timed_out: "timed_out", cancelled: "cancelled" };

/** The routing outcome of a failure: the error code names timeouts and cancellation. */
export function outcomeOfError(error: NodeError): Outcome {
  if (error.code === "timedOut") return "timed_out";
  if (error.code === "cancelled") return "cancelled";
  return "failed";
}

export class ReplayIndex {
  private readonly attempts = new Map<string, RunStateAttempt>();
  private readonly effects = new Map<string, RunStateEffect>();

  constructor(state: RunState, useAttempts: boolean) {
    if (useAttempts) {
      // A continuation walks the parent's history first; the answered checkpoint is its output.
      const continuation = state.continuation;
      for (const attempt of continuation?.attempts ?? []) {
        const answered = attempt.attemptId === continuation!.parentAttemptId;
        this.add(answered ? { ...attempt, status: "completed", output: continuation!.answer, error: null } : attempt);
      }
      for (const attempt of state.attempts ?? []) this.add(attempt);
    }
    for (const effect of state.effects ?? []) this.effects.set(effect.idempotencyKey, effect);
  }

  private add(attempt: RunStateAttempt) {
    this.attempts.set(`${attempt.nodePath}#${attempt.visit}`, attempt);
  }

  /** Whether an attempt ID is known (own or, for a continuation, the parent's). */
  has(attemptId: string): boolean {
    for (const attempt of this.attempts.values()) if (attempt.attemptId === attemptId) return true;
    return false;
  }

  attempt(nodePath: string, visit: number): RunStateAttempt | undefined {
    return this.attempts.get(`${nodePath}#${visit}`);
  }

  effect(idempotencyKey: string): RunStateEffect | undefined {
    return this.effects.get(idempotencyKey);
  }

  /** The stored result of a finished attempt; undefined while it is running or waiting. */
  static finishedResult(attempt: RunStateAttempt): NodeResult | undefined {
    const outcome = FINISHED[attempt.status];
    if (!outcome) return undefined;
    if (outcome === "ok") return { outcome, output: attempt.output ?? null, visit: attempt.visit };
    const error = attempt.error ?? { code: attempt.status, message: `attempt ${attempt.status}` };
    const routed = attempt.status === "failed" ? outcomeOfError(error) : outcome;
    return { outcome: routed, error, visit: attempt.visit };
  }
}
