// Step deadlines on the real server with the real Node runner (docs/SESSIONS.md "Deadlines"):
// an interactive agent step's `timeoutMs` is model time — it passes only while a Pi turn the
// server accepted for the step is open and its session has a coordinator — so waiting, a
// disconnected coordinator and a pause never move it; when it is spent during a reported
// turn, the step is timed out once and the run follows its `$result.outcome` route, or ends
// `timed_out`. This client plays the extension's part (coordinator watch, branch and turn
// reports); the tests assert on the server's views and results, never on elapsed time.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { WorkflowClient } from "../../dist/client/index.js";
import { removeTempDirs } from "../support/fixtures.mjs";

const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const binary = process.env.PI_WORKFLOWS_BIN ?? path.resolve(packageDir, "../../target/debug/pi-workflows");
const state = mkdtempSync("/tmp/piwtd-");
const agentDir = mkdtempSync("/tmp/piwtda-");
// The reclaimer looks often here: a blocked runner's run is reclaimed soon after it is stopped.
const env = { ...process.env, PI_WORKFLOWS_PACKAGE_DIR: packageDir, PI_CODING_AGENT_DIR: agentDir, PI_WORKFLOWS_RECLAIM_INTERVAL_MS: "300" };
delete env.PI_WORKFLOWS_RUNNER;
const socket = path.join(state, "server", "server.sock");
/** The step's model-time budget: a few of the deadline task's one-second observations. */
const BUDGET_MS = 2000;
/** Longer than the budget in wall-clock time (what must not time the step out). */
const BEYOND_BUDGET_MS = BUDGET_MS + 2500;

const routed = path.join(state, "routed.workflow.ts");
const unrouted = path.join(state, "unrouted.workflow.ts");
const blocked = path.join(state, "blocked.workflow.ts");
const opened = [];

