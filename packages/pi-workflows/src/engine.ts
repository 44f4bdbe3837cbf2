// The workflow engine: walks a compiled workflow from RunState, replaying committed attempts and
// proposing every new fact to a Host. One run generation per call.
import type { CompiledNode, CompiledWorkflow } from "./compile.js";
import { LiveSettings, parseSettingsVersion, type SettingsVersion } from "./settings.js";
import type { NodeError } from "./types.js";
import { type Attempt, type EngineEnv, type RunCommand, type StepOutcome } from "./engine/attempt.js";
import { runAction, runShellNode } from "./engine/effect-node.js";
import { type Frame, framesUpward, record, rootFrame } from "./engine/frames.js";
import type { AgentExecutor, Host, RunState, RunStateAttempt } from "./engine/host.js";
import { runInteractiveNode } from "./engine/interactive-node.js";
import { nodeError } from "./engine/limits.js";
import { ReplayIndex } from "./engine/replay.js";
import { enter, type Next, route, unhandledFailure } from "./engine/routing.js";
import { runCompute, runNotify } from "./engine/simple-nodes.js";

export type { RunCommand } from "./engine/attempt.js";
export * from "./engine/host.js";
export { idempotencyKey, requestFingerprint } from "./engine/effect-keys.js";

export interface RunWorkflowOptions {
  workflow: CompiledWorkflow;
  host: Host;
  runState: RunState;
  command: RunCommand;
  projectPath: string;
  /** Unique per runner epoch: new attempt IDs are `<prefix>-<n>`. */
  attemptIdPrefix: string;
  loadAgentExecutor?: () => Promise<AgentExecutor>;
  signal?: AbortSignal;
  now?: () => number;
  /** The newest settings a host told the runner about (default: the run state's, fixed). */
  settings?: LiveSettings;
}

export type RunOutcome =
  | { kind: "completed"; output: unknown }
  | { kind: "failed"; error: NodeError }
  /** An interaction was requested: the run waits and keeps no runner. */
  | { kind: "waiting" }
  /** The run signal was aborted; nothing more was proposed. */
  | { kind: "stopped" };

export async function runWorkflow(options: RunWorkflowOptions): Promise<RunOutcome> {
  const { workflow, host, runState, command } = options;
  const signal = options.signal ?? new AbortController().signal;
  const env: EngineEnv = {
    host,
    runId: runState.runId,
    projectPath: options.projectPath,
    runState,
    command,
    // start and restart begin at the workflow start; resume and continue replay committed attempts.
    replay: new ReplayIndex(runState, command === "resume" || command === "continue"),
    interactive: runState.executionMode === "interactive",
    signal,
    settings: options.settings ?? new LiveSettings(runState.settings),
    now: options.now ?? Date.now,
    loadAgentExecutor: options.loadAgentExecutor ?? (() => Promise.reject(new Error("no agent executor is available"))),
  };
  if (command === "continue") {
    const parent = runState.continuation?.parentAttemptId;
    // Routing resumes at the checkpoint's edge, so its node must be known from the run state.
    if (!parent || !env.replay.has(parent)) {
      const why = `continue names parent attempt "${parent ?? "(none)"}", but neither runState.attempts nor runState.continuation.attempts contains it`;
      return finishRun(host, { kind: "failed", error: nodeError("continuationUnavailable", why) });
    }
  }
  const root = rootFrame(workflow.root, runState.input);
  const visits = new Map<string, number>();
  let totalSteps = 0;
  let sequence = 0;
  let next: Next = await enter(root, workflow.root.definition.startAt, signal);
  for (;;) {
    if (signal.aborted) return { kind: "stopped" };
    if (next.kind === "fail") return finishRun(host, { kind: "failed", error: next.error });
    if (next.kind === "end") {
      const { result, nodePath } = next;
      return finishRun(host, result.outcome === "ok" ? { kind: "completed", output: result.output ?? null } : { kind: "failed", error: unhandledFailure(nodePath, result) });
    }
    const { frame, node } = next;
    totalSteps += 1;
    const overLimit = stepLimitExceeded(frame, totalSteps, node);
    if (overLimit) return finishRun(host, { kind: "failed", error: overLimit });
    const visit = (visits.get(node.path) ?? 0) + 1;
    visits.set(node.path, visit);
    const prior = env.replay.attempt(node.path, visit);
    let result = prior ? ReplayIndex.finishedResult(prior) : undefined;
    if (!result) {
      // Only a running or waiting attempt continues in place; an interrupted one reruns as a
      // new attempt (its effect, if any, decides whether the work may repeat).
      const open = prior && (prior.status === "running" || prior.status === "waiting") ? prior : undefined;
      const attempt: Attempt = {
        env,
        node,
        frame,
        visit,
        attemptId: open?.attemptId ?? `${options.attemptIdPrefix}-${++sequence}`,
        started: open !== undefined,
        prior: open,
        interrupted: open ? undefined : prior,
        // A rerun of an interrupted attempt is the same node visit: it keeps that copy too.
        settings: prior ? frozenSettings(runState, prior, env.settings) : env.settings.current(),
      };
      const step = await executeNode(attempt);
      if (step.kind === "waiting") return { kind: "waiting" };
      result = step.result;
    }
    record(frame, node.id, result);
    next = await route(frame, node, result, signal);
  }
}

