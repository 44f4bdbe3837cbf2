// Runs the Pi RPC executor against the REAL pinned `pi` (1.6, on the project-local Node 22) and the scripted
// mock model on 127.0.0.1 (fixtures/bridge-model.mjs: it submits through the bridge's `workflow` tool),
// while this test process (the runner's side) may run on Node 20. The step's output is the accepted
// submission; these tests accept any value (the node's checks are covered in bridge.test.mjs).
// Needs `dist/` (tsc build). Pi is installed on demand by scripts/install-pi.sh; if that fails, tests fail.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createPiRpcExecutor } from "../../dist/agent/executor.js";
import { localPiBinary, localPiNode, nodeVersionSupportsPi } from "../../dist/agent/process.js";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { groupGone, liveProcessesWith, makeSupervisor, sleep, waitFor, removeMockPi, setUpMockPi } from "./helpers.mjs";

const linuxOnly = process.platform !== "linux" && "needs /proc";

let piBinary;
let mock;
let pi;

before(async () => ({ piBinary, mock, pi } = await setUpMockPi()));
after(() => removeMockPi({ mock, pi }));

const executor = () => createPiRpcExecutor({ piBinary, env: pi.env });

/** A submission contract that accepts every value. */
function acceptAll(requestId = "req:test") {
  return { requestId, check: async (output) => ({ accepted: true, output }) };
}

function request(supervisor, overrides = {}) {
  return {
    prompt: "Say hello.",
    submission: acceptAll(),
    timeoutMs: 30_000,
    cwd: pi.cwd,
    signal: new AbortController().signal,
    registerProcess: (pid) => supervisor.registerProcess(pid),
    unregisterProcess: (pid) => supervisor.unregisterProcess(pid),
    ...overrides,
  };
}

function assertCleanLifecycle(supervisor, requestsBefore) {
  const [register, registered, unregister, ...rest] = supervisor.events;
  assert.equal(rest.length, 0, "register and unregister are called once each");
  assert.equal(register.event, "register");
  assert.equal(registered.event, "registered");
  assert.equal(unregister.event, "unregister");
  assert.equal(register.pid, unregister.pid);
  assert.equal(register.requestsSoFar, requestsBefore, "the model got no request before registerProcess was called");
  assert.equal(registered.requestsSoFar, requestsBefore, "the model got no request while registerProcess was pending");
  assert.ok(unregister.groupGone, "the process group is gone when unregisterProcess is called");
  if (unregister.killError !== "ESRCH") {
    // Only possible where orphaned zombies are never reaped (a container whose init does not reap).
    assert.equal(unregister.killError, null);
  }
  assert.ok(groupGone(register.pid));
  return register.pid;
}

test("a step completes with the submitted value; register before the first request, unregister after the group is gone", async () => {
  const supervisor = makeSupervisor(mock, { registerDelayMs: 400 });
  const before = mock.requests().length;
  const started = Date.now();
  const result = await executor().runAgent(request(supervisor));
  const elapsed = Date.now() - started;
  assert.deepEqual(result, { ok: true, output: "Hello from the mock model." });
  const pid = assertCleanLifecycle(supervisor, before);
  const sent = mock.requests().slice(before);
  assert.equal(sent.length, 1, "the accepted submission ends the turn (no follow-up model call)");
  assert.ok(sent[0].time >= supervisor.events[1].time, "first model request only after registration completed");
  assert.equal(sent[0].body.model, "mock-model");
  assert.equal(sent[0].body.stream, true);
  assert.equal(sent[0].auth, "Bearer sk-mock-not-a-real-key");
  const user = sent[0].body.messages.filter((m) => m.role === "user").at(-1);
  assert.match(JSON.stringify(user.content), /Say hello\./);
  assert.match(JSON.stringify(user.content), /\\"action\\": \\"submit\\", \\"requestId\\": \\"req:test\\"/, "the prompt names the requestId");
  // Pi starts while registerProcess is pending, so the 400 ms delay overlaps Pi's own startup.
  console.log(`# pi pid ${pid}: runAgent start to first model request ${sent[0].time - started} ms, whole run ${elapsed} ms`);
});

