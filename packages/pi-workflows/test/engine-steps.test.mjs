// Shell, checkpoint and agent steps through the engine with an in-memory host.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  agent,
  assistantMessage,
  checkpoint,
  compileWorkflow,
  compute,
  decision,
  decisionEdge,
  defineWorkflow,
  runWorkflow,
  shell,
} from "../dist/index.js";
import { FakeHost } from "./support/fake-host.mjs";

function run(definition, host, command = "start", extra = {}) {
  return runWorkflow({
    workflow: compileWorkflow(definition),
    host,
    runState: host.runState(),
    command,
    projectPath: process.cwd(),
    attemptIdPrefix: `g${command}${host.messages.length}`,
    ...extra,
  });
}

function shellFlow(script, options = {}) {
  return defineWorkflow({
    name: "sh",
    startAt: "cmd",
    nodes: {
      cmd: shell({ exec: () => ({ command: "sh", args: ["-c", script], ...options }) }),
      ok: compute({ run: ({ outputs }) => outputs.cmd }),
      bad: compute({ run: ({ results }) => results.cmd.error }),
    },
    edges: [{ from: "cmd", switch: { on: "$result.outcome", cases: { ok: "ok", failed: "bad", timed_out: "bad" } } }],
  });
}

test("a shell node captures output, registers its process group and settles the receipt", async () => {
  const host = new FakeHost();
  const outcome = await run(shellFlow("echo hi; echo oops >&2"), host);
  assert.equal(outcome.kind, "completed");
  assert.equal(outcome.output.exitCode, 0);
  assert.equal(outcome.output.stdout, "hi\n");
  assert.equal(outcome.output.stderr, "oops\n");
  assert.deepEqual(host.kinds(), ["node.started", "effect.reserve", "runner.progress", "runner.progress", "effect.settle", "node.finished", "node.finished", "run.finished"]);
  assert.equal(host.messages[1].payload.effectType, "shell");
  assert.equal(host.messages[4].payload.outcome, "applied");
  assert.equal(host.messages[4].payload.result.stdout, "hi\n");
});

test("a non-zero exit fails the node unless allowed", async () => {
  const failed = await run(shellFlow("exit 3"), new FakeHost());
  assert.equal(failed.output.code, "shellFailed");
  assert.match(failed.output.message, /exited with code 3/);
  const allowed = await run(shellFlow("exit 3", { allowNonZeroExit: true }), new FakeHost());
  assert.equal(allowed.output.exitCode, 3);
});

test("captured output is bounded and flagged", async () => {
  const outcome = await run(shellFlow("head -c 5000 /dev/zero | tr '\\0' x", { maxOutputBytes: 100 }), new FakeHost());
  assert.equal(outcome.output.stdout.length, 100);
  assert.equal(outcome.output.stdoutTruncated, true);
  assert.equal(outcome.output.stderrTruncated, false);
});

test("a timeout stops the whole process group", async () => {
  const started = Date.now();
  // The background sleeper would keep the pipes open if the group survived.
  const outcome = await run(shellFlow("sleep 30 & sleep 30", { timeoutMs: 300 }), new FakeHost());
  assert.equal(outcome.output.code, "timedOut");
  assert.ok(Date.now() - started < 5000, "the group was stopped promptly");
});

test("parse turns the receipt into the node output", async () => {
  const wf = defineWorkflow({
    name: "p",
    startAt: "cmd",
    nodes: { cmd: shell({ exec: () => ({ command: "echo", args: ["42"] }), parse: (r) => ({ answer: Number(r.stdout) }) }) },
    edges: [],
  });
  assert.deepEqual(await run(wf, new FakeHost()), { kind: "completed", output: { answer: 42 } });
});

const review = () =>
  defineWorkflow({
    name: "review",
    startAt: "approve",
    nodes: {
      approve: checkpoint({ summary: "ship it?" }),
      publish: compute({ run: ({ outputs }) => ({ published: true, by: outputs.approve.by }) }),
      shelve: compute({ run: () => ({ published: false }) }),
    },
    edges: [{ from: "approve", switch: { on: "$.decision", cases: { yes: "publish", no: "shelve" } } }],
  });

