// The headless agent bridge: its channel (BridgeServer, no Pi), the bridge tool's contract, the bounded
// prompt, and headless agent steps run by the engine with the REAL pinned Pi and the scripted
// fixtures/bridge-model.mjs, which submits through the bridge's `workflow` tool. Needs `dist/`.
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, test } from "node:test";
import { createPiRpcExecutor, SUBMISSION_REMINDERS_MAX } from "../../dist/agent/executor.js";
import { BRIDGE_TOOL_PARAMETERS, validateBridgeParams } from "../../dist/agent/bridge/extension.js";
import { BRIDGE_FRAME_BYTES_MAX, BRIDGE_SOCKET_ENV, BRIDGE_TOKEN_ENV } from "../../dist/agent/bridge/protocol.js";
import { BridgeServer } from "../../dist/agent/bridge/server.js";
import { boundedPromptText, headlessStepPrompt, PROMPT_EXCERPT_BYTES, PROMPT_TEXT_BYTES_MAX } from "../../dist/engine/agent-output.js";
import { TOOL_ERRORS_MAX } from "../../dist/extension/tool.js";
import { agent, compileWorkflow, compute, decision, decisionEdge, defineWorkflow, runWorkflow } from "../../dist/index.js";
import { FakeHost } from "../support/fake-host.mjs";
import { removeMockPi, setUpMockPi } from "./helpers.mjs";

// ---- the channel, without Pi ----

/** A raw client of a BridgeServer: `send(frame)`, `next()` resolves with the next frame (null at close). */
function rawClient(socketPath) {
  const socket = net.createConnection(socketPath);
  const frames = [];
  const waiters = [];
  let buffer = "";
  let closed = false;
  const deliver = (frame) => (waiters.length > 0 ? waiters.shift()(frame) : frames.push(frame));
  socket.on("data", (chunk) => {
    buffer += chunk;
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      deliver(JSON.parse(buffer.slice(0, nl)));
      buffer = buffer.slice(nl + 1);
    }
  });
  socket.on("error", () => {});
  socket.on("close", () => {
    closed = true;
    while (waiters.length > 0) waiters.shift()(null);
  });
  return {
    socket,
    send: (frame) => socket.write(`${JSON.stringify(frame)}\n`),
    next: () => (frames.length > 0 ? Promise.resolve(frames.shift()) : closed ? Promise.resolve(null) : new Promise((resolve) => waiters.push(resolve))),
    close: () => socket.destroy(),
  };
}

function openBridge(overrides = {}) {
  const updates = [];
  const handlers = {
    requestId: "req:a-1",
    allowedTools: ["read"],
    check: async (value) => (typeof value?.n === "number" ? { accepted: true, output: { n: value.n * 10 } } : { accepted: false, message: "n must be a number" }),
    update: async (update) => void updates.push(update),
    ...overrides,
  };
  return BridgeServer.open(handlers).then((bridge) => ({ bridge, updates }));
}