test("expectedOutput is described in the prompt; the default binary lookup finds the project-local Pi", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  // No piBinary and no PI_WORKFLOWS_PI_BIN: the executor falls back to .tools/pi from install-pi.sh.
  const result = await createPiRpcExecutor({ env: pi.env }).runAgent(
    request(supervisor, {
      prompt: 'Answer the question.\nOUTPUTS: [{"answer":42}]',
      expectedOutput: 'a JSON object like {"answer": <number>}',
    }),
  );
  assert.deepEqual(result, { ok: true, output: { answer: 42 } });
  assertCleanLifecycle(supervisor, before);
  const [sent] = mock.requests().slice(before);
  const user = JSON.stringify(sent.body.messages.filter((m) => m.role === "user").at(-1).content);
  assert.match(user, /Expected output: a JSON object like/);
  if (process.platform === "linux") {
    // The JavaScript entry ran on install-pi.sh's Node 22, not on this process's Node.
    assert.equal(supervisor.events[0].exe, fs.realpathSync(localPiNode()), `this test runs on Node ${process.version}`);
  }
});

test("no extension but the bridge runs in a headless step and the agent dir gets no sessions or settings changes", async () => {
  const probe = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "load-probe.ts");
  const extensions = path.join(pi.env.PI_CODING_AGENT_DIR, "extensions");
  fs.mkdirSync(extensions, { recursive: true });
  fs.copyFileSync(probe, path.join(extensions, "load-probe.ts"));
  const settingsFile = path.join(pi.env.PI_CODING_AGENT_DIR, "settings.json");
  const settingsBefore = fs.readFileSync(settingsFile, "utf8");
  const marker = path.join(pi.root, `probe-${Date.now()}`);
  try {
    // Control: an explicit -e still loads (so the probe works), and extraArgs reach Pi.
    const explicit = createPiRpcExecutor({ piBinary, env: { ...pi.env, PROBE_MARKER: `${marker}-explicit` }, extraArgs: ["-e", probe] });
    assert.equal((await explicit.runAgent(request(makeSupervisor(mock)))).ok, true);
    assert.equal(fs.readFileSync(`${marker}-explicit`, "utf8"), "loaded");

    const supervisor = makeSupervisor(mock);
    const before = mock.requests().length;
    const plain = createPiRpcExecutor({ piBinary, env: { ...pi.env, PROBE_MARKER: marker } });
    assert.deepEqual(await plain.runAgent(request(supervisor)), { ok: true, output: "Hello from the mock model." });
    assertCleanLifecycle(supervisor, before);
    assert.equal(fs.existsSync(marker), false, "the discovered extension in <agentDir>/extensions was not loaded");
    const [sent] = mock.requests().slice(before);
    assert.deepEqual(sent.body.tools.map((t) => t.function?.name ?? t.name).sort(), ["bash", "edit", "read", "workflow", "write"]);
    const workflowTool = sent.body.tools.find((t) => t.function?.name === "workflow").function;
    assert.deepEqual(workflowTool.parameters.properties.action.enum, ["update", "submit"], "the bridge offers only update and submit");
  } finally {
    fs.rmSync(extensions, { recursive: true, force: true });
  }
  assert.equal(fs.readFileSync(settingsFile, "utf8"), settingsBefore, "settings.json is unchanged");
  assert.equal(fs.existsSync(path.join(pi.env.PI_CODING_AGENT_DIR, "sessions")), false, "--no-session writes no session");
});

