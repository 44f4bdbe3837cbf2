// Includes `repo-facts` as a mounted sub-workflow, then turns its summary into a short
// digest. The included workflow's nodes run under the mount `facts/…`, so its effect keys
// never collide with this workflow's own nodes.
//
//   pi-workflows run start examples/workflows/weekly-digest.workflow.ts --follow
import { compute, defineWorkflow, includeWorkflow } from "pi-workflows";
import repoFacts from "./repo-facts.workflow.ts";

export default defineWorkflow({
  name: "weekly-digest",
  startAt: "facts",
  includes: {
    facts: includeWorkflow(repoFacts, { input: () => ({ top: 3 }) }),
  },
  nodes: {
    digest: compute({
      title: "Write the digest",
      run: ({ outputs }) => {
        const facts = (outputs.facts as { output: Record<string, any> }).output;
        const largest = (facts.largest as { file: string; lines: number }[]).map((entry) => `${entry.file} (${entry.lines})`);
        return {
          headline: `${facts.trackedFiles} files, ${facts.sourceLines} source lines`,
          largest,
          commits: (facts.recentCommits as string[]).length,
        };
      },
    }),
  },
  edges: [{ from: "facts.summary", to: "digest" }],
});