test("the bridge channel: private socket, token hello, stale requestId refused, rejected then accepted, updates recorded", async () => {
  const { bridge, updates } = await openBridge();
  const env = bridge.env();
  const socketPath = env[BRIDGE_SOCKET_ENV];
  assert.equal(fs.statSync(path.dirname(socketPath)).mode & 0o777, 0o700, "the socket's dir is user-only");
  assert.equal(fs.statSync(socketPath).mode & 0o777, 0o600);
  assert.match(env[BRIDGE_TOKEN_ENV], /^[0-9a-f]{64}$/);

  const intruder = rawClient(socketPath);
  intruder.send({ type: "hello", protocol: 1, token: "0".repeat(64) });
  assert.deepEqual(await intruder.next(), { type: "refused", message: "bad hello" });
  assert.equal(await intruder.next(), null, "a wrong token is disconnected");

  const client = rawClient(socketPath);
  client.send({ type: "hello", protocol: 1, token: env[BRIDGE_TOKEN_ENV] });
  assert.deepEqual(await client.next(), { type: "ready", requestId: "req:a-1", allowedTools: ["read"] });
  const second = rawClient(socketPath);
  second.send({ type: "hello", protocol: 1, token: env[BRIDGE_TOKEN_ENV] });
  assert.deepEqual(await second.next(), { type: "refused", message: "another bridge is connected" });

  const call = async (frame) => {
    client.send({ type: "call", ...frame });
    return client.next();
  };
  const stale = await call({ seq: 1, action: "submit", requestId: "req:old", output: { n: 1 } });
  assert.equal(stale.status, "refused");
  assert.match(stale.message, /"req:old" is not this step's request; use "req:a-1"/);
  assert.deepEqual(await call({ seq: 2, action: "update", requestId: "req:a-1", update: { type: "progress", key: "k", data: { done: 1 } } }), { type: "answer", seq: 2, status: "recorded" });
  assert.deepEqual(updates, [{ type: "progress", key: "k", data: { done: 1 } }]);
  assert.deepEqual(await call({ seq: 3, action: "submit", requestId: "req:a-1", output: { n: "x" } }), { type: "answer", seq: 3, status: "rejected", message: "n must be a number" });
  assert.equal(bridge.accepted, undefined);
  assert.equal(bridge.lastRejection, "n must be a number");
  assert.deepEqual(await call({ seq: 4, action: "submit", requestId: "req:a-1", output: { n: 2 } }), { type: "answer", seq: 4, status: "accepted" });
  assert.deepEqual(bridge.accepted, { output: { n: 20 } }, "the accepted value is the checks' shaped output");
  assert.equal((await call({ seq: 5, action: "submit", requestId: "req:a-1", output: { n: 2 } })).status, "accepted", "the same value again is adopted");
  assert.match((await call({ seq: 6, action: "submit", requestId: "req:a-1", output: { n: 3 } })).message, /already accepted an output/);
  assert.equal((await call({ seq: 7, action: "update", requestId: "req:a-1", update: { type: "progress", key: "k", data: 2 } })).status, "refused");
  assert.equal(bridge.submissions, 2);

  // A frame over the bound is a broken bridge: the runner hangs up.
  client.socket.write(`{"type":"call","seq":8,"action":"submit","requestId":"req:a-1","output":"${"x".repeat(BRIDGE_FRAME_BYTES_MAX)}"}\n`);
  assert.equal(await client.next(), null);
  for (const c of [intruder, second]) c.close();
  await bridge.close();
  assert.equal(fs.existsSync(path.dirname(socketPath)), false, "closing removes the socket's dir");
});

test("the bridge channel takes one call at a time", async () => {
  let release;
  const { bridge } = await openBridge({ check: () => new Promise((resolve) => (release = () => resolve({ accepted: true, output: 1 }))) });
  const client = rawClient(bridge.env()[BRIDGE_SOCKET_ENV]);
  client.send({ type: "hello", protocol: 1, token: bridge.env()[BRIDGE_TOKEN_ENV] });
  await client.next();
  client.send({ type: "call", seq: 1, action: "submit", requestId: "req:a-1", output: 1 });
  client.send({ type: "call", seq: 2, action: "submit", requestId: "req:a-1", output: 1 });
  const busy = await client.next();
  assert.deepEqual([busy.seq, busy.status], [2, "refused"]);
  assert.match(busy.message, /one workflow call at a time/);
  release();
  assert.deepEqual(await client.next(), { type: "answer", seq: 1, status: "accepted" });
  client.close();
  await bridge.close();
});

test("the bridge tool: the interactive tool's fields and validation, for update and submit only", () => {
  assert.deepEqual(Object.keys(BRIDGE_TOOL_PARAMETERS.properties).sort(), ["action", "output", "requestId", "update"]);
  assert.equal(BRIDGE_TOOL_PARAMETERS.type, "object");
  assert.equal(BRIDGE_TOOL_PARAMETERS.anyOf, undefined, "one flat object schema");
  assert.throws(() => validateBridgeParams({ action: "start", workflow: "x" }), /action must be one of: update, submit/);
  const many = (() => {
    try {
      validateBridgeParams({ action: "submit", requestId: "bad id!", extra: 1, other: 2, update: 3 });
    } catch (error) {
      return error.message;
    }
  })();
  assert.match(many, /refused and changed nothing/);
  assert.equal(many.split("\n").filter((line) => line.startsWith("- ") && !line.startsWith("- and ")).length, TOOL_ERRORS_MAX);
  assert.match(many, /- and \d+ more/);
  assert.deepEqual(validateBridgeParams({ action: "submit", requestId: "req:a-1", output: { n: 1 } }), { action: "submit", requestId: "req:a-1", output: { n: 1 } });
});

test("a large prompt becomes its size, digest and an excerpt", () => {
  const big = "y".repeat(PROMPT_TEXT_BYTES_MAX + 1);
  const cut = boundedPromptText(big);
  assert.ok(Buffer.byteLength(cut) < PROMPT_EXCERPT_BYTES + 300);
  assert.match(cut, new RegExp(`${PROMPT_TEXT_BYTES_MAX + 1} bytes in all, sha256 [0-9a-f]{64}`));
  assert.equal(boundedPromptText("small"), "small");
  const prompt = headlessStepPrompt({ requestId: "req:a-1", prompt: big, expectedOutput: "z".repeat(100_000), workflow: "wf", nodePath: "n" });
  assert.ok(Buffer.byteLength(prompt) < PROMPT_EXCERPT_BYTES + 4096, `prompt is ${Buffer.byteLength(prompt)} bytes`);
  assert.match(prompt, /"action": "submit", "requestId": "req:a-1"/);
});

// ---- headless agent steps through the engine, with the real Pi ----

let piBinary;
let mock;
let pi;

before(async () => ({ piBinary, mock, pi } = await setUpMockPi()));
after(() => removeMockPi({ mock, pi }));

function runHeadless(definition, host = new FakeHost()) {
  const outcome = runWorkflow({
    workflow: compileWorkflow(definition),
    host,
    runState: host.runState(),
    command: "start",
    projectPath: pi.cwd,
    attemptIdPrefix: `b${Date.now()}`,
    loadAgentExecutor: async () => createPiRpcExecutor({ piBinary, env: pi.env }),
  });
  return { host, outcome };
}

/** The user and tool messages the model saw in its last request since `from`. */
function conversation(from) {
  const last = mock.requests().slice(from).at(-1);
  const text = (m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""));
  return last.body.messages.filter((m) => m.role === "user" || m.role === "tool").map((m) => ({ role: m.role, text: text(m) }));
}

