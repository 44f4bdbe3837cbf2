// One node attempt and the messages that start, finish or fail it.
import type { CompiledNode } from "../compile.js";
import type { LiveSettings, SettingsVersion } from "../settings.js";
import type { NodeContext, NodeError, NodeResult } from "../types.js";
import { contextOf, type Frame } from "./frames.js";
import { type AgentExecutor, type Host, HostRejectedError, type NodeStart, type RunState, type RunStateAttempt } from "./host.js";
import { measuredOutput, OutputError, nodeError } from "./limits.js";
import { outcomeOfError, type ReplayIndex } from "./replay.js";

export type RunCommand = "start" | "resume" | "continue" | "restart";

/** Everything node execution shares within one run generation. */
export interface EngineEnv {
  host: Host;
  runId: string;
  projectPath: string;
  runState: RunState;
  command: RunCommand;
  replay: ReplayIndex;
  interactive: boolean;
  signal: AbortSignal;
  /** The newest settings version known; a new attempt freezes it. */
  settings: LiveSettings;
  now(): number;
  loadAgentExecutor(): Promise<AgentExecutor>;
}

export interface Attempt {
  env: EngineEnv;
  node: CompiledNode;
  frame: Frame;
  visit: number;
  attemptId: string;
  /** The server already holds this attempt (running or waiting), so no start fields are sent. */
  started: boolean;
  /** The unfinished attempt found in RunState, if any. */
  prior?: RunStateAttempt;
  /** An earlier attempt of this node visit that was interrupted (it reruns as this attempt). */
  interrupted?: RunStateAttempt;
  /** The settings this attempt sees, frozen at its start (null: none declared). */
  settings: SettingsVersion | null;
}

export type StepOutcome = { kind: "result"; result: NodeResult } | { kind: "waiting" };

export function startFields(attempt: Attempt, extra: { deadlineAt?: number; timeoutMs?: number } = {}): NodeStart {
  const { node, visit, settings } = attempt;
  const start: NodeStart = { nodeId: node.id, nodePath: node.path, visit, nodeType: node.type, ...extra };
  if (settings) start.settingsChangeNumber = settings.changeNumber;
  return start;
}

export async function ensureStarted(attempt: Attempt, extra?: { deadlineAt?: number; timeoutMs?: number }): Promise<void> {
  if (attempt.started) return;
  await attempt.env.host.nodeStarted(attempt.attemptId, startFields(attempt, extra));
  attempt.started = true;
}

/** Commit `output` (start and finish in one message when the attempt was never started). */
export async function complete(attempt: Attempt, rawOutput: unknown): Promise<StepOutcome> {
  let output: unknown;
  let outputBytes: number;
  try {
    ({ value: output, bytes: outputBytes } = measuredOutput(rawOutput));
  } catch (error) {
    if (error instanceof OutputError) return fail(attempt, nodeError(error.code, error.message));
    throw error;
  }
  const start = attempt.started ? undefined : startFields(attempt);
  try {
    await attempt.env.host.nodeFinished(attempt.attemptId, { output, start, outputBytes });
  } catch (error) {
    if (error instanceof HostRejectedError && error.code === "outputTooLarge") {
      return fail(attempt, nodeError("outputTooLarge", error.message));
    }
    throw error;
  }
  attempt.started = true;
  return { kind: "result", result: { outcome: "ok", output, visit: attempt.visit } };
}

export async function fail(attempt: Attempt, error: NodeError): Promise<StepOutcome> {
  const start = attempt.started ? undefined : startFields(attempt);
  await attempt.env.host.nodeFailed(attempt.attemptId, { error, start });
  attempt.started = true;
  return { kind: "result", result: { outcome: outcomeOfError(error), error, visit: attempt.visit } };
}

/** The node context of an attempt: its frame's record plus its frozen settings. */
export function attemptContext(attempt: Attempt): NodeContext {
  return contextOf(attempt.frame, attempt.env.signal, attempt.settings);
}
