// A protected human decision: a person approves a merge (or asks for changes, with text)
// in Pi or from the CLI; the model can never answer it. If nobody answers in 10 minutes, the
// declared default (`hold`) wins — never a merge.
//
//   pi-workflows run start examples/workflows/merge-approval.workflow.ts \
//     --input-json '{"branch":"fix-1","commit":"abc123"}' --follow        # waits (exit 5)
//   pi-workflows decision answer <run-id> approve --follow
//   pi-workflows decision answer <run-id> changes "split the migration first" --follow
import { choice, compute, defineHumanChoices, defineWorkflow, humanDecision, humanDecisionEdge, textInput } from "pi-workflows";

interface Input {
  branch: string;
  commit: string;
}

const choices = defineHumanChoices({
  approve: choice({ label: "Approve the merge" }),
  changes: choice({ label: "Request changes", input: textInput({ label: "What should change?", maxLength: 500 }) }),
  hold: choice({ label: "Hold" }),
});

export default defineWorkflow<Input>({
  name: "merge-approval",
  input: (raw) => {
    const value = (raw ?? {}) as Partial<Input>;
    if (typeof value.branch !== "string" || value.branch === "") throw new Error("input.branch is required");
    if (typeof value.commit !== "string" || !/^[0-9a-f]{6,40}$/.test(value.commit)) throw new Error("input.commit must be a commit hash");
    return { branch: value.branch, commit: value.commit };
  },
  startAt: "approve",
  nodes: {
    approve: humanDecision<Input>({
      title: "Approve the merge",
      audience: "operator",
      choices,
      onTimeout: { afterMs: 10 * 60_000, response: { choice: "hold" } },
      request: ({ input }) => ({
        title: `Merge ${input.branch}?`,
        // What is decided, exactly: bound by the request digest, never shown.
        subject: { branch: input.branch, commit: input.commit },
        presentation: {
          schema: "pi-workflows.decision-presentation.v1",
          summary: `Merge ${input.branch} at ${input.commit.slice(0, 12)} into main.`,
          blocks: [{ kind: "fields", fields: [{ label: "Branch", value: input.branch }, { label: "Commit", value: input.commit }] }],
        },
      }),
    }),
    merge: compute({ title: "Merge", run: ({ input }) => ({ merged: input.branch }) }),
    revise: compute({ title: "Revise", run: ({ outputs }) => ({ changes: outputs.approve.text }) }),
    hold: compute({ title: "Hold", run: ({ outputs }) => ({ held: true, by: outputs.approve.provenance }) }),
  },
  edges: [humanDecisionEdge({ from: "approve", choices, cases: { approve: "merge", changes: "revise", hold: "hold" } })],
});
