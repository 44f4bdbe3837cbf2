// One invocation of a (root or included) workflow: its input and local outputs and results.
import type { CompiledMount, CompiledScope } from "../compile.js";
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

export function contextOf(frame: Frame, signal: AbortSignal): NodeContext {
  return { input: frame.input, outputs: { ...frame.outputs }, results: { ...frame.results }, signal };
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
