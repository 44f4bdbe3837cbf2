// A checkpoint-gated release: run the checks, ask a person to approve, then write the
// release note (a manual effect: it is never repeated automatically after a crash).
//
//   pi-workflows run start examples/workflows/release-gate.workflow.ts \
//     --input-json '{"version":"1.2.0","check":"cargo --version","notesDir":"/tmp"}' --follow
//   pi-workflows checkpoint answer <run-id> '{"approved": true, "by": "me"}' --follow
import { action, checkpoint, compute, defineWorkflow, idempotentEffect, manualEffect, shell } from "pi-workflows";
import { writeFile } from "node:fs/promises";
import path from "node:path";

interface Input {
  version: string;
  /** A shell command that must succeed before the release can be approved. */
  check: string;
  notesDir: string;
}

export default defineWorkflow<Input>({
  name: "release-gate",
  input: (raw) => {
    const value = (raw ?? {}) as Partial<Input>;
    if (typeof value.version !== "string" || !/^\d+\.\d+\.\d+$/.test(value.version)) {
      throw new Error("input.version must look like 1.2.3");
    }
    if (typeof value.notesDir !== "string" || !path.isAbsolute(value.notesDir)) {
      throw new Error("input.notesDir must be an absolute directory");
    }
    return { version: value.version, check: value.check ?? "true", notesDir: value.notesDir };
  },
  startAt: "runChecks",
  nodes: {
    runChecks: shell({
      title: "Run release checks",
      effect: idempotentEffect("release.check"),
      exec: ({ input }) => ({ command: "sh", args: ["-c", input.check], timeoutMs: 10 * 60_000 }),
      parse: (receipt) => ({ exitCode: receipt.exitCode, tail: receipt.stdout.slice(-2_000) }),
    }),
    approve: checkpoint({
      title: "Approve the release",
      summary: ({ input }) => `Checks passed. Release ${input.version}? Answer {"approved": true|false, "by": "name"}.`,
    }),
    writeNotes: action({
      title: "Write the release note",
      effect: manualEffect("release.notes"),
      run: async ({ input, outputs }) => {
        const file = path.join(input.notesDir, `release-${input.version}.md`);
        const by = (outputs.approve as { by?: string }).by ?? "unknown";
        await writeFile(file, `# Release ${input.version}\n\nApproved by ${by}.\n`, { flag: "wx" });
        return { file };
      },
    }),
    rejected: compute({ title: "Release rejected", run: ({ input }) => ({ released: false, version: input.version }) }),
    checksFailed: compute({
      title: "Checks failed",
      run: ({ results }) => ({ released: false, reason: results.runChecks?.error?.message ?? "checks failed" }),
    }),
    done: compute({ title: "Released", run: ({ input, outputs }) => ({ released: true, version: input.version, notes: outputs.writeNotes }) }),
  },
  edges: [
    { from: "runChecks", switch: { on: "$result.outcome", cases: { ok: "approve", failed: "checksFailed", timed_out: "checksFailed" } } },
    { from: "approve", switch: { on: "$.approved", cases: { true: "writeNotes", false: "rejected" } } },
    { from: "writeNotes", to: "done" },
  ],
});