test("a checkpoint requests an interaction and waits; the settled answer becomes its output", async () => {
  const host = new FakeHost();
  assert.deepEqual(await run(review(), host), { kind: "waiting" });
  assert.deepEqual(host.kinds(), ["node.started", "interaction.requested"]);
  const request = host.messages[1].payload;
  assert.equal(request.kind, "checkpoint");
  assert.equal(request.contract.summary, "ship it?");
  assert.equal(request.requestId, `req:${host.messages[1].attemptId}`);

  host.settleInteraction({ decision: "yes", by: "ada" });
  const outcome = await run(review(), host, "resume");
  assert.deepEqual(outcome, { kind: "completed", output: { published: true, by: "ada" } });
  const finish = host.messages[2];
  assert.equal(finish.kind, "node.finished");
  assert.equal(finish.attemptId, host.messages[1].attemptId);
  assert.equal(finish.payload.nodeId, undefined, "the waiting attempt already exists: no start fields");
});

test("continue adopts the continuation answer for the named checkpoint attempt", async () => {
  const host = new FakeHost();
  await run(review(), host);
  const state = host.runState();
  state.continuation = { parentRunId: "run-0", parentAttemptId: state.attempts[0].attemptId, answer: { decision: "no" } };
  const outcome = await runWorkflow({ workflow: compileWorkflow(review()), host, runState: state, command: "continue", projectPath: ".", attemptIdPrefix: "c" });
  assert.deepEqual(outcome, { kind: "completed", output: { published: false } });
});

test("a continuation run replays the parent's attempts and routes from the answered checkpoint", async () => {
  const parent = new FakeHost({ runId: "parent" });
  await run(review(), parent);
  const parentAttempts = parent.runState().attempts;
  const child = new FakeHost({ runId: "child" });
  const state = child.runState();
  state.continuation = { parentRunId: "parent", parentAttemptId: parentAttempts[0].attemptId, answer: { decision: "yes", by: "lin" }, attempts: parentAttempts };
  const outcome = await runWorkflow({ workflow: compileWorkflow(review()), host: child, runState: state, command: "continue", projectPath: ".", attemptIdPrefix: "k" });
  assert.deepEqual(outcome, { kind: "completed", output: { published: true, by: "lin" } });
  assert.deepEqual(child.kinds(), ["node.finished", "run.finished"], "the parent's checkpoint is not finished again in the child run");

  const bare = new FakeHost({ runId: "orphan" });
  const orphan = bare.runState();
  orphan.continuation = { parentRunId: "parent", parentAttemptId: "unknown", answer: {} };
  const failed = await runWorkflow({ workflow: compileWorkflow(review()), host: bare, runState: orphan, command: "continue", projectPath: ".", attemptIdPrefix: "o" });
  assert.equal(failed.error.code, "continuationUnavailable");
});

function fakeExecutor(reply, seen = []) {
  return async () => ({
    async runAgent(request) {
      seen.push(request);
      return typeof reply === "function" ? reply(request) : reply;
    },
  });
}

test("a headless agent step parses and validates the executor's JSON reply", async () => {
  const seen = [];
  const wf = defineWorkflow({
    name: "ask",
    startAt: "think",
    nodes: {
      think: agent({
        prompt: ({ input }) => `count the letters in ${input.word}`,
        expectedOutput: '{ "count": number }',
        validate: (o) => { if (typeof o.count !== "number") throw new Error("count must be a number"); return o; },
        timeoutMs: 5000,
      }),
    },
    edges: [],
  });
  const host = new FakeHost({ input: { word: "abc" } });
  const outcome = await run(wf, host, "start", { loadAgentExecutor: fakeExecutor({ ok: true, text: 'Sure:\n```json\n{"count": 3}\n```' }, seen) });
  assert.deepEqual(outcome, { kind: "completed", output: { count: 3 } });
  assert.equal(seen[0].prompt, "count the letters in abc");
  assert.equal(seen[0].expectedOutput, '{ "count": number }');
  assert.equal(seen[0].timeoutMs, 5000);
  assert.equal(host.messages[0].payload.timeoutMs, 5000);
  assert.ok(host.messages[0].payload.deadlineAt > Date.now() - 1000);

  const invalid = await run(wf, new FakeHost({ input: { word: "x" } }), "start", { loadAgentExecutor: fakeExecutor({ ok: true, text: '{"count":"three"}' }) });
  assert.equal(invalid.error.code, "invalidOutput");
});