test("a hanging model gives agentTimedOut and no process of the group survives", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const started = Date.now();
  // Generous enough for Pi's startup (1-3 s, more on a loaded machine) to reach the model first.
  const timeoutMs = 8000;
  const result = await executor().runAgent(request(supervisor, { prompt: "Wait forever. [mock:hang]", timeoutMs }));
  const elapsed = Date.now() - started;
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentTimedOut");
  assert.ok(elapsed >= timeoutMs && elapsed < timeoutMs + 6000, `timed out in ${elapsed} ms`);
  assert.equal(mock.requests().length, before + 1, "the model received the request");
  assertCleanLifecycle(supervisor, before);
  console.log(`# timeout run: ${elapsed} ms for timeoutMs ${timeoutMs}`);
});

test("aborting through the signal gives agentAborted and stops the group", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const controller = new AbortController();
  const run = executor().runAgent(request(supervisor, { prompt: "Stream slowly. [mock:slow]", signal: controller.signal }));
  await waitFor(() => mock.requests().length > before, 20_000, "the model request");
  await sleep(300);
  const abortedAt = Date.now();
  controller.abort();
  const result = await run;
  const cleanup = Date.now() - abortedAt;
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentAborted");
  assert.ok(cleanup < 6000, `cleanup took ${cleanup} ms`);
  assertCleanLifecycle(supervisor, before);
  console.log(`# abort: result and cleanup ${cleanup} ms after abort()`);
});

test("an already aborted signal returns agentAborted without starting pi", async () => {
  const supervisor = makeSupervisor(mock);
  const result = await executor().runAgent(request(supervisor, { signal: AbortSignal.abort() }));
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentAborted");
  assert.equal(supervisor.events.length, 0);
});

test("a missing binary gives piNotFound with install instructions", async () => {
  const supervisor = makeSupervisor(mock);
  const missing = createPiRpcExecutor({ piBinary: "/nonexistent/dir/pi", env: pi.env });
  const result = await missing.runAgent(request(supervisor));
  assert.equal(result.ok, false);
  assert.equal(result.code, "piNotFound");
  assert.match(result.message, /install-pi\.sh/);
  assert.equal(supervisor.events.length, 0);

  const viaEnv = createPiRpcExecutor({ env: { ...pi.env, PI_WORKFLOWS_PI_BIN: "/nonexistent/pi" } });
  const second = await viaEnv.runAgent(request(supervisor));
  assert.equal(second.ok, false);
  assert.equal(second.code, "piNotFound");
});