/**
 * The settings an unfinished or interrupted attempt saw when it started: it continues in place
 * (or reruns as the same node visit), so it must see them again (an effect request computed
 * from them must match its reservation).
 */
function frozenSettings(runState: RunState, prior: RunStateAttempt, live: LiveSettings): SettingsVersion | null {
  const number = prior.settingsChangeNumber;
  if (number === null || number === undefined) return live.current();
  const current = live.current();
  if (current?.changeNumber === number) return current;
  for (const raw of runState.settingsVersions ?? []) {
    const version = parseSettingsVersion(raw);
    if (version?.changeNumber === number) return version;
  }
  throw new Error(`the run state lacks settings version ${number} of attempt ${prior.attemptId}`);
}

/** Count one node against the root and every enclosing invocation; an error when one is over. */
function stepLimitExceeded(frame: Frame, totalSteps: number, node: CompiledNode): NodeError | undefined {
  for (const current of framesUpward(frame)) current.steps += 1;
  const rootDefinition = [...framesUpward(frame)].at(-1)!.scope.definition;
  if (totalSteps > rootDefinition.maxSteps) {
    return nodeError("maxStepsExceeded", `workflow "${rootDefinition.name}" exceeded maxSteps (${rootDefinition.maxSteps}) before node "${node.path}"`);
  }
  for (const current of framesUpward(frame)) {
    const definition = current.scope.definition;
    if (current.parent && current.steps > definition.maxSteps) {
      return nodeError("maxStepsExceeded", `included workflow "${current.mount!.path}" exceeded maxSteps (${definition.maxSteps}) before node "${node.path}"`);
    }
  }
  return undefined;
}

function executeNode(attempt: Attempt): Promise<StepOutcome> {
  const node = attempt.node.node;
  switch (node.kind) {
    case "compute":
      return runCompute(attempt, node);
    case "action":
      return runAction(attempt, node);
    case "shell":
      return runShellNode(attempt, node);
    case "notify":
      return runNotify(attempt, node);
    case "agent":
    case "decision":
    case "checkpoint":
    case "humanDecision":
      return runInteractiveNode(attempt, node);
  }
}

async function finishRun(host: Host, outcome: Extract<RunOutcome, { kind: "completed" | "failed" }>): Promise<RunOutcome> {
  if (outcome.kind === "completed") await host.runFinished({ outcome: "completed", output: outcome.output });
  // A declared deadline that passed with no `timed_out` route ends the run `timed_out`
  // (failure class workerTimedOut), apart from a node that failed.
  else if (outcome.error.code === "timedOut") await host.runFinished({ outcome: "timed_out", error: outcome.error });
  else await host.runFinished({ outcome: "failed", error: outcome.error });
  return outcome;
}