test("a decision step checks the chosen route, and a missing executor fails the node clearly", async () => {
  const choices = ["go", "stop"];
  const wf = defineWorkflow({
    name: "choose",
    startAt: "pick",
    nodes: { pick: decision({ question: "go on?", choices }), go: compute({ run: () => "went" }), stop: compute({ run: () => "stopped" }) },
    edges: [decisionEdge({ from: "pick", choices, cases: { go: "go", stop: "stop" } })],
  });
  const outcome = await run(wf, new FakeHost(), "start", { loadAgentExecutor: fakeExecutor({ ok: true, text: '{"route":"stop"}' }) });
  assert.deepEqual(outcome, { kind: "completed", output: "stopped" });
  const missing = await run(wf, new FakeHost());
  assert.equal(missing.error.code, "agentUnavailable");
});

test("an interactive run sends agent steps to the origin session as an interaction", async () => {
  const wf = defineWorkflow({
    name: "explain",
    startAt: "say",
    nodes: { say: agent({ prompt: "explain", expectedOutput: assistantMessage({ maxChars: 50 }) }) },
    edges: [],
  });
  const host = new FakeHost({ executionMode: "interactive" });
  assert.deepEqual(await run(wf, host), { kind: "waiting" });
  assert.equal(host.messages[1].payload.kind, "assistant");
  assert.equal(host.messages[1].payload.contract.form, "assistantMessage");
  assert.equal(host.messages[1].payload.deadlineAt, host.messages[0].payload.deadlineAt);
  host.settleInteraction("It works like this.");
  assert.deepEqual(await run(wf, host, "resume"), { kind: "completed", output: "It works like this." });
});

test("an executor timeout routes as timed_out", async () => {
  const wf = defineWorkflow({
    name: "slow",
    startAt: "think",
    nodes: { think: agent({ prompt: "p", expectedOutput: "{}", timeoutMs: 50 }), late: compute({ run: ({ results }) => results.think.outcome }) },
    edges: [{ from: "think", switch: { on: "$result.outcome", cases: { timed_out: "late" } } }],
  });
  const hang = ({ signal }) => new Promise((resolve) => signal.addEventListener("abort", () => resolve({ ok: false, code: "aborted", message: "stopped" })));
  const outcome = await run(wf, new FakeHost(), "start", { loadAgentExecutor: fakeExecutor(hang) });
  assert.deepEqual(outcome, { kind: "completed", output: "timed_out" });
});

test("timeoutMs: null means no limit, a function decides per attempt, and a bad value fails the step clearly", async () => {
  const flow = (timeoutMs) =>
    defineWorkflow({
      name: "timed",
      startAt: "think",
      nodes: { think: agent({ prompt: "p", expectedOutput: "{}", timeoutMs }), late: compute({ run: ({ results }) => results.think.outcome }) },
      edges: [{ from: "think", switch: { on: "$result.outcome", cases: { ok: "late", timed_out: "late" } } }],
    });
  const seen = [];
  const slowReply = () => new Promise((resolve) => setTimeout(() => resolve({ ok: true, text: "{}" }), 100));
  const unlimited = await run(flow(null), new FakeHost(), "start", { loadAgentExecutor: fakeExecutor(slowReply, seen) });
  assert.deepEqual(unlimited, { kind: "completed", output: "ok" });
  assert.ok(seen[0].timeoutMs > 24 * 24 * 3600 * 1000, "no limit: the longest timer");
  const interactive = new FakeHost({ executionMode: "interactive" });
  await run(flow(null), interactive);
  assert.equal(interactive.messages[0].payload.deadlineAt, undefined, "no deadline is committed");
  assert.equal(interactive.messages[1].payload.deadlineAt, undefined);
  const hang = ({ signal }) => new Promise((resolve) => signal.addEventListener("abort", () => resolve({ ok: false, code: "aborted", message: "stopped" })));
  const decided = await run(flow(({ input }) => input.ms), new FakeHost({ input: { ms: 50 } }), "start", { loadAgentExecutor: fakeExecutor(hang) });
  assert.deepEqual(decided, { kind: "completed", output: "timed_out" }, "the function's 50 ms applied");
  const bad = await run(flow(() => "soon"), new FakeHost(), "start", { loadAgentExecutor: fakeExecutor(slowReply) });
  assert.equal(bad.kind, "failed");
  assert.match(bad.error.message, /timeoutMs of node "think" must be a positive number of milliseconds or null, not soon/);
  assert.throws(() => agent({ prompt: "p", timeoutMs: -1 }), /agent.timeoutMs must be a positive number/);
});

