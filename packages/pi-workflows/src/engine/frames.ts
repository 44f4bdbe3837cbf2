// One invocation of a (root or included) workflow: its input and local outputs and results.
import type { CompiledMount, CompiledScope } from "../compile.js";
import type { SettingsVersion } from "../settings.js";
import type { NodeContext, NodeResult } from "../types.js";

export interface Frame {
  scope: CompiledScope;
  input: unknown;
  outputs: Record<string, unknown>;
  results: Record<string, NodeResult>;
  /** Node executions in this invocation (nested ones included), bounded by its maxSteps. */
  steps: number;
  parent?: Frame;
  /** The mount this frame was entered through (absent for the root). */
  mount?: CompiledMount;
}

export function rootFrame(scope: CompiledScope, input: unknown): Frame {
  return { scope, input, outputs: {}, results: {}, steps: 0 };
}

/** `settings` only for node attempts: include inputs are recomputed on replay, so they see none. */
export function contextOf(frame: Frame, signal: AbortSignal, settings: SettingsVersion | null = null): NodeContext {
  const context: NodeContext = { input: frame.input, outputs: readOnly(frame.outputs), results: readOnly(frame.results), signal };
  if (settings) {
    context.settings = settings.value;
    context.settingsChangeNumber = settings.changeNumber;
  }
  return context;
}

/** Refuses writes through the view (a TypeError in strict code). */
const READ_ONLY: ProxyHandler<Record<string, unknown>> = {
  set: () => false,
  deleteProperty: () => false,
  defineProperty: () => false,
  setPrototypeOf: () => false,
};

/**
 * A read-only view of the engine's record: O(1) per node, where a copy cost O(nodes so far)
 * and made long workflows quadratic. Node code cannot change what routing and later nodes see.
 */
function readOnly<T extends Record<string, unknown>>(record: T): T {
  return new Proxy(record, READ_ONLY) as T;
}

/** Record a result under `name`: only `ok` keeps an output; a failure removes the old one. */
export function record(frame: Frame, name: string, result: NodeResult): void {
  frame.results[name] = result;
  if (result.outcome === "ok") frame.outputs[name] = result.output;
  else delete frame.outputs[name];
}

export function* framesUpward(frame: Frame): Generator<Frame> {
  for (let current: Frame | undefined = frame; current; current = current.parent) yield current;
}
