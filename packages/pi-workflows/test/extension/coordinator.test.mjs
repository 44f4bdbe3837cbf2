// The WorkflowMessageCoordinator's send algorithm against a fake Pi and a fake server (no Pi,
// no Node 22): branch report before any send or turn report after every connection, only the
// view's nextEligible, only when idle with no pending input, a found entry reported instead of
// resent, one send per ID, turn start/end buffered and reported in order, aborted as the end's
// outcome, fencing, and a reconnect that re-reports the same turn.
import assert from "node:assert/strict";
import { test } from "node:test";
import { turnEndFromBranch, WorkflowMessageCoordinator } from "../../dist/extension/coordinator.js";

const settle = () => new Promise((resolve) => setTimeout(resolve, 5));

function message(id, extra = {}) {
  return {
    workflowMessageId: id,
    runId: "run-1",
    kind: "step",
    reason: "initial",
    sourceId: `req:${id}`,
    order: Number(id.split("-").pop()) || 1,
    status: "pending",
    content: { workflow: "wf", nodePath: "a", attemptId: id, prompt: "Do it", expectedOutput: "{ok: true}" },
    ...extra,
  };
}

function view(epoch, messages, extra = {}) {
  return {
    messages,
    messageCount: messages.length,
    truncated: false,
    coordinator: { epoch, active: true },
    nextEligible: messages.find((m) => m.status === "pending")?.workflowMessageId,
    ...extra,
  };
}

class FakePi {
  idle = true;
  pending = false;
  entries = [];
  sends = [];
  /** When set, a triggering send appends its entry later (as Pi does when the run begins). */
  deferEntries = false;
  isIdle() {
    return this.idle;
  }
  hasPendingMessages() {
    return this.pending;
  }
  branch() {
    return this.entries;
  }
  send(message, triggerTurn) {
    this.sends.push({ message, triggerTurn });
    const entry = { type: "custom_message", id: `e${this.entries.length + 1}`, customType: message.customType, details: message.details };
    if (triggerTurn) {
      this.idle = false;
      if (this.deferEntries) this.later = entry;
      else this.entries.push(entry);
    } else {
      this.entries.push(entry);
    }
  }
  appendLater() {
    if (this.later) this.entries.push(this.later);
    this.later = undefined;
  }
}

class FakeServer {
  calls = [];
  current;
  turnOwnership = "active";
  fail;
  constructor(current) {
    this.current = current;
  }
  async reportBranch(epoch, report) {
    this.calls.push({ op: "reportBranch", epoch, report });
    if (this.fail) throw this.fail;
    // The server marks found messages sent.
    for (const found of report.found) {
      const m = this.current.messages.find((x) => x.workflowMessageId === found.workflowMessageId);
      if (m) {
        m.status = "sent";
        m.piEntryId = found.piEntryId;
      }
    }
    this.current.nextEligible = this.current.messages.find((m) => m.status === "pending")?.workflowMessageId;
    return { sent: report.found.map((f) => f.workflowMessageId), created: [], lostTurns: 0 };
  }
  async reportTurn(epoch, report) {
    this.calls.push({ op: "reportTurn", epoch, report });
    if (this.fail) throw this.fail;
    return { ownership: report.phase === "start" ? this.turnOwnership : "settled" };
  }
  async window(epoch) {
    this.calls.push({ op: "window", epoch });
    return structuredClone({ ...this.current, coordinator: { epoch, active: this.current.coordinator.active } });
  }
  async submitAssistant(epoch, runId, requestId, text, key) {
    this.calls.push({ op: "submitAssistant", epoch, runId, requestId, text, key });
  }
  ops() {
    return this.calls.filter((c) => c.op !== "window").map((c) => (c.op === "reportTurn" ? `turn:${c.report.phase}` : c.op));
  }
}

async function setup(messages = [message("msg-x-1")], epoch = 7) {
  const pi = new FakePi();
  const server = new FakeServer(view(epoch, messages));
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(epoch);
  coordinator.onView(structuredClone(server.current));
  await settle();
  await coordinator.idle();
  return { pi, server, coordinator };
}

test("after a connection it reports the branch before it sends, then sends nextEligible once", async () => {
  const { pi, server, coordinator } = await setup();
  assert.equal(server.ops()[0], "reportBranch", "the first call after a connection is a branch report");
  assert.equal(pi.sends.length, 1);
  assert.equal(pi.sends[0].message.details.workflowMessageId, "msg-x-1");
  assert.equal(pi.sends[0].triggerTurn, true);
  assert.match(pi.sends[0].message.content, /"action": "submit", "requestId": "req:msg-x-1"/);
  // Polls while the entry is not confirmed never send the same ID again.
  pi.idle = true;
  for (let i = 0; i < 3; i++) coordinator.kick();
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 1, "a queued ID is never sent twice");
});