test("an interrupted checkpoint attempt whose request was answered completes as a new attempt", async () => {
  const host = new FakeHost();
  assert.deepEqual(await run(review(), host), { kind: "waiting" });
  const waitingId = host.messages[1].attemptId;
  host.settleInteraction({ decision: "no" });
  // The server parked the run while the answer was pending delivery: the attempt is interrupted.
  host.attempts.get(waitingId).status = "interrupted";
  const outcome = await run(review(), host, "resume");
  assert.deepEqual(outcome, { kind: "completed", output: { published: false } });
  const finish = host.messages.find((m, i) => i >= 2 && m.kind === "node.finished");
  assert.notEqual(finish.attemptId, waitingId, "a new attempt replaces the interrupted one");
  assert.equal(finish.payload.nodePath, "approve", "the new attempt carries its start fields");
  assert.deepEqual(finish.payload.output, { decision: "no" });
});

test("a validating candidate is judged by the node's own checks: accepted completes it, rejected waits", async () => {
  const ask = () =>
    defineWorkflow({
      name: "ask",
      startAt: "count",
      nodes: {
        count: agent({
          prompt: "count",
          expectedOutput: '{"n": number}',
          validate: (value) => {
            if (typeof value?.n !== "number") throw new Error("n must be a number");
          },
        }),
        done: compute({ run: ({ outputs }) => outputs.count.n * 2 }),
      },
      edges: [{ from: "count", to: "done" }],
    });
  for (const [payload, expected] of [
    [{ n: "x" }, "interaction.rejected"],
    [{ n: 21 }, "interaction.accepted"],
  ]) {
    const host = new FakeHost({ executionMode: "interactive" });
    assert.deepEqual(await run(ask(), host), { kind: "waiting" });
    host.interaction = { ...host.interaction, validating: { submissionId: "s1", payload } };
    const outcome = await run(ask(), host, "resume");
    assert.ok(host.kinds().includes(expected), `${JSON.stringify(payload)}: ${host.kinds()}`);
    if (expected === "interaction.accepted") assert.deepEqual(outcome, { kind: "completed", output: 42 });
    else assert.deepEqual(outcome, { kind: "waiting" });
  }
});

test("a decision answer may be the bare choice; anything else must name one of the choices", async () => {
  const choices = ["ship", "fix"];
  const wf = () =>
    defineWorkflow({
      name: "gate",
      startAt: "pick",
      nodes: { pick: decision({ question: "ship it?", choices }), ship: compute({ run: () => "shipped" }), fix: compute({ run: () => "fixing" }) },
      edges: [decisionEdge({ from: "pick", choices, cases: { ship: "ship", fix: "fix" } })],
    });
  for (const [payload, expected] of [
    ["ship", "interaction.accepted"],
    [{ route: "fix" }, "interaction.accepted"],
    ["maybe", "interaction.rejected"],
    [{ route: "later" }, "interaction.rejected"],
  ]) {
    const host = new FakeHost({ executionMode: "interactive" });
    assert.deepEqual(await run(wf(), host), { kind: "waiting" });
    host.interaction = { ...host.interaction, validating: { submissionId: "s1", payload } };
    await run(wf(), host, "resume");
    assert.ok(host.kinds().includes(expected), `${JSON.stringify(payload)}: ${host.kinds()}`);
    if (payload === "ship") assert.deepEqual(host.messages.find((m) => m.kind === "interaction.accepted").payload.output, { route: "ship" });
  }
});