function countFlow(prompt, extra = {}) {
  return defineWorkflow({
    name: "count",
    startAt: "count",
    nodes: {
      count: agent({
        prompt,
        expectedOutput: '{"n": number}',
        validate: (value) => {
          if (typeof value?.n !== "number") throw new Error("n must be a number, e.g. {\"n\": 2}");
        },
        timeoutMs: 60_000,
        ...extra,
      }),
      double: compute({ run: ({ outputs }) => outputs.count.n * 2 }),
    },
    edges: [{ from: "count", to: "double" }],
  });
}

test("a headless agent step whose model submits through the bridge completes with the submitted value", async () => {
  const from = mock.requests().length;
  const { host, outcome } = runHeadless(countFlow('Count the things. [mock:update]\nOUTPUTS: [{"n": 21}]'));
  assert.deepEqual(await outcome, { kind: "completed", output: 42 });
  const finished = host.messages.find((m) => m.kind === "node.finished" && m.payload.output?.n === 21);
  assert.ok(finished, host.kinds().join(", "));
  const requestId = `req:${finished.attemptId}`;
  const [prompt] = conversation(from);
  assert.match(prompt.text, new RegExp(`\\\\"action\\\\": \\\\"submit\\\\", \\\\"requestId\\\\": \\\\"${requestId}\\\\"`), "the prompt names the attempt's requestId");
  assert.match(prompt.text, /Workflow step: test › count/);
  // The update went to the runner as the attempt's progress event.
  const update = host.messages.find((m) => m.kind === "node.update");
  assert.deepEqual(update, { kind: "node.update", attemptId: finished.attemptId, payload: { message: 'progress k: {"step":1}' } });
  assert.ok(host.messages.some((m) => m.kind === "runner.progress" && m.payload.operation === "process.unregister"));
});

test("a rejected value gets the node's actionable message and the model's corrected retry completes the step", async () => {
  const from = mock.requests().length;
  const { host, outcome } = runHeadless(countFlow('Count again.\nOUTPUTS: [{"n": "three"}, {"n": 3}]'));
  assert.deepEqual(await outcome, { kind: "completed", output: 6 });
  const tools = conversation(from).filter((m) => m.role === "tool");
  assert.equal(tools.length, 1, "one rejection went back to the model");
  assert.match(tools[0].text, /^Rejected: n must be a number, e\.g\. \{"n": 2\}\nFix the output and call the workflow tool again with action submit and requestId req:/);
  assert.equal(host.kinds().filter((k) => k === "node.failed").length, 0);
});

