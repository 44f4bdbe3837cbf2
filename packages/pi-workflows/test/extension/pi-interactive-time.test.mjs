// Real Pi (1.6.0, RPC mode) end to end for issue 16: a step's time, reminders and what arrives
// after a run. Each test starts the pinned Pi with this package's extension, the real server
// (its state under a private /tmp dir) and the in-process scripted model (support/e2e.mjs), and
// asserts on Pi's session entries (`get_entries`, the session JSONL), the model's requests and
// the server's views and `pi-workflows run status --json` — never on how long something took
// (waits are bounded polls; a test sleeps only to let a budget pass while nothing may count).
// Skipped, saying so, only when the pinned Pi is not installed (CI installs it).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  assertNoDuplicateMessages,
  describeEntries,
  Harness,
  missingPi,
  serverBinary,
  stepEntries,
  textOf,
  toolResults,
  until,
} from "./support/e2e.mjs";

const fixtures = fileURLToPath(new URL("./fixtures/", import.meta.url));
const fixture = (name) => path.join(fixtures, `${name}.workflow.ts`);

test.before(() => {
  if (!missingPi) assert.ok(fs.existsSync(serverBinary), `${serverBinary} is missing: build the server first (cargo build --locked) or set PI_WORKFLOWS_BIN`);
});

const ofType = (type) => (entries) => entries.filter((e) => e.type === "custom_message" && e.customType === `pi-workflows-${type}`);
const terminalEntries = ofType("terminal");
const followUpEntries = ofType("follow-up");
const notificationEntries = ofType("notification");
const assistantTexts = (entries) => entries.filter((e) => e.type === "message" && e.message.role === "assistant").map((e) => textOf(e.message.content));

