// The coordinator's branch report names older messages of a source the session view's window
// lists (the window holds only the newest sent step of a pending request): back on the branch a
// step was first presented on, the server must see that the step is there, or it presents the
// step again (found by the real-Pi test in pi-recovery.test.mjs, "a branch change …").
import assert from "node:assert/strict";
import { test } from "node:test";
import { WorkflowMessageCoordinator } from "../../dist/extension/coordinator.js";

const settle = () => new Promise((resolve) => setTimeout(resolve, 5));

function entry(id, workflowMessageId, runId, requestId) {
  return {
    type: "custom_message",
    id,
    customType: "pi-workflows-step",
    details: { schema: "pi-workflows.message-details.v1", workflowMessageId, runId, kind: "step", requestId, content: {} },
  };
}

test("a branch report names an older message of a window source found on the branch, and nothing of other sources", async () => {
  // The window: the re-presented step (msg-2, sent on another branch) of req:a.
  const windowView = {
    messages: [{ workflowMessageId: "msg-s-2", runId: "run-1", kind: "step", reason: "resumed", sourceId: "req:a", order: 2, status: "sent", piEntryId: "e9", content: {} }],
    messageCount: 1,
    truncated: false,
    coordinator: { epoch: 3, active: true },
    nextEligible: undefined,
  };
  // The active branch: the original step of req:a (msg-1), and a step of another run's request.
  const branch = [entry("e1", "msg-s-1", "run-1", "req:a"), entry("e2", "msg-s-7", "run-2", "req:other")];
  const reports = [];
  const pi = { isIdle: () => true, hasPendingMessages: () => false, branch: () => branch, send: () => assert.fail("nothing to send") };
  const server = {
    reportBranch: async (epoch, report) => {
      reports.push(report);
      return { sent: [], created: [], lostTurns: 0 };
    },
    reportTurn: async () => ({ ownership: "absent" }),
    window: async () => structuredClone(windowView),
    submitAssistant: async () => {},
  };
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(3);
  coordinator.onView(structuredClone(windowView));
  for (let i = 0; i < 20 && reports.length === 0; i++) await settle();
  coordinator.stop();
  assert.equal(reports.length >= 1, true, "a branch report after the connection");
  assert.deepEqual(reports[0].found, [{ workflowMessageId: "msg-s-1", piEntryId: "e1" }]);
  assert.equal(reports[0].isIdle, true);
});