test("a turn with no submission is reminded at most twice, then the attempt fails with missingSubmission", async () => {
  const from = mock.requests().length;
  const { host, outcome } = runHeadless(countFlow("Think about it. [mock:never]"));
  const result = await outcome;
  assert.equal(result.kind, "failed");
  const failed = host.messages.find((m) => m.kind === "node.failed");
  assert.equal(failed.payload.error.code, "missingSubmission");
  assert.match(failed.payload.error.message, /ended 3 turns without an accepted submission through the workflow tool \(2 reminders sent/);
  assert.equal(mock.requests().length - from, 1 + SUBMISSION_REMINDERS_MAX, "one model call per turn");
  const prompts = conversation(from).filter((m) => m.role === "user");
  assert.equal(prompts.length, 1 + SUBMISSION_REMINDERS_MAX);
  assert.match(prompts[1].text, /reminder: this step is still open/);
  assert.match(prompts[2].text, /reminder 2 of 2/);
  assert.match(prompts[2].text, /\\"action\\": \\"submit\\", \\"requestId\\": \\"req:/);
});

test("allowedTools: a call of another tool is blocked with a clear reason, and the step still completes", async () => {
  const marker = path.join(pi.root, `blocked-${Date.now()}`);
  const from = mock.requests().length;
  const { outcome } = runHeadless(countFlow(`Use the shell. [mock:tool]\nBASH: touch ${marker}\nOUTPUTS: [{"n": 5}]`, { allowedTools: ["read"] }));
  assert.deepEqual(await outcome, { kind: "completed", output: 10 });
  assert.equal(fs.existsSync(marker), false, "the bash command never ran");
  const [blocked] = conversation(from).filter((m) => m.role === "tool");
  assert.match(blocked.text, /this workflow step does not allow the "bash" tool \(allowed tools: read; the workflow tool is always available\)/);
});

test("a stale requestId is refused without touching the step, and a decision step submits its route", async () => {
  const from = mock.requests().length;
  const { outcome } = runHeadless(countFlow('Count. [mock:stale]\nOUTPUTS: [{"n": 4}]'));
  assert.deepEqual(await outcome, { kind: "completed", output: 8 });
  const [refused] = conversation(from).filter((m) => m.role === "tool");
  assert.match(refused.text, /^submit failed \(refused\): requestId "req:stale" is not this step's request; use "req:/);

  const choices = ["go", "stop"];
  const gate = defineWorkflow({
    name: "gate",
    startAt: "pick",
    nodes: {
      pick: decision({ question: 'Go on? OUTPUTS: ["maybe", {"route": "stop"}]', choices }),
      go: compute({ run: () => "went" }),
      stop: compute({ run: () => "stopped" }),
    },
    edges: [decisionEdge({ from: "pick", choices, cases: { go: "go", stop: "stop" } })],
  });
  assert.deepEqual(await runHeadless(gate).outcome, { kind: "completed", output: "stopped" });
});

test("agent.allowedTools takes a short list of tool names", () => {
  assert.deepEqual(agent({ prompt: "p", allowedTools: ["read", "bash", "read"] }).allowedTools, ["read", "bash"]);
  assert.equal(agent({ prompt: "p" }).allowedTools, undefined);
  assert.throws(() => agent({ prompt: "p", allowedTools: ["rm -rf"] }), /agent\.allowedTools must be a list/);
  assert.throws(() => agent({ prompt: "p", allowedTools: "read" }), /agent\.allowedTools must be a list/);
});

test("a Pi child whose bridge never connects fails the step at once instead of reminding it", async () => {
  // The real executor with the channel variables overwritten: the extension cannot connect.
  const broken = createPiRpcExecutor({ piBinary, env: { ...pi.env }, extraArgs: [] });
  const from = mock.requests().length;
  const supervisor = { registerProcess: async () => {}, unregisterProcess: async () => {} };
  const originalOpen = BridgeServer.open;
  BridgeServer.open = async (handlers) => {
    const bridge = await originalOpen.call(BridgeServer, handlers);
    const env = bridge.env.bind(bridge);
    bridge.env = () => ({ ...env(), [BRIDGE_TOKEN_ENV]: "f".repeat(64) });
    return bridge;
  };
  try {
    const result = await broken.runAgent({
      prompt: "Think. [mock:never]",
      submission: { requestId: "req:x", check: async (output) => ({ accepted: true, output }) },
      timeoutMs: 30_000,
      cwd: pi.cwd,
      signal: new AbortController().signal,
      ...supervisor,
    });
    assert.equal(result.code, "agentFailed");
    assert.match(result.message, /bridge extension never connected/);
    assert.equal(mock.requests().length - from, 1, "no reminder was sent");
  } finally {
    BridgeServer.open = originalOpen;
  }
});
