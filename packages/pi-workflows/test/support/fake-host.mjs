// An in-memory stand-in for the server side of the runner protocol: it records every message and
// keeps just enough state (attempts, effects, interaction) to build the RunState for a resume.
import { HostRejectedError } from "../../dist/index.js";

export class FakeHost {
  constructor({ runId = "run-1", input = {}, executionMode } = {}) {
    this.runId = runId;
    this.input = input;
    this.executionMode = executionMode;
    this.messages = [];
    this.attempts = new Map();
    this.effects = new Map();
    this.interaction = null;
    this.registered = [];
    this.run = null;
    /** Throw (as if the runner died) when this message kind is about to be sent the Nth time. */
    this.crashAt = null;
  }

  note(kind, attemptId, payload) {
    if (this.crashAt && this.crashAt.kind === kind && --this.crashAt.count === 0) {
      this.crashAt = null;
      throw new Error(`simulated crash before ${kind}`);
    }
    this.messages.push({ kind, attemptId, payload });
  }

  kinds() {
    return this.messages.map((m) => m.kind);
  }

  startAttempt(attemptId, start, status = "running") {
    this.attempts.set(attemptId, { attemptId, ...pick(start), status, output: null, error: null });
  }

  async nodeStarted(attemptId, start) {
    this.note("node.started", attemptId, start);
    this.startAttempt(attemptId, start);
  }
  async nodeUpdate(attemptId, update) {
    this.note("node.update", attemptId, update);
  }
  async nodeFinished(attemptId, { output, start }) {
    this.note("node.finished", attemptId, { output, ...start });
    if (start) this.startAttempt(attemptId, start);
    Object.assign(this.attempts.get(attemptId), { status: "completed", output });
  }
  async nodeFailed(attemptId, { error, start }) {
    this.note("node.failed", attemptId, { error, ...start });
    if (start) this.startAttempt(attemptId, start);
    Object.assign(this.attempts.get(attemptId), { status: error.code === "timedOut" ? "timed_out" : "failed", error });
  }
  async runFinished(result) {
    this.note("run.finished", undefined, result);
    this.run = result;
  }
  async runParked(reason) {
    this.note("run.parked", undefined, { reason });
  }
  async interactionRequested(attemptId, request) {
    this.note("interaction.requested", attemptId, request);
    this.attempts.get(attemptId).status = "waiting";
    this.interaction = { requestId: request.requestId, attemptId, kind: request.kind, status: "pending", answer: null };
  }
  async interactionAccepted(attemptId, verdict) {
    this.note("interaction.accepted", attemptId, verdict);
    Object.assign(this.attempts.get(attemptId), { status: "completed", output: verdict.output });
    this.interaction = { ...this.interaction, status: "settled", answer: verdict.output, validating: null };
  }
  async interactionRejected(attemptId, verdict) {
    this.note("interaction.rejected", attemptId, verdict);
    this.interaction = { ...this.interaction, validating: null, lastError: verdict.error };
  }
  async notificationRequested(attemptId, request) {
    this.note("notification.requested", attemptId, request);
    Object.assign(this.attempts.get(attemptId), { status: "completed", output: request.output });
  }
  async effectReserve(attemptId, request) {
    this.note("effect.reserve", attemptId, request);
    const known = this.effects.get(request.idempotencyKey);
    if (known) {
      if (known.requestFingerprint !== request.requestFingerprint) {
        throw new HostRejectedError("effect.reserve", "effectRequestChanged", "key already names another request");
      }
      if (known.status === "pending") {
        // Interrupted under a repeatable contract: a new attempt (read-back observes first).
        const observeFirst = known.recovery === "readBack" && known.lastOutcome === "interrupted";
        Object.assign(known, { status: "applying", attempt: known.attempt + 1 });
        return { effectId: known.effectId, status: "applying", execute: true, attempt: known.attempt, observeFirst };
      }
      return { effectId: known.effectId, status: known.status, execute: false, result: known.result };
    }
    const effect = { effectId: `effect-${this.effects.size + 1}`, ...request, status: "applying", result: null, attempt: 1 };
    this.effects.set(request.idempotencyKey, effect);
    return { effectId: effect.effectId, status: "applying", execute: true, attempt: 1, result: null };
  }
  async effectSettle(attemptId, { effectId, outcome, result }) {
    this.note("effect.settle", attemptId, { effectId, outcome, result });
    const effect = [...this.effects.values()].find((e) => e.effectId === effectId);
    Object.assign(effect, { status: outcome, result: result ?? null });
  }
  async processRegister(pid) {
    this.note("runner.progress", undefined, { operation: "process.register", pid });
    this.registered.push(pid);
  }
  async processUnregister(pid) {
    this.note("runner.progress", undefined, { operation: "process.unregister", pid });
  }

  /**
   * What the server marks after a runner died: an applying manual effect becomes ambiguous,
   * an idempotent or read-back one pending (its attempt interrupted).
   */
  runnerDied() {
    for (const effect of this.effects.values()) {
      if (effect.status !== "applying") continue;
      Object.assign(effect, effect.recovery === "manual" ? { status: "ambiguous" } : { status: "pending", lastOutcome: "interrupted" });
    }
  }

  settleInteraction(answer) {
    Object.assign(this.interaction, { status: "settled", answer });
  }

  runState() {
    return {
      schema: "pi-workflows.run-state.v1",
      runId: this.runId,
      workflowName: "test",
      revision: this.messages.length,
      input: this.input,
      attempts: [...this.attempts.values()],
      effects: [...this.effects.values()].map(({ effectId, effectType, idempotencyKey, status, result }) => ({ effectId, effectType, idempotencyKey, status, result })),
      interaction: this.interaction,
      continuation: null,
      ...(this.executionMode ? { executionMode: this.executionMode } : {}),
    };
  }
}

function pick({ nodeId, nodePath, visit, nodeType }) {
  return { nodeId, nodePath, visit, nodeType };
}
