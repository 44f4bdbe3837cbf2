// A test-only Pi extension: `/e2e-tree <entryId>` moves the session's leaf with
// `ctx.navigateTree` (what `/tree` does in the TUI), so RPC tests can change the active branch
// inside the same session (RPC's `fork` makes a new session instead).
export default function treeExtension(pi) {
  pi.registerCommand("e2e-tree", {
    description: "test only: navigate the session tree to an entry",
    handler: async (args, ctx) => {
      const result = await ctx.navigateTree(args.trim(), { summarize: false });
      ctx.ui.notify(`e2e-tree: ${result.cancelled ? "cancelled" : `leaf ${ctx.sessionManager.getLeafId()}`}`, "info");
    },
  });
}
