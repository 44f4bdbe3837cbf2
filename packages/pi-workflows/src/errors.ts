// Errors with the stable codes the resolver prints.
export class WorkflowError extends Error {
  constructor(
    readonly code: "workflowNotFound" | "invalidDefinition" | "invalidInput" | "invalidArguments" | "projectNotFound",
    message: string,
  ) {
    super(message);
    this.name = "WorkflowError";
  }
}