test("it waits for Pi to be idle with no pending input", async () => {
  const pi = new FakePi();
  pi.idle = false;
  const server = new FakeServer(view(3, [message("msg-x-1")]));
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(3);
  coordinator.onView(structuredClone(server.current));
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 0, "busy: no send");
  assert.equal(server.calls[0].report.isIdle, false);
  pi.idle = true;
  pi.pending = true;
  coordinator.kick();
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 0, "pending user input: no send");
  pi.pending = false;
  coordinator.kick();
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 1);
});

test("a message already on the branch is reported, never sent again", async () => {
  const pi = new FakePi();
  pi.entries.push({ type: "custom_message", id: "e9", customType: "pi-workflows-step", details: { workflowMessageId: "msg-x-1" } });
  const server = new FakeServer(view(4, [message("msg-x-1")]));
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(4);
  coordinator.onView(structuredClone(server.current));
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 0);
  const report = server.calls.find((c) => c.op === "reportBranch").report;
  assert.deepEqual(report.found, [{ workflowMessageId: "msg-x-1", piEntryId: "e9" }]);
});

test("nothing is sent or reported without the active epoch's view", async () => {
  const pi = new FakePi();
  const server = new FakeServer(view(5, [message("msg-x-1")]));
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(5);
  coordinator.onView({ ...structuredClone(server.current), coordinator: { epoch: 4, active: true } }); // an older epoch's view
  coordinator.onView({ ...structuredClone(server.current), coordinator: { epoch: 5, active: false } }); // fenced
  await settle();
  await coordinator.idle();
  assert.equal(server.calls.length, 0);
  assert.equal(pi.sends.length, 0);
});

test("after a send: the entry is reported, the turn start and end follow in order, then the next message", async () => {
  const messages = [message("msg-x-1"), message("msg-x-2", { order: 2 })];
  const pi = new FakePi();
  pi.deferEntries = true;
  const server = new FakeServer(view(2, messages));
  server.current.nextEligible = "msg-x-1";
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(2);
  coordinator.onView(structuredClone(server.current));
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 1);
  // Pi begins the run: agent_start before the entry is confirmed: the start is buffered.
  coordinator.agentStart();
  await settle();
  await coordinator.idle();
  assert.ok(!server.ops().includes("turn:start"), "no turn report before the message is confirmed");
  pi.appendLater();
  coordinator.kick();
  await settle();
  await coordinator.idle();
  const ops = server.ops();
  assert.deepEqual(ops.slice(0, 3), ["reportBranch", "reportBranch", "turn:start"], ops.join(","));
  const start = server.calls.find((c) => c.op === "reportTurn");
  assert.equal(start.report.workflowMessageId, "msg-x-1");
  // A retry of the same prompt starts another low-level run: still the same turn.
  coordinator.agentStart();
  pi.entries.push({ type: "message", id: "a1", message: { role: "assistant", stopReason: "stop", content: [{ type: "text", text: "done" }] } });
  pi.idle = true;
  // The server would have the second message eligible only after the end; the fake keeps it pending.
  server.current.nextEligible = "msg-x-2";
  coordinator.agentSettled(turnEndFromBranch(pi.entries, false));
  await settle();
  await coordinator.idle();
  const turns = server.calls.filter((c) => c.op === "reportTurn");
  assert.equal(turns.length, 2, "one start, one end");
  assert.equal(turns[1].report.turnId, turns[0].report.turnId);
  assert.equal(turns[1].report.outcome, "completed");
  assert.equal(turns[1].report.responseEntryId, "a1");
  assert.equal(pi.sends.length, 2, "the next eligible message follows the end");
  assert.equal(pi.sends[1].message.details.workflowMessageId, "msg-x-2");
});

test("Escape: the end is reported as aborted and no pause command is sent", async () => {
  const { pi, server, coordinator } = await setup();
  coordinator.agentStart();
  await settle();
  await coordinator.idle();
  pi.idle = true;
  pi.entries.push({ type: "message", id: "a1", message: { role: "assistant", stopReason: "aborted", content: [] } });
  coordinator.agentSettled(turnEndFromBranch(pi.entries, true));
  await settle();
  await coordinator.idle();
  const end = server.calls.filter((c) => c.op === "reportTurn").pop();
  assert.equal(end.report.phase, "end");
  assert.equal(end.report.outcome, "aborted");
  assert.ok(server.calls.every((c) => ["reportBranch", "reportTurn", "window"].includes(c.op)), "only reports: no pause command");
});

