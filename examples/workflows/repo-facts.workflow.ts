// Gathers facts about the repository in the current directory: tracked files by
// extension, line counts of the largest source files, and recent commits. Shell steps
// only read (idempotent effects); the summary is a pure computation.
//
//   pi-workflows run start examples/workflows/repo-facts.workflow.ts --follow
import { compute, defineWorkflow, idempotentEffect, shell } from "pi-workflows";

interface Input {
  /** How many of the largest files to report. */
  top: number;
}

const SOURCE = /\.(rs|ts|js|mjs|py|go|java|c|h|cpp|md|sql|toml|json|sh)$/;

export default defineWorkflow<Input>({
  name: "repo-facts",
  input: (raw) => {
    const top = (raw as { top?: unknown } | null)?.top ?? 5;
    if (typeof top !== "number" || !Number.isInteger(top) || top < 1 || top > 50) {
      throw new Error("input.top must be an integer from 1 to 50");
    }
    return { top };
  },
  startAt: "listFiles",
  nodes: {
    listFiles: shell({
      title: "List tracked files",
      effect: idempotentEffect("repo.read"),
      exec: () => ({
        command: "sh",
        args: ["-c", "git ls-files 2>/dev/null || find . -type f -not -path './.git/*' -not -path '*/node_modules/*' -not -path './target/*'"],
        timeoutMs: 30_000,
      }),
      parse: (receipt) => receipt.stdout.split("\n").filter((line) => line.length > 0).slice(0, 20_000),
    }),
    byExtension: compute({
      title: "Count files by extension",
      run: ({ outputs }) => {
        const counts: Record<string, number> = {};
        for (const file of outputs.listFiles as string[]) {
          const match = /\.([A-Za-z0-9]+)$/.exec(file);
          const extension = match ? match[1]!.toLowerCase() : "(none)";
          counts[extension] = (counts[extension] ?? 0) + 1;
        }
        return Object.fromEntries(Object.entries(counts).sort((a, b) => b[1] - a[1]).slice(0, 12));
      },
    }),
    countLines: shell({
      title: "Count lines of source files",
      effect: idempotentEffect("repo.read"),
      exec: ({ outputs }) => {
        const sources = (outputs.listFiles as string[]).filter((file) => SOURCE.test(file)).slice(0, 2_000);
        return { command: "wc", args: ["-l", "--", ...sources, "/dev/null"], allowNonZeroExit: true, timeoutMs: 30_000 };
      },
      parse: (receipt) =>
        receipt.stdout
          .split("\n")
          .map((line) => /^\s*(\d+)\s+(.+)$/.exec(line))
          .filter((match): match is RegExpExecArray => match !== null && match[2] !== "total" && match[2] !== "/dev/null")
          .map((match) => ({ file: match[2]!, lines: Number(match[1]) })),
    }),
    recentCommits: shell({
      title: "Recent commits",
      effect: idempotentEffect("repo.read"),
      exec: () => ({ command: "git", args: ["log", "--oneline", "-n", "10"], allowNonZeroExit: true, timeoutMs: 30_000 }),
      parse: (receipt) => (receipt.exitCode === 0 ? receipt.stdout.split("\n").filter(Boolean) : []),
    }),
    summary: compute({
      title: "Summarize",
      run: ({ input, outputs }) => {
        const files = outputs.countLines as { file: string; lines: number }[];
        const total = files.reduce((sum, entry) => sum + entry.lines, 0);
        return {
          trackedFiles: (outputs.listFiles as string[]).length,
          byExtension: outputs.byExtension,
          sourceLines: total,
          largest: [...files].sort((a, b) => b.lines - a.lines).slice(0, input.top),
          recentCommits: outputs.recentCommits,
        };
      },
    }),
  },
  edges: [
    { from: "listFiles", to: "byExtension" },
    { from: "byExtension", to: "countLines" },
    { from: "countLines", to: "recentCommits" },
    { from: "recentCommits", to: "summary" },
  ],
});
