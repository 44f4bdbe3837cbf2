// Mounting one workflow inside another.
import type { IncludeSpec, NodeContext, WorkflowDefinition } from "./types.js";

/** Mount `child` (or a thunk returning it); `input` builds the child's input from the parent context. */
export function includeWorkflow<I = any>(
  child: WorkflowDefinition<any> | (() => WorkflowDefinition<any>),
  options: { input?: (ctx: NodeContext<I>) => unknown } = {},
): IncludeSpec<I> {
  if (typeof child !== "function" && (child as WorkflowDefinition | undefined)?.kind !== "workflow") {
    throw new Error("includeWorkflow needs a workflow from defineWorkflow (or a function returning one)");
  }
  if (options.input !== undefined && typeof options.input !== "function") {
    throw new Error("includeWorkflow input must be a function of the parent context");
  }
  return Object.freeze({ kind: "include", workflow: child as IncludeSpec["workflow"], input: options.input });
}

/** The mounted child; a thunk that cannot run yet (not-yet-initialized binding) gives undefined when lenient. */
export function resolveInclude(spec: IncludeSpec, lenient: boolean): WorkflowDefinition | undefined {
  if (typeof spec.workflow !== "function") return spec.workflow;
  let child: unknown;
  try {
    child = spec.workflow();
  } catch (error) {
    if (lenient && error instanceof ReferenceError) return undefined;
    throw error;
  }
  if (lenient && child === undefined) return undefined; // a binding assigned later
  if ((child as WorkflowDefinition | undefined)?.kind !== "workflow") {
    throw new Error("an include thunk returned something that is not a workflow definition");
  }
  return child as WorkflowDefinition;
}