test("a reconnect (new epoch) reports the branch again, then re-reports the open turn", async () => {
  const { pi, server, coordinator } = await setup();
  coordinator.agentStart();
  await settle();
  await coordinator.idle();
  const firstTurn = server.calls.find((c) => c.op === "reportTurn" && c.report.phase === "start").report.turnId;
  coordinator.disconnected();
  server.calls.length = 0;
  coordinator.connected(8);
  coordinator.onView({ ...structuredClone(server.current), coordinator: { epoch: 8, active: true } });
  await settle();
  await coordinator.idle();
  assert.deepEqual(server.ops().slice(0, 2), ["reportBranch", "turn:start"]);
  assert.equal(server.calls[0].epoch, 8);
  assert.equal(server.calls[0].report.isIdle, false, "Pi is busy with the turn");
  assert.equal(server.calls.find((c) => c.op === "reportTurn").report.turnId, firstTurn, "the same turn ID across reconnects");
  assert.equal(pi.sends.length, 1);
});

test("a turn the server does not own is not reported at its end", async () => {
  const { pi, server, coordinator } = await setup();
  server.turnOwnership = "absent";
  coordinator.agentStart();
  await settle();
  await coordinator.idle();
  pi.idle = true;
  coordinator.agentSettled({ outcome: "completed" });
  await settle();
  await coordinator.idle();
  assert.equal(server.calls.filter((c) => c.op === "reportTurn").length, 1, "only the refused start");
});

test("a fenced report stops sending for that epoch", async () => {
  const pi = new FakePi();
  const server = new FakeServer(view(9, [message("msg-x-1")]));
  server.fail = Object.assign(new Error("another connection coordinates this session now"), { code: "coordinatorFenced" });
  const logs = [];
  const coordinator = new WorkflowMessageCoordinator(pi, server, (level, text) => logs.push(text));
  coordinator.connected(9);
  coordinator.onView(structuredClone(server.current));
  await settle();
  await coordinator.idle();
  assert.equal(pi.sends.length, 0);
  assert.equal(coordinator.activeEpoch, undefined);
  assert.match(logs.join("\n"), /another Pi process coordinates this session/);
});

test("a branch change makes it report again; decisions and notifications start no turn", async () => {
  const messages = [message("msg-x-1", { kind: "decision", content: { prompt: "Ship?", choices: ["ship", "fix"] } })];
  const { pi, server, coordinator } = await setup(messages);
  assert.equal(pi.sends.length, 1);
  assert.equal(pi.sends[0].triggerTurn, false);
  assert.match(pi.sends[0].message.content, /\/workflow answer run-1 <choice>/);
  const reports = server.calls.filter((c) => c.op === "reportBranch").length;
  assert.ok(reports >= 2, "the appended decision is reported at once");
  coordinator.branchChanged();
  await settle();
  await coordinator.idle();
  assert.equal(server.calls.filter((c) => c.op === "reportBranch").length, reports + 1);
});

test("an assistant-message step submits the visible reply before the turn end", async () => {
  const messages = [message("msg-x-1", { content: { workflow: "wf", nodePath: "reply", attemptId: "x", prompt: "Say hi", form: "assistantMessage", maxChars: 20 } })];
  const { pi, server, coordinator } = await setup(messages);
  assert.match(pi.sends[0].message.content, /visible reply of at most 20 characters/);
  coordinator.agentStart();
  await settle();
  await coordinator.idle();
  pi.idle = true;
  pi.entries.push({ type: "message", id: "a1", message: { role: "assistant", stopReason: "stop", content: [{ type: "text", text: "hi" }] } });
  coordinator.agentSettled(turnEndFromBranch(pi.entries, false));
  await settle();
  await coordinator.idle();
  const order = server.calls.filter((c) => c.op !== "window" && c.op !== "reportBranch").map((c) => c.op + (c.report ? `:${c.report.phase}` : ""));
  assert.deepEqual(order, ["reportTurn:start", "submitAssistant", "reportTurn:end"]);
  assert.equal(server.calls.find((c) => c.op === "submitAssistant").text, "hi");
});

test("turnEndFromBranch: error and the response entry", () => {
  const branch = [
    { type: "custom_message", id: "m", customType: "pi-workflows-step", details: {} },
    { type: "message", id: "a", message: { role: "assistant", stopReason: "error", content: [] } },
  ];
  assert.deepEqual(turnEndFromBranch(branch, false), { outcome: "error", responseEntryId: "a" });
  assert.deepEqual(turnEndFromBranch(branch.slice(0, 1), true), { outcome: "aborted" });
});