/** `pi-workflows run status <runId> --json` (the CLI a person would use). */
function cliStatus(h, runId) {
  const r = spawnSync(serverBinary, ["--state-dir", h.stateDir, "run", "status", runId, "--json"], { env: h.env, encoding: "utf8", timeout: 20_000 });
  assert.equal(r.status, 0, `run status failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** Pi's entries once the run's terminal message is in them (and Pi is idle again). */
async function entriesWithTerminal(rpc) {
  const entries = await until(async () => {
    const all = await rpc.entries();
    return terminalEntries(all).length > 0 ? all : undefined;
  }, "the terminal message", rpc.context);
  await rpc.idle();
  return entries;
}

/** Starts `workflow` (a path) in the Pi session; returns the run ID and the session. */
async function start(rpc, workflow, extra = "") {
  const seen = rpc.notifications().length;
  await rpc.prompt(`/workflow start ${workflow}${extra ? ` ${extra}` : ""}`);
  const runId = await rpc.startedRun(seen);
  return { runId, ...(await rpc.state()) };
}

const historyOf = (view) => Object.values(view.history?.items ?? {});
const workflowCall = (args) => ({ name: "workflow", arguments: args });
/** The request ID of the newest step message among the model's `messages`. */
const stepRequestId = (messages) =>
  [...messages]
    .reverse()
    .map((m) => (m.role === "user" ? /"action": "submit", "requestId": "([^"]+)"/.exec(textOf(m.content))?.[1] : undefined))
    .find(Boolean);

test("a step the model never submits gets two reminders, then fails missingSubmission and the run follows its failed route", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "r" });
  t.after(() => h.close());
  // The model answers every step message (the initial one and each reminder) with text only.
  h.model.script = ({ step }) => (step ? { kind: "step", text: "I would rather not submit anything." } : undefined);
  const rpc = h.rpc();
  const { runId } = await start(rpc, fixture("remind"));
  await h.runStatus(runId, "completed", rpc.context);
  assert.deepEqual(await h.runResult(runId), { gaveUp: true, code: "missingSubmission" }, "the failed route saw the step's error code");
  const history = historyOf(await h.runView(runId));
  assert.deepEqual(
    history.map((item) => [item.nodePath, item.status]),
    [
      ["ask", "failed"],
      ["gaveUp", "completed"],
    ],
  );
  assert.equal(cliStatus(h, runId).status, "completed");

  const entries = await entriesWithTerminal(rpc);
  const steps = stepEntries(entries);
  assert.deepEqual(
    steps.map((e) => e.details.reason),
    ["initial", "reminder", "reminder"],
    `the step once and exactly two reminders: ${describeEntries(entries)}`,
  );
  assert.ok(
    steps.every((e) => e.details.requestId === steps[0].details.requestId),
    "the reminders are for the same request",
  );
  for (const reminder of steps.slice(1)) assert.match(textOf(reminder.content), /reminder: this step is still open/);
  assert.doesNotMatch(textOf(steps[0].content), /reminder/);
  assert.equal(h.model.stepRequests().length, 3, "three unproductive model turns, no fourth");
  assert.equal(toolResults(entries).length, 0, "the model never called the workflow tool");
  assert.equal(terminalEntries(entries).length, 1);
  assert.match(textOf(terminalEntries(entries)[0].content), /completed/);
  assertNoDuplicateMessages(entries, "after the reminders");
});

test("a step's model-time budget runs out during its turn (a slow bash call): the step times out, the run follows its timed_out route, the terminal message appears once", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "d" });
  const go = path.join(h.root, "go");
  t.after(async () => {
    fs.writeFileSync(go, ""); // a failed test must not leave the bash call waiting
    await h.close();
  });
  // The model first runs a bash command that lasts until the test creates `go` (the turn's
  // tool time is model time too), then submits: too late.
  const ran = path.join(h.root, "bash-finished");
  // The first submission is what the step's text asks for; the second also names the run.
  let runId;
  h.model.script = ({ step, toolName, toolCall, messages }) => {
    if (step) return { kind: "step", tools: [{ name: "bash", arguments: { command: `while [ ! -e ${go} ]; do sleep 0.1; done; touch ${ran}` } }] };
    const submit = { action: "submit", requestId: stepRequestId(messages), output: { n: 7 } };
    if (toolName === "bash") return { kind: "submit", tools: [workflowCall(submit)] };
    if (toolName === "workflow" && toolCall.arguments.runId === undefined) return { kind: "submit", tools: [workflowCall({ ...submit, runId })] };
    if (toolName === "workflow") return { kind: "after-submit", text: "STEP-DONE" };
    return undefined;
  };
  const rpc = h.rpc();
  const started = await start(rpc, fixture("slow"));
  runId = started.runId;
  const { sessionId } = started;
  const open = await until(async () => (await h.sessionView(sessionId)).openTurn, "the server to accept the step's turn", rpc.context);
  assert.equal(open.runId, runId);
  await until(() => rpc.events.some((e) => e.type === "tool_execution_start" && e.toolName === "bash"), "the model's bash call to run", rpc.context);

  // The bash call goes on; the budget (2 s of model time) is spent inside the turn.
  await h.runStatus(runId, "completed", rpc.context);
  assert.deepEqual(await h.runResult(runId), { late: true, code: "timedOut" }, "the timed_out route saw the step's error code");
  assert.deepEqual(
    historyOf(await h.runView(runId)).map((item) => [item.nodePath, item.status]),
    [
      ["slow", "timed_out"],
      ["late", "completed"],
    ],
  );
  assert.equal(fs.existsSync(ran), false, "the bash call is still running");
  assert.equal((await rpc.state()).isStreaming, true, "Pi is still inside the turn the step timed out in");
  assert.equal(h.model.requestsFor(/^Workflow run /).length, 0, "no terminal turn while the step's turn runs");

  fs.writeFileSync(go, "");
  const entries = await entriesWithTerminal(rpc);
  assert.equal(fs.existsSync(ran), true, "the turn ended normally: its bash call finished");
  const submit = toolResults(entries);
  assert.equal(submit.length, 2, "the late submissions were made once each");
  assert.match(textOf(submit[0].message.content), /^submit failed \(/, "the submission after the timeout is refused");
  assert.match(textOf(submit[1].message.content), /^submit failed \(.*this step timed out/, "also when it names the run: the server refuses it, saying why");
  assert.equal(stepEntries(entries).length, 1, `the step once, no reminder after the timeout: ${describeEntries(entries)}`);
  assert.equal(terminalEntries(entries).length, 1, `the terminal message once: ${describeEntries(entries)}`);
  assert.ok(entries.indexOf(submit[0]) < entries.indexOf(terminalEntries(entries)[0]), "the terminal message comes after the step's turn");
  assert.equal(h.model.requestsFor(/^Workflow run .* completed/).length, 1, "one model turn for the terminal message");
  assertNoDuplicateMessages(entries, "after the timeout");
});

test("a step's budget does not run while Pi is gone: Pi SIGKILLed inside the step's turn, reopened after longer than the budget, the step completes", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "g", outputs: [{ n: 5 }] });
  t.after(() => h.close());
  h.model.hold = true; // the model is inside the step's turn when Pi dies
  const first = h.rpc([], { detached: true });
  // Pi writes a fresh session's file only once it has an assistant message.
  await first.prompt("hello");
  await first.idle();
  const { runId, sessionId, sessionFile } = await start(first, fixture("budget"));
  await until(async () => {
    const v = await h.sessionView(sessionId);
    return v.openTurn && v.messages.some((m) => m.kind === "step" && m.status === "sent") ? v : undefined;
  }, "the step's open turn", first.context);
  await until(() => h.model.requests.some((r) => r.kind === "step" && r.held), "the model to hold the step's turn", first.context);
  await first.killGroup("SIGKILL");
  h.model.hold = false;

  // Longer than the step's 6 s budget with no Pi: the run still waits for the step. (The
  // budget leaves room for the model time the turns before the kill and after the reopen use.)
  await new Promise((resolve) => setTimeout(resolve, 7_000));
  const waiting = cliStatus(h, runId);
  assert.equal(waiting.status, "waiting", `the run still waits: ${JSON.stringify(waiting)}`);
  assert.ok(waiting.pendingRequest, `the step is still pending: ${JSON.stringify(waiting)}`);
  assert.deepEqual(historyOf(await h.runView(runId)).map((item) => [item.nodePath, item.status]), [["pick", "waiting"]]);

  const second = h.rpc(["--session", sessionFile]);
  assert.equal((await second.state()).sessionId, sessionId, "the same session reopened");
  await h.runStatus(runId, "completed", second.context);
  assert.deepEqual(await h.runResult(runId), { n: 5 }, "the step's ok route, not timed_out");
  const entries = await entriesWithTerminal(second);
  // The turn that died with Pi was open: the reopened Pi's idle branch report closes it as
  // lost and the server reminds the model once; the model submits in that turn.
  assert.deepEqual(stepEntries(entries).map((e) => e.details.reason), ["initial", "reminder"], describeEntries(entries));
  assert.match(textOf(toolResults(entries).at(-1).message.content), /^Accepted/);
  assert.equal(terminalEntries(entries).length, 1);
  assertNoDuplicateMessages(entries, "in the reopened session");
});

/** SIGKILLs the harness's server; resolves with the pid of the one the extension starts next. */
async function killServer(h, rpc) {
  const killed = h.serverPid();
  assert.ok(killed, "a server runs for the state dir");
  process.kill(killed, "SIGKILL");
  return until(() => {
    const pid = h.serverPid();
    return pid && pid !== killed ? pid : undefined;
  }, "the extension to start the server again", rpc.context);
}

test("the server is SIGKILLed right after the run's final commit, before Pi shows the end: the terminal message appears exactly once", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "t" });
  t.after(() => h.close());
  // After the accepted submission the model's last answer of the step's turn stalls: Pi stays
  // busy, so the run's end (committed meanwhile) cannot be shown yet.
  // The terminal message's turn stalls too, so the server's record of it can be read meanwhile.
  h.model.script = ({ toolName, lastText }) => {
    if (toolName === "workflow") return { kind: "after-submit", hold: true, text: "STEP-DONE" };
    if (/^Workflow run /.test(lastText)) return { kind: "terminal", hold: true, text: "The run completed." };
    return undefined;
  };
  const rpc = h.rpc();
  const { runId, sessionId } = await start(rpc, h.workflowPath("pick"));
  await until(() => h.model.requests.some((r) => r.kind === "after-submit" && r.held), "the model to hold its answer after the submission", rpc.context);
  await h.runStatus(runId, "completed", rpc.context);
  const before = await h.sessionView(sessionId);
  const pending = before.messages.filter((m) => m.kind === "terminal");
  assert.deepEqual(pending.map((m) => m.status), ["pending"], `the terminal message waits for Pi: ${JSON.stringify(before.messages)}`);
  assert.equal(terminalEntries(await rpc.entries()).length, 0);

  await killServer(h, rpc);
  h.model.release();
  await until(() => h.model.requests.some((r) => r.kind === "terminal" && r.held), "the terminal message's turn", rpc.context);
  const shown = terminalEntries(await rpc.entries());
  assert.equal(shown.length, 1);
  assert.equal(shown[0].details.workflowMessageId, pending[0].workflowMessageId, "the message the first server queued");
  const sent = await until(async () => (await h.sessionView(sessionId)).messages.find((m) => m.kind === "terminal" && m.status === "sent"), "the restarted server to know the terminal message as sent", rpc.context);
  assert.equal(sent.piEntryId, shown[0].id, "the restarted server knows it by Pi's entry");
  h.model.release();
  const entries = await entriesWithTerminal(rpc);
  assert.equal(terminalEntries(entries).length, 1, `the terminal message once: ${describeEntries(entries)}`);
  assert.deepEqual(await h.runResult(runId), { n: 42 });
  assert.equal(h.model.requestsFor(/^Workflow run .* completed/).length, 1, "one model turn for the terminal message");
  assertNoDuplicateMessages(entries, "after the server restart");
});

test("the server is SIGKILLed as the terminal message enters the conversation: after the restart it appears exactly once", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "s" });
  t.after(() => h.close());
  // The terminal message's turn stalls, so Pi is inside it while the server is away.
  h.model.script = ({ lastText }) => (/^Workflow run /.test(lastText) ? { kind: "terminal", hold: true, text: "The run completed." } : undefined);
  const rpc = h.rpc();
  const { runId } = await start(rpc, h.workflowPath("pick"));
  await until(() => rpc.events.some((e) => e.type === "message_start" && e.message?.role === "custom" && e.message.customType === "pi-workflows-terminal"), "the terminal message's message_start", rpc.context);
  await killServer(h, rpc);
  await until(() => h.model.requests.some((r) => r.kind === "terminal" && r.held), "the terminal message's turn", rpc.context);
  h.model.release();
  const entries = await entriesWithTerminal(rpc);
  assert.equal(terminalEntries(entries).length, 1, `the terminal message once: ${describeEntries(entries)}`);
  assert.equal((await h.runView(runId)).display.status, "completed");
  assert.equal(h.model.requestsFor(/^Workflow run .* completed/).length, 1, "one model turn for the terminal message");
  assertNoDuplicateMessages(entries, "after the server restart");
});

/**
 * A model that, given a step, queues the follow-ups `prompts` (one `workflow` call each, one
 * response after another) and then submits `output`; answers a follow-up prompt "DID <prompt>".
 */
function queuesFollowUps(prompts, output) {
  return ({ step, toolName, toolCall, lastText, messages }) => {
    if (prompts.includes(lastText)) return { kind: "follow-up", text: `DID ${lastText}` };
    if (step) return { kind: "step", tools: [workflowCall({ action: "queue-follow-up", prompt: prompts[0] })] };
    if (toolName !== "workflow") return undefined;
    const { action, prompt } = toolCall.arguments ?? {};
    if (action === "queue-follow-up") {
      const next = prompts[prompts.indexOf(prompt) + 1];
      if (next !== undefined) return { kind: "queue", tools: [workflowCall({ action: "queue-follow-up", prompt: next })] };
      const requestId = stepRequestId(messages);
      return { kind: "submit", tools: [workflowCall({ action: "submit", requestId, output })] };
    }
    return { kind: "after-submit", text: "STEP-DONE" };
  };
}

test("two follow-ups queued by the model during a run arrive after its terminal turn, in order, each once, the second after the first's turn", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "f" });
  t.after(() => h.close());
  h.model.script = queuesFollowUps(["FOLLOW-ONE please", "FOLLOW-TWO please"], { n: 3 });
  const rpc = h.rpc();
  const { runId, sessionId } = await start(rpc, fixture("follow"));
  await h.runStatus(runId, "completed", rpc.context);
  assert.deepEqual(await h.runResult(runId), { n: 3 });

  const entries = await until(async () => {
    const all = await rpc.branch();
    return assistantTexts(all).includes("DID FOLLOW-TWO please") ? all : undefined;
  }, "both follow-ups' turns", rpc.context);
  await rpc.idle();
  const queued = toolResults(entries).map((e) => textOf(e.message.content));
  assert.equal(queued.filter((text) => /^follow-up follow-up-[0-9a-f]{40} queued/.test(text)).length, 2, `both follow-ups queued: ${JSON.stringify(queued)}`);
  const followUps = followUpEntries(entries);
  assert.deepEqual(followUps.map((e) => textOf(e.content)), ["FOLLOW-ONE please", "FOLLOW-TWO please"], `each follow-up once, in order: ${describeEntries(entries)}`);
  // On the branch: the terminal message and its turn, then each follow-up and its turn.
  const at = (entry) => entries.indexOf(entry);
  const replyAt = (text) => entries.findIndex((e) => e.type === "message" && e.message.role === "assistant" && textOf(e.message.content) === text);
  const terminal = terminalEntries(entries);
  assert.equal(terminal.length, 1);
  assert.ok(at(terminal[0]) < replyAt("MOCK-REPLY"), "the terminal message's turn");
  assert.ok(replyAt("MOCK-REPLY") < at(followUps[0]), "the first follow-up only after the terminal message's turn");
  assert.ok(at(followUps[0]) < replyAt("DID FOLLOW-ONE please"));
  assert.ok(replyAt("DID FOLLOW-ONE please") < at(followUps[1]), "the second follow-up only after the first one's turn ended");
  assert.ok(at(followUps[1]) < replyAt("DID FOLLOW-TWO please"));
  assert.equal(h.model.requestsFor(/^FOLLOW-ONE please$/).length, 1, "one model turn per follow-up");
  assert.equal(h.model.requestsFor(/^FOLLOW-TWO please$/).length, 1);
  const view = await until(async () => {
    const v = await h.sessionView(sessionId);
    return v.openTurn === null && v.messages.every((m) => m.status !== "pending") ? v : undefined;
  }, "nothing left to deliver", rpc.context);
  assert.equal(view.nextEligible ?? null, null);
  assertNoDuplicateMessages(await rpc.entries(), "after the follow-ups");
});

test("a run that fails drops its queued follow-ups (one from the model, one from /workflow queue-follow-up): the terminal message arrives, no follow-up does", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "c" });
  t.after(() => h.close());
  // One follow-up from the model's tool, one from a person's /workflow queue-follow-up while
  // the model holds the step's turn.
  h.model.script = queuesFollowUps(["FOLLOW-LOST please"], { n: 3 });
  h.model.hold = true;
  const rpc = h.rpc();
  const { runId, sessionId } = await start(rpc, fixture("follow"), `--input-json {"fail":true}`);
  await until(() => h.model.requests.some((r) => r.held), "the model to hold the step's turn", rpc.context);
  const seen = rpc.notifications().length;
  await rpc.prompt("/workflow queue-follow-up FOLLOW-LOST-TOO please");
  const notice = await until(() => rpc.notifications().slice(seen).find((m) => /follow-up/.test(m)), "the queue-follow-up notice", rpc.context);
  assert.match(notice, new RegExp(`^follow-up follow-up-[0-9a-f]{40} queued for run ${runId}`));
  h.model.release();
  await h.runStatus(runId, "failed", rpc.context);
  const entries = await entriesWithTerminal(rpc);
  assert.match(textOf(toolResults(entries)[0].message.content), /^follow-up follow-up-[0-9a-f]{40} queued/, "the model's follow-up was queued");
  assert.match(textOf(terminalEntries(entries)[0].content), /failed/);
  // Everything the session has is delivered and no turn is open: a follow-up would be next.
  const view = await until(async () => {
    const v = await h.sessionView(sessionId);
    return v.openTurn === null && v.messages.every((m) => m.status !== "pending") ? v : undefined;
  }, "nothing left to deliver", rpc.context);
  await rpc.idle();
  assert.ok(view.messages.every((m) => m.kind !== "followUp"), `no follow-up is pending: ${JSON.stringify(view.messages)}`);
  const all = await rpc.entries();
  assert.equal(followUpEntries(all).length, 0, `no follow-up in the conversation: ${describeEntries(all)}`);
  assert.equal(h.model.requestsFor(/FOLLOW-LOST/).length, 0, "the model never got the follow-up");
  assert.equal(terminalEntries(all).length, 1);
  assertNoDuplicateMessages(all, "after the failed run");
});

test("a notify node's notification is delivered once and starts no model turn", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "n", outputs: [{ n: 8 }] });
  t.after(() => h.close());
  const rpc = h.rpc();
  const { runId } = await start(rpc, fixture("notify"));
  await h.runStatus(runId, "completed", rpc.context);
  assert.deepEqual(await h.runResult(runId), { n: 8 });
  const entries = await entriesWithTerminal(rpc);
  const notes = notificationEntries(entries);
  assert.equal(notes.length, 1, `the notification once: ${describeEntries(entries)}`);
  assert.match(textOf(notes[0].content), /NOTE-FOR-THE-SESSION: the checks are starting/);
  assert.equal(notes[0].details.kind, "notification");
  // No model reply between the notification and the step: the notification started no turn
  // (Pi records the system prompt as an entry before a turn's first request).
  const between = entries.slice(entries.indexOf(notes[0]) + 1, entries.indexOf(stepEntries(entries)[0]));
  assert.ok(stepEntries(entries)[0] && between.every((e) => e.type === "message" && e.message.role === "system"), `the step follows the notification: ${JSON.stringify(between.map((e) => [e.type, e.message?.role]))}`);
  assert.equal(h.model.requestsFor(/^Workflow notification/).length, 0, "no model request answers the notification");
  // The model's requests: the step, its tool result, the terminal message; nothing else.
  assert.deepEqual(
    h.model.requests.map((r) => r.lastRole),
    ["user", "tool", "user"],
    JSON.stringify(h.model.requests.map((r) => r.lastText.slice(0, 60))),
  );
  assertNoDuplicateMessages(entries, "after the notification");
});

test("an agent step with allowedTools [read]: the model's bash call is blocked naming the allowed tools and never runs; the model submits and the step completes", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "a" });
  t.after(() => h.close());
  const forbidden = path.join(h.root, "bash-ran-in-the-step");
  const later = path.join(h.root, "bash-ran-after-the-run");
  h.model.script = ({ step, toolName, lastText, messages }) => {
    if (step) return { kind: "step", tools: [{ name: "bash", arguments: { command: `touch ${forbidden}` } }] };
    if (toolName === "bash" && /does not allow/.test(lastText)) return { kind: "submit", tools: [workflowCall({ action: "submit", requestId: stepRequestId(messages), output: { n: 11 } })] };
    if (lastText === "touch the file now") return { kind: "ordinary", tools: [{ name: "bash", arguments: { command: `touch ${later}` } }] };
    if (toolName === "bash") return { kind: "after-bash", text: "BASH-DONE" };
    return undefined;
  };
  const rpc = h.rpc();
  const { runId } = await start(rpc, fixture("tools"));
  await h.runStatus(runId, "completed", rpc.context);
  assert.deepEqual(await h.runResult(runId), { n: 11 });
  const entries = await entriesWithTerminal(rpc);
  const bash = entries.filter((e) => e.type === "message" && e.message.role === "toolResult" && e.message.toolName === "bash");
  assert.equal(bash.length, 1, "one bash call during the step");
  assert.equal(bash[0].message.isError, true, "the call was blocked");
  assert.match(textOf(bash[0].message.content), /does not allow the "bash" tool \(allowed tools: read\b/, "the reason names the allowed tools");
  assert.equal(fs.existsSync(forbidden), false, "the blocked bash command never ran");
  assert.match(textOf(toolResults(entries).at(-1).message.content), /^Accepted/);
  assert.equal(stepEntries(entries).length, 1, describeEntries(entries));

  // An ordinary turn after the run restricts nothing.
  await rpc.prompt("touch the file now");
  await until(async () => assistantTexts(await rpc.entries()).includes("BASH-DONE"), "the ordinary turn's bash call", rpc.context);
  assert.equal(fs.existsSync(later), true, "bash runs in an ordinary turn");
  assertNoDuplicateMessages(await rpc.entries(), "after the ordinary turn");
});
