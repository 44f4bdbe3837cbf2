// What the engine needs from its host (the runner channel, or an in-memory fake in tests),
// and the narrow RunState it executes from. Both mirror docs/RUNNER-PROTOCOL.md.
import type { AgentExecutor as PiAgentExecutor, AgentResult } from "../agent/executor.js";
import type { NodeError } from "../types.js";

export type AttemptStatus = "running" | "waiting" | "completed" | "failed" | "timed_out" | "cancelled";

export interface RunStateAttempt {
  attemptId: string;
  nodeId: string;
  nodePath: string;
  visit: number;
  nodeType: string;
  status: AttemptStatus | string;
  output?: unknown;
  error?: NodeError | null;
  /** The settings version this attempt saw (null when the run declares no settings). */
  settingsChangeNumber?: number | null;
}

export interface RunStateEffect {
  effectId: string;
  effectType: string;
  idempotencyKey: string;
  status: "pending" | "applying" | "applied" | "rejected" | "cancelled" | "ambiguous" | string;
  result?: unknown;
}

export interface RunStateInteraction {
  requestId: string;
  attemptId: string;
  kind: string;
  status: string;
  answer?: unknown;
  /** A submitted candidate this runner must judge (`interaction.accepted` / `.rejected`). */
  validating?: { submissionId: string; payload: unknown } | null;
}

export interface RunStateContinuation {
  parentRunId: string;
  parentAttemptId: string;
  answer: unknown;
  /** The parent run's attempts (through the checkpoint), when the server provides them. */
  attempts?: RunStateAttempt[];
}

export interface RunState {
  schema: "pi-workflows.run-state.v1";
  runId: string;
  workflowName: string;
  revision: number;
  input: unknown;
  attempts: RunStateAttempt[];
  effects: RunStateEffect[];
  interaction: RunStateInteraction | null;
  continuation: RunStateContinuation | null;
  /** "interactive" sends agent steps to the origin session; anything else runs headless. */
  executionMode?: "interactive" | "headless";
  /** The current settings version `{changeNumber, value}` (null: none declared). */
  settings?: unknown;
  /** Frozen settings versions of unfinished and interrupted attempts that are not current. */
  settingsVersions?: unknown[];
}

/** Start fields, sent with the first message of an attempt that was never started. */
export interface NodeStart {
  nodeId: string;
  nodePath: string;
  visit: number;
  nodeType: string;
  deadlineAt?: number;
  timeoutMs?: number;
  /** The settings version the attempt sees (runs with declared settings). */
  settingsChangeNumber?: number;
}

export interface EffectReservation {
  effectId: string;
  status: string;
  execute: boolean;
  /** The attempt number the runner holds when it executes. */
  attempt?: number;
  /** A read-back effect whose earlier attempt was interrupted: observe before applying. */
  observeFirst?: boolean;
  result?: unknown;
}

export interface EffectReserveRequest {
  effectType: string;
  idempotencyKey: string;
  requestFingerprint: string;
  recovery: "idempotent" | "readBack" | "manual";
  /** Shown to a reviewer: printable, at most 200 bytes, never a secret (no arguments, no payload). */
  requestSummary?: string;
}

export type InteractionKind = "agent" | "assistant" | "checkpoint" | "decision";

/** One method per runner message; each resolves when the server accepted (or adopted) it. */
export interface Host {
  nodeStarted(attemptId: string, start: NodeStart): Promise<void>;
  nodeUpdate(attemptId: string, update: { message: string; completed?: number; total?: number }): Promise<void>;
  /**
   * `start` is present when the attempt was never started (a pure compute node: one commit);
   * `outputBytes` is the size of the output's canonical JSON when the engine measured it.
   */
  nodeFinished(attemptId: string, finished: { output: unknown; start?: NodeStart; outputBytes?: number }): Promise<void>;
  nodeFailed(attemptId: string, failed: { error: NodeError; start?: NodeStart }): Promise<void>;
  runFinished(
    result: { outcome: "completed"; output: unknown } | { outcome: "failed" | "timed_out"; error: NodeError },
  ): Promise<void>;
  runParked(reason: "boundary" | "workflowSourceChanged"): Promise<void>;
  interactionAccepted(attemptId: string, verdict: { requestId: string; submissionId: string; output: unknown }): Promise<void>;
  interactionRejected(attemptId: string, verdict: { requestId: string; submissionId: string; error: NodeError }): Promise<void>;
  interactionRequested(
    attemptId: string,
    /** A protected decision's `subject` is bound by its digest and kept out of the contract. */
    request: { requestId: string; kind: InteractionKind; contract: unknown; deadlineAt?: number; subject?: unknown },
  ): Promise<void>;
  notificationRequested(
    attemptId: string,
    request: { output: unknown; notification: { kind: "progress" | "final"; message: string } },
  ): Promise<void>;
  effectReserve(
    attemptId: string,
    request: EffectReserveRequest,
  ): Promise<EffectReservation>;
  /** `ambiguous`: a read-back check could not prove either way (an operator reviews it). */
  effectSettle(
    attemptId: string,
    settle: { effectId: string; outcome: "applied" | "rejected" | "ambiguous"; result?: unknown },
  ): Promise<void>;
  processRegister(pid: number): Promise<void>;
  processUnregister(pid: number): Promise<void>;
}

/** A host refused a message (`outcome: "rejected"`); `code` is the server's error class. */
export class HostRejectedError extends Error {
  constructor(
    readonly kind: string,
    readonly code: string,
    message: string,
  ) {
    super(`${kind} rejected (${code}): ${message}`);
    this.name = "HostRejectedError";
  }
}

// One headless agent step: the contract is declared once, next to its implementation
// (src/agent/executor.ts, loaded lazily by the runner); the engine needs only its types.

export type AgentRunResult = AgentResult;
export type AgentExecutor = PiAgentExecutor;
