// `agent({allowedTools})`: during a workflow-owned turn, the only tools the model may call
// besides `workflow`. One rule and one refusal text for both modes: the headless bridge
// extension (./bridge/extension.ts) and the interactive extension (../extension/coordinator.ts).

/** The tool a workflow step always allows: it is how the step is answered. */
export const WORKFLOW_TOOL_NAME = "workflow";

/** Why `toolName` may not run during a step that allows only `allowed` (undefined: it may). */
export function toolRefusal(toolName: string, allowed: readonly string[] | null | undefined): string | undefined {
  if (toolName === WORKFLOW_TOOL_NAME || allowed === null || allowed === undefined || allowed.includes(toolName)) return undefined;
  const named = allowed.length > 0 ? allowed.join(", ") : "none";
  return `pi-workflows: this workflow step does not allow the "${toolName}" tool (allowed tools: ${named}; the workflow tool is always available). Do the step without it.`;
}
