// The pi-workflows authoring API (what workflow files import) plus compile and engine entry points.
export { defineWorkflow, DEFAULT_MAX_STEPS } from "./define.js";
export {
  action,
  agent,
  assistantMessage,
  checkpoint,
  compute,
  decision,
  idempotentEffect,
  manualEffect,
  readBackEffect,
  notify,
  shell,
} from "./nodes.js";
export { decisionEdge } from "./edges.js";
export { choice, defineHumanChoices, humanDecision, humanDecisionEdge, textInput } from "./human-decision.js";
export { includeWorkflow } from "./include.js";
export { compileWorkflow, type CompiledWorkflow, type DefinitionSnapshot } from "./compile.js";
export { canonicalJson, canonicalDigest, sha256Hex } from "./canonical.js";
export { runWorkflow, type RunWorkflowOptions, type RunOutcome, type RunCommand } from "./engine.js";
export type {
  AgentExecutor,
  AgentRunResult,
  EffectReservation,
  Host,
  NodeStart,
  RunState,
  RunStateAttempt,
  RunStateEffect,
} from "./engine/host.js";
export { HostRejectedError } from "./engine/host.js";
export { LiveSettings, type SettingsVersion, type SettingsSnapshot } from "./settings.js";
export type * from "./types.js";