test("a wrapper that starts Pi on too old a Node fails with the Node 22 hint", {
  skip: nodeVersionSupportsPi(process.versions.node) && "this test process runs on a Node that Pi supports",
}, async () => {
  // What a user's own `pi` wrapper does when it runs `node` from PATH and that is Node 20.
  const wrapper = path.join(pi.root, "old-node-pi");
  const entry = fs.realpathSync(localPiBinary());
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec '${process.execPath}' '${entry}' "$@"\n`, { mode: 0o755 });
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const result = await createPiRpcExecutor({ piBinary: wrapper, env: pi.env }).runAgent(request(supervisor));
  assertCleanLifecycle(supervisor, before);
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentFailed");
  assert.match(result.message, /Pi exited before the turn completed/);
  assert.match(result.message, /Pi needs Node >= 22\.19/);
  assert.match(result.message, /enableCompileCache/);
});

test("a reply over the size bound gives agentOutputTooLarge", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const result = await executor().runAgent(request(supervisor, { prompt: "Say a lot. [mock:big=300000]" }));
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentOutputTooLarge");
  assertCleanLifecycle(supervisor, before);
});

test("a model error gives agentFailed that points at the model configuration", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const result = await executor().runAgent(request(supervisor, { prompt: "Fail please. [mock:error]" }));
  assert.equal(result.ok, false);
  assert.equal(result.code, "agentFailed");
  assert.match(result.message, /model configuration/);
  assert.doesNotMatch(result.message, /Fail please/, "the prompt is not echoed in errors");
  assertCleanLifecycle(supervisor, before);
});

test("a failing registerProcess rejects runAgent, sends no prompt and still stops the group", async () => {
  const failure = new Error("registry unavailable");
  const supervisor = makeSupervisor(mock, { registerError: failure });
  const before = mock.requests().length;
  await assert.rejects(executor().runAgent(request(supervisor)), failure);
  const pid = supervisor.events[0].pid;
  assert.ok(groupGone(pid));
  await sleep(200);
  assert.equal(mock.requests().length, before, "no prompt reached the model");
});

test("a bash tool call runs and the submission follows the tool result; the shell gets no bridge variables", async () => {
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const result = await executor().runAgent(
    request(supervisor, { prompt: "Use the shell. [mock:tool]\nBASH: echo tool-output-$((40 + 2)) socket=${PI_WORKFLOWS_BRIDGE_SOCKET:-none} token=${PI_WORKFLOWS_BRIDGE_TOKEN:-none}" }),
  );
  assert.equal(result.ok, true, JSON.stringify(result));
  assert.match(result.output, /^Tool finished: tool-output-42 socket=none token=none/);
  assert.equal(mock.requests().length, before + 2, "one request for the tool call, one after the tool result");
  assertCleanLifecycle(supervisor, before);
});

test("a tool process still running when the run is aborted does not survive", { skip: linuxOnly }, async () => {
  const marker = `sleep ${300 + Math.floor(Math.random() * 1000)}.25`;
  const supervisor = makeSupervisor(mock);
  const before = mock.requests().length;
  const controller = new AbortController();
  const run = executor().runAgent(request(supervisor, { prompt: `Run it. [mock:tool]\nBASH: ${marker}`, signal: controller.signal }));
  await waitFor(() => liveProcessesWith(marker).length > 0, 20_000, "the tool process");
  controller.abort();
  const result = await run;
  assert.equal(result.code, "agentAborted");
  assertCleanLifecycle(supervisor, before);
  assert.deepEqual(liveProcessesWith(marker), [], "the tool's own process group was stopped too");
});

test("a Pi that ignores SIGTERM is killed after the grace period, with its detached descendants", { skip: linuxOnly }, async () => {
  const marker = `stubborn-${process.pid}-${Date.now()}`;
  const stub = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "stubborn-pi.mjs");
  const supervisor = makeSupervisor(mock);
  const stubborn = createPiRpcExecutor({ piBinary: stub, env: { ...pi.env, STUB_MARKER: marker } });
  const started = Date.now();
  const run = stubborn.runAgent(request(supervisor, { timeoutMs: 1500 }));
  await waitFor(() => liveProcessesWith(marker).length > 0, 10_000, "the stub's detached child");
  const result = await run;
  const elapsed = Date.now() - started;
  assert.equal(result.code, "agentTimedOut");
  assert.ok(elapsed >= 1500 + 2000, `SIGKILL only after the 2 s grace (took ${elapsed} ms)`);
  assert.ok(elapsed < 1500 + 2000 + 4000, `bounded cleanup (took ${elapsed} ms)`);
  const unregister = supervisor.events.at(-1);
  assert.equal(unregister.event, "unregister");
  assert.ok(unregister.groupGone);
  assert.deepEqual(liveProcessesWith(marker), [], "the detached grandchild was killed");
});

test("a timeout during a slow registerProcess stops Pi at once and unregisters only after registration", async () => {
  const supervisor = makeSupervisor(mock, { registerDelayMs: 2500 });
  const before = mock.requests().length;
  const started = Date.now();
  const result = await executor().runAgent(request(supervisor, { timeoutMs: 500 }));
  const elapsed = Date.now() - started;
  assert.equal(result.code, "agentTimedOut");
  assert.deepEqual(supervisor.events.map((e) => e.event), ["register", "registered", "unregister"]);
  assert.ok(supervisor.events[2].groupGone);
  assert.ok(elapsed < 2500 + 1500, `returned ${elapsed} ms after start`);
  await sleep(200);
  assert.equal(mock.requests().length, before, "no prompt was sent");
});