test("a step's allowedTools restrict tools during its own turn only; the workflow tool is always allowed", async () => {
  const restricted = message("msg-x-1", {
    content: { workflow: "wf", nodePath: "a", attemptId: "msg-x-1", prompt: "Read only", expectedOutput: "{ok: true}", allowedTools: ["read"] },
  });
  const { pi, coordinator } = await setup([restricted]);
  assert.equal(pi.sends.length, 1);
  assert.equal(coordinator.toolRefusal("bash"), undefined, "no turn yet: nothing is restricted");
  // The turn that serves the step starts (counted from the send, before any receipt).
  coordinator.agentStart();
  assert.match(coordinator.toolRefusal("bash"), /does not allow the "bash" tool \(allowed tools: read;/);
  assert.equal(coordinator.toolRefusal("read"), undefined);
  assert.equal(coordinator.toolRefusal("workflow"), undefined);
  pi.entries.push({ type: "message", id: "a1", message: { role: "assistant", stopReason: "stop", content: [{ type: "text", text: "done" }] } });
  pi.idle = true;
  coordinator.agentSettled(turnEndFromBranch(pi.entries, false));
  assert.equal(coordinator.toolRefusal("bash"), undefined, "after the turn: an ordinary turn restricts nothing");
});

test("a step without allowedTools restricts nothing", async () => {
  const { coordinator } = await setup();
  coordinator.agentStart();
  assert.equal(coordinator.toolRefusal("bash"), undefined);
});

test("a view read that returns after a newer subscription view never replaces it (delivery does not stall)", async () => {
  const pi = new FakePi();
  const server = new FakeServer(view(7, [message("msg-x-1")]));
  let release;
  const held = new Promise((resolve) => (release = resolve));
  let reads = 0;
  // Reads answer at once until the step was sent; a later one is slow and returns what the
  // server had before the run ended (the step sent, nothing pending).
  const answerNow = server.window.bind(server);
  server.window = async (epoch) => {
    reads += 1;
    if (pi.sends.length === 0) return answerNow(epoch);
    const stale = structuredClone({ ...server.current, messages: [], nextEligible: undefined, coordinator: { epoch, active: true } });
    server.calls.push({ op: "window", epoch });
    await held;
    return stale;
  };
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  coordinator.connected(7);
  coordinator.onView(structuredClone(server.current));
  for (let i = 0; i < 20 && (pi.sends.length === 0 || reads < 2); i++) await settle();
  assert.equal(pi.sends.length, 1);
  assert.ok(reads >= 2, "a read after the send is on its way");
  // While it is, the subscription shows the run's end: its terminal message is eligible.
  const terminal = { ...message("msg-x-2", { order: 2 }), kind: "terminal", reason: undefined, sourceId: "run-1", content: { outcome: "completed", runId: "run-1", workflowName: "wf" } };
  const sent = { ...message("msg-x-1"), status: "sent", piEntryId: "e1" };
  server.current = view(7, [sent, terminal]);
  coordinator.onView(structuredClone(server.current));
  pi.idle = true;
  release();
  for (let i = 0; i < 20 && pi.sends.length < 2; i++) {
    await settle();
    await coordinator.idle();
  }
  assert.deepEqual(
    pi.sends.map((s) => s.message.details.workflowMessageId),
    ["msg-x-1", "msg-x-2"],
    "the stale read did not hide the terminal message",
  );
});

test("a submission's wait for the epoch ends when the reconnection's first view shows it active, or at its bound", async () => {
  const pi = new FakePi();
  const server = new FakeServer(view(4, []));
  const coordinator = new WorkflowMessageCoordinator(pi, server);
  assert.equal(await coordinator.activeEpochWithin(20), undefined, "not connected: none after the bound");
  coordinator.connected(4);
  assert.equal(coordinator.activeEpoch, undefined, "claimed, but no view yet");
  const waiting = coordinator.activeEpochWithin(5_000);
  setTimeout(() => coordinator.onView(structuredClone(server.current)), 10);
  assert.equal(await waiting, 4, "the view wakes the waiting submission with the active epoch");
  const fenced = view(4, []);
  fenced.coordinator.active = false;
  coordinator.onView(fenced);
  assert.equal(await coordinator.activeEpochWithin(20), undefined, "fenced by another process: none");
  coordinator.stop();
});