function cli(...args) {
  const result = spawnSync(binary, ["--state-dir", state, ...args], { env, encoding: "utf8" });
  assert.equal(result.status, 0, `pi-workflows ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}

async function connect() {
  const client = await WorkflowClient.connect(socket, { stateDir: state });
  opened.push(client);
  return client;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

before(() => {
  assert.ok(existsSync(binary), `${binary} is missing: build the Rust binary first (cargo build)`);
  const ask = `ask: agent({ prompt: "Summarize.", expectedOutput: '{"summary": string}', timeoutMs: ${BUDGET_MS} })`;
  writeFileSync(
    routed,
    `import { agent, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "routed",
  startAt: "ask",
  nodes: {
    ${ask},
    late: compute({ run: () => ({ path: "timed out" }) }),
    done: compute({ run: ({ outputs }) => ({ path: "answered", summary: outputs.ask.summary }) }),
  },
  edges: [{ from: "ask", switch: { on: "$result.outcome", cases: { ok: "done", timed_out: "late" } } }],
});
`,
  );
  writeFileSync(
    unrouted,
    `import { agent, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "unrouted",
  startAt: "ask",
  nodes: { ${ask}, done: compute({ run: ({ outputs }) => outputs.ask }) },
  edges: [{ from: "ask", to: "done" }],
});
`,
  );
  // A headless step whose workflow code blocks the runner's event loop after the step's
  // deadline was committed: the runner's own timer can never fire.
  writeFileSync(
    blocked,
    `import { agent, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "blocked",
  startAt: "ask",
  nodes: {
    ask: agent({
      prompt: () => { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120000); return "never"; },
      expectedOutput: '{"summary": string}',
      timeoutMs: 1000,
    }),
    late: compute({ run: () => ({ path: "timed out" }) }),
  },
  edges: [{ from: "ask", switch: { on: "$result.outcome", cases: { ok: "late", timed_out: "late" } } }],
});
`,
  );
  cli("server", "start");
});

after(() => {
  for (const client of opened) client.close();
  spawnSync(binary, ["--state-dir", state, "server", "stop"], { env });
  removeTempDirs([state, agentDir]);
});

async function viewUntil(client, runId, check) {
  for (let i = 0; i < 600; i++) {
    const { view } = await client.call("view.run.get", { runId });
    if (check(view)) return view;
    await sleep(50);
  }
  throw new Error(`run ${runId} never reached the expected view`);
}

/** A waiting interactive run of `workflow` and a coordinator of its session that sent its step. */
async function sentStep(workflow, tag) {
  const client = await connect();
  const runId = `run-${tag}-${Date.now()}`;
  const sessionId = `session-${runId}`;
  await client.call("run.start", { runId, payload: { workflow, projectPath: state, executionMode: "interactive", originSessionId: sessionId } });
  await viewUntil(client, runId, (view) => view.display.status === "waiting");
  const coordinator = await connect();
  let latest;
  const { epoch } = await coordinator.watchSession(sessionId, (view) => (latest = view), { coordinator: true });
  for (let i = 0; i < 200 && typeof latest?.nextEligible !== "string"; i++) await sleep(25);
  const messageId = latest?.nextEligible;
  assert.equal(typeof messageId, "string", `the step message is eligible: ${JSON.stringify(latest)}`);
  const requestId = latest.messages.find((m) => m.workflowMessageId === messageId)?.sourceId;
  await coordinator.reportBranch(sessionId, epoch, { isIdle: false, hasPendingMessages: false, found: [{ workflowMessageId: messageId, piEntryId: "entry-1" }] });
  return { client, coordinator, runId, sessionId, epoch, messageId, requestId };
}

async function result(client, runId) {
  const status = await client.call("run.status", { runId, payload: { includeResult: true } });
  return status.result;
}

test("waiting is no model time; a reported turn spends the budget and the run takes its timed_out route", async () => {
  const step = await sentStep(routed, "dl-routed");
  // The step was delivered and waits for its turn: wall-clock time past the budget changes nothing.
  await sleep(BEYOND_BUDGET_MS);
  const waiting = await step.client.call("view.run.get", { runId: step.runId });
  assert.equal(waiting.view.display.status, "waiting", "no turn, no model time");
  const started = await step.coordinator.reportTurn(step.sessionId, step.epoch, { turnId: "turn-1", phase: "start", workflowMessageId: step.messageId });
  assert.equal(started.ownership, "active");
  const ended = await viewUntil(step.client, step.runId, (view) => view.display.status === "completed" && view.display.activity.kind === "none");
  assert.equal(ended.run.completedSteps, 1, "late (the timed-out ask did not complete)");
  assert.deepEqual(await result(step.client, step.runId), { path: "timed out" });
  // The model's late submission is refused; nothing changes.
  const late = await step.coordinator.request("interaction.submit", {
    runId: step.runId,
    payload: { output: { summary: "too late" }, requestId: step.requestId, coordinator: { sessionId: step.sessionId, epoch: step.epoch } },
  });
  assert.equal(late.outcome, "rejected", JSON.stringify(late));
  assert.match(late.error.message, /timed out/, "the refusal says what became of the step");
  // Pi's turn ends afterwards; its report adopts the closed step.
  const turnEnd = await step.coordinator.reportTurn(step.sessionId, step.epoch, { turnId: "turn-1", phase: "end", outcome: "completed" });
  assert.equal(turnEnd.ownership, "settled");
  assert.deepEqual(await result(step.client, step.runId), { path: "timed out" });
});

test("a disconnected session and a pause stop the clock; the budget is spent only in connected turn time", async () => {
  const step = await sentStep(routed, "dl-paused");
  await step.coordinator.reportTurn(step.sessionId, step.epoch, { turnId: "turn-1", phase: "start", workflowMessageId: step.messageId });
  // Pi disconnects at once with the turn open: no coordinator, no model time.
  step.coordinator.close();
  await sleep(BEYOND_BUDGET_MS);
  let view = (await step.client.call("view.run.get", { runId: step.runId })).view;
  assert.notEqual(view.display.status, "completed", "a disconnected session spends nothing");
  assert.equal(view.run.completedSteps, 0);
  // Pi reconnects and re-reports the same turn; Escape at once pauses the run.
  const again = await connect();
  const { epoch } = await again.watchSession(step.sessionId, () => {}, { coordinator: true });
  await again.reportTurn(step.sessionId, epoch, { turnId: "turn-1", phase: "start", workflowMessageId: step.messageId });
  await again.reportTurn(step.sessionId, epoch, { turnId: "turn-1", phase: "end", outcome: "aborted" });
  await viewUntil(step.client, step.runId, (v) => v.display.status === "paused");
  await sleep(BEYOND_BUDGET_MS);
  view = (await step.client.call("view.run.get", { runId: step.runId })).view;
  assert.equal(view.display.status, "paused", "a paused step is never timed out");
  // Resumed, the step is presented again; its turn spends what is left of the budget.
  await step.client.call("run.resume", { runId: step.runId });
  let latest;
  const watcher = await connect();
  await watcher.watchSession(step.sessionId, (v) => (latest = v));
  for (let i = 0; i < 200 && !latest?.messages?.some((m) => m.status === "pending" && m.reason === "resumed"); i++) await sleep(25);
  const resumed = latest.messages.find((m) => m.status === "pending" && m.reason === "resumed");
  assert.ok(resumed, JSON.stringify(latest));
  await again.reportBranch(step.sessionId, epoch, { isIdle: false, hasPendingMessages: false, found: [{ workflowMessageId: resumed.workflowMessageId, piEntryId: "entry-2" }] });
  await again.reportTurn(step.sessionId, epoch, { turnId: "turn-2", phase: "start", workflowMessageId: resumed.workflowMessageId });
  await viewUntil(step.client, step.runId, (v) => v.display.status === "completed" && v.display.activity.kind === "none");
  assert.deepEqual(await result(step.client, step.runId), { path: "timed out" });
});

test("without a timed_out route a spent budget ends the run timed_out", async () => {
  const step = await sentStep(unrouted, "dl-unrouted");
  await step.coordinator.reportTurn(step.sessionId, step.epoch, { turnId: "turn-1", phase: "start", workflowMessageId: step.messageId });
  const ended = await viewUntil(step.client, step.runId, (view) => view.display.status === "timed_out");
  assert.equal(ended.run.completedSteps, 0);
  // The session is free again: no active run, the ended one retained with its terminal message.
  const window = await step.coordinator.sessionWindow(step.sessionId);
  assert.equal(window.activeRun, null, JSON.stringify(window));
  assert.equal(window.retainedTerminal?.runId, step.runId, JSON.stringify(window));
  assert.ok(window.messages.some((m) => m.kind === "terminal" && m.status === "pending"), JSON.stringify(window.messages));
});

test("a headless step whose runner is blocked past its deadline is timed out by the server and routed", async () => {
  const client = await connect();
  const runId = `run-dl-blocked-${Date.now()}`;
  await client.call("run.start", { runId, payload: { workflow: blocked, projectPath: state, executionMode: "headless" } });
  const ended = await viewUntil(client, runId, (view) => ["completed", "failed", "timed_out"].includes(view.display.status) && view.display.activity.kind === "none");
  assert.equal(ended.display.status, "completed", JSON.stringify(ended.display));
  assert.deepEqual(await result(client, runId), { path: "timed out" }, "the timed_out route ran");
});
