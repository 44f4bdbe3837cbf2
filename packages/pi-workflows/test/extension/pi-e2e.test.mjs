// End to end with the real pinned Pi (1.6.0, RPC mode, `-e` this package's extension), the real
// `pi-workflows` server binary and a loopback mock model: `/workflow start` starts an interactive
// run bound to the session; its step appears once in the conversation; the model submits through
// the `workflow` tool; a rejected submission gets the check's message and the corrected retry is
// accepted; a checkpoint is answered with `/workflow answer`; the run completes. Assertions are
// on Pi's session entries (`get_entries`) and the server's views, not on timing (waits are
// bounded polls). Skipped, saying so, only when the pinned Pi is not installed (CI installs it).
// Also: Pi's real ExtensionAPI type is assignable to the extension's structural PiApi.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { WorkflowClient } from "../../dist/client/index.js";
import { writeMockAgentDir } from "../agent/helpers.mjs";
import { missingPi, packageDir, Rpc, serverBinary, until } from "./support/e2e.mjs";
import { removeTempDirs } from "../support/fixtures.mjs";

const piPackage = path.join(packageDir, ".tools/pi/node_modules/@earendil-works/pi-coding-agent");
const binary = serverBinary;
const { version } = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8"));
/** Bound on every wait for Pi or the server (a hang fails the test, it does not stall CI). */
const WAIT_MS = 90_000;

test("Pi's ExtensionAPI is assignable to the extension's PiApi", { skip: missingPi }, (t) => {
  const dir = mkdtempSync("/tmp/piw-conf-");
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    path.join(dir, "check.ts"),
    `import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import piWorkflows from ${JSON.stringify(path.join(packageDir, "dist/extension/index.js"))};
const check: (pi: ExtensionAPI) => void = piWorkflows;
export default check;
`,
  );
  writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        module: "ESNext",
        moduleResolution: "Bundler",
        target: "ES2022",
        skipLibCheck: true,
        types: ["node"],
        typeRoots: [path.join(packageDir, "node_modules/@types")],
        baseUrl: ".",
        paths: { "@earendil-works/pi-coding-agent": [piPackage] },
      },
      files: ["check.ts"],
    }),
  );
  const tsc = spawnSync(process.execPath, [path.join(packageDir, "node_modules/typescript/bin/tsc"), "-p", path.join(dir, "tsconfig.json")], { encoding: "utf8" });
  assert.equal(tsc.status, 0, `the extension's Pi types drifted from Pi's own:\n${tsc.stdout}${tsc.stderr}`);
});

let root;
let mock;
let env;
const opened = [];

before(async () => {
  if (missingPi) return;
  assert.ok(existsSync(binary), `${binary} is missing: build the server first (cargo build --locked) or set PI_WORKFLOWS_BIN`);
  // Short: the server socket lives below it (Unix socket paths are ≤ 107 bytes).
  root = mkdtempSync("/tmp/piwx-");
  const agentDir = path.join(root, "agent");
  mkdirSync(path.join(root, "home"), { recursive: true });
  mkdirSync(agentDir, { recursive: true });
  mkdirSync(path.join(root, "proj"), { recursive: true });
  mock = spawn(process.execPath, [path.join(packageDir, "test/extension/support/workflow-model.mjs")], {
    env: { ...process.env, MOCK_OUTPUTS: JSON.stringify([{ n: 3 }, { n: 42 }]), MOCK_REQUEST_LOG: path.join(root, "mock.jsonl") },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const port = await new Promise((resolve, reject) => {
    mock.stdout.once("data", (chunk) => resolve(JSON.parse(String(chunk).split("\n")[0]).port));
    mock.once("exit", () => reject(new Error("the mock model exited")));
  });
  writeMockAgentDir(agentDir, port, { retry: { enabled: false } });
  writeFileSync(
    path.join(root, "proj", "numbers.workflow.ts"),
    `import { agent, checkpoint, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "numbers",
  startAt: "pick",
  nodes: {
    pick: agent({
      prompt: "Pick a number.",
      expectedOutput: '{"n": a number above 10}',
      validate: (value) => {
        if (typeof value?.n !== "number" || value.n <= 10) throw new Error("n must be a number above 10");
        return value;
      },
    }),
    approve: checkpoint({ summary: "Approve the number?" }),
    done: compute({ run: ({ outputs }) => ({ n: outputs.pick.n, approved: outputs.approve }) }),
  },
  edges: [{ from: "pick", to: "approve" }, { from: "approve", to: "done" }],
});
`,
  );
  writeFileSync(
    path.join(root, "proj", "approval.workflow.ts"),
    `import { choice, compute, defineHumanChoices, defineWorkflow, humanDecision, humanDecisionEdge, textInput } from "pi-workflows";
const choices = defineHumanChoices({
  merge: choice({ label: "Merge" }),
  fix: choice({ label: "Fix first", input: textInput({ label: "What to fix", maxLength: 100 }) }),
});
export default defineWorkflow({
  name: "approval",
  startAt: "approve",
  nodes: {
    approve: humanDecision({
      audience: "operator",
      choices,
      request: () => ({
        title: "Merge branch fix-1?",
        subject: { branch: "fix-1", commit: "abc123" },
        presentation: { schema: "pi-workflows.decision-presentation.v1", summary: "All 12 checks pass.",
          blocks: [{ kind: "fields", fields: [{ label: "Branch", value: "fix-1" }] }] },
      }),
    }),
    merged: compute({ run: ({ outputs }) => ({ merged: true, by: outputs.approve.provenance }) }),
    fixing: compute({ run: ({ outputs }) => ({ fix: outputs.approve.text }) }),
  },
  edges: [humanDecisionEdge({ from: "approve", choices, cases: { merge: "merged", fix: "fixing" } })],
});
`,
  );
  env = {
    ...process.env,
    HOME: path.join(root, "home"),
    PI_CODING_AGENT_DIR: agentDir,
    PI_OFFLINE: "1",
    PI_WORKFLOWS_BIN: binary,
    PI_WORKFLOWS_PACKAGE_DIR: packageDir,
    PI_WORKFLOWS_CONFIG_DIR: path.join(root, "config"),
  };
  delete env.PI_WORKFLOWS_STATE_DIR;
  delete env.PI_WORKFLOWS_RUNNER;
});

after(async () => {
  for (const rpc of opened) await rpc.close().catch(() => {});
  if (env) spawnSync(binary, ["--state-dir", path.join(env.PI_CODING_AGENT_DIR, "workflows"), "server", "stop"], { env, timeout: 20_000 });
  mock?.kill();
  // Wait for the mock to exit: it logs its requests into root.
  if (mock && mock.exitCode === null && mock.signalCode === null) await new Promise((resolve) => mock.once("exit", resolve));
  if (root && !process.env.PI_WORKFLOWS_KEEP_E2E) removeTempDirs([root]);
});

const stepMessages = (entries) => entries.filter((e) => e.type === "custom_message" && e.customType === "pi-workflows-step");
const toolResults = (entries) => entries.filter((e) => e.type === "message" && e.message.role === "toolResult" && e.message.toolName === "workflow");
const textOf = (message) => (Array.isArray(message.content) ? message.content.map((p) => p.text ?? "").join("") : String(message.content));

test("a workflow started with /workflow runs in the session: step once, rejected then accepted, checkpoint answered", { skip: missingPi }, async () => {
  const rpc = new Rpc(["--session-dir", path.join(root, "sessions"), "-ne", "-e", path.join(packageDir, "dist/extension/index.js")], env, path.join(root, "proj"));
  opened.push(rpc);
  const started = await rpc.send({ type: "prompt", message: `/workflow start ${path.join(root, "proj", "numbers.workflow.ts")}` });
  assert.equal(started.success, true, JSON.stringify(started));
  const notice = await until(() => rpc.notifications().find((m) => /started numbers as run/.test(m) || /^\/workflow/.test(m)), "the start notice", rpc.context, WAIT_MS);
  const runId = /run (run-[A-Za-z0-9-]+)/.exec(notice)?.[1];
  assert.ok(runId, `the run started: ${notice}`);

  // The pick step: rejected once with the check's message, then accepted.
  const afterPick = await until(
    async () => {
      const entries = await rpc.entries();
      return toolResults(entries).some((e) => /^Accepted/.test(textOf(e.message))) ? entries : undefined;
    },
    "an accepted submission",
    rpc.context,
    WAIT_MS,
  );
  const results = toolResults(afterPick).map((e) => textOf(e.message));
  assert.match(results[0], /^Rejected: .*n must be a number above 10/s, "the check's message reaches the model");
  assert.match(results[1], /^Accepted/);
  const pickSteps = stepMessages(afterPick).filter((e) => e.details?.content?.nodePath?.endsWith("pick"));
  assert.equal(pickSteps.length, 1, "the step appears once in the conversation");
  assert.equal(pickSteps[0].details.kind, "step");

  // The checkpoint: a person answers it.
  await until(async () => stepMessages(await rpc.entries()).some((e) => e.details?.content?.summary === "Approve the number?"), "the checkpoint message", rpc.context, WAIT_MS);
  const state = await until(async () => {
    const response = await rpc.send({ type: "get_state" });
    return response.data?.isStreaming === false ? response.data : undefined;
  }, "Pi idle", rpc.context, WAIT_MS);
  const probe = await WorkflowClient.connect(path.join(env.PI_CODING_AGENT_DIR, "workflows", "server", "server.sock"), { packageVersion: version, clientId: "pi-e2e-probe" });
  try {
    const sessionView = await probe.sessionWindow(state.sessionId);
    assert.equal(sessionView.activeRun?.runId, runId, `the session view shows the waiting run: ${JSON.stringify(sessionView).slice(0, 1500)}`);
    assert.equal(sessionView.activeRun.display.status, "waiting");
  } finally {
    probe.close();
  }
  const answered = await rpc.send({ type: "prompt", message: '/workflow answer {"approved": true}' });
  assert.equal(answered.success, true);

  // The server's view: completed; Pi got the terminal message.
  const client = await WorkflowClient.connect(path.join(env.PI_CODING_AGENT_DIR, "workflows", "server", "server.sock"), { packageVersion: version, clientId: "pi-e2e-test" });
  try {
    // The answer settled the run; its continuation went on from the checkpoint.
    const continuation = await until(async () => (await client.call("run.status", { runId })).continuedAs, "the continuation run", rpc.context, WAIT_MS);
    await until(async () => {
      const receipt = await client.call("view.run.get", { runId: continuation });
      return receipt.view?.display?.status === "completed";
    }, "the continuation to complete", rpc.context, WAIT_MS);
    const status = await client.call("run.status", { runId: continuation, payload: { includeResult: true } });
    assert.deepEqual(status.result?.output ?? status.result, { n: 42, approved: { approved: true } });
  } finally {
    client.close();
  }
  const final = await until(async () => {
    const entries = await rpc.entries();
    return entries.some((e) => e.type === "custom_message" && e.customType === "pi-workflows-terminal") ? entries : undefined;
  }, "the terminal message", rpc.context, WAIT_MS);
  assert.equal(stepMessages(final).filter((e) => e.details?.content?.nodePath?.endsWith("pick")).length, 1, "still once");
});

test("a protected decision shows as a card without a model turn and a person answers it with /workflow answer", { skip: missingPi }, async () => {
  const rpc = new Rpc(["--session-dir", path.join(root, "sessions-decision"), "-ne", "-e", path.join(packageDir, "dist/extension/index.js")], env, path.join(root, "proj"));
  opened.push(rpc);
  const started = await rpc.send({ type: "prompt", message: `/workflow start ${path.join(root, "proj", "approval.workflow.ts")}` });
  assert.equal(started.success, true, JSON.stringify(started));
  const notice = await until(() => rpc.notifications().find((m) => /started approval as run/.test(m)), "the start notice", rpc.context, WAIT_MS);
  const runId = /run (run-[A-Za-z0-9-]+)/.exec(notice)?.[1];
  assert.ok(runId, notice);
  const card = await until(async () => (await rpc.entries()).find((e) => e.type === "custom_message" && e.customType === "pi-workflows-decision"), "the decision card", rpc.context, WAIT_MS);
  const text = textOf(card);
  assert.match(text, /Merge branch fix-1\?/);
  assert.match(text, /All 12 checks pass\./);
  assert.match(text, /Branch: fix-1/);
  assert.match(text, /fix: Fix first \(with text: What to fix\)/);
  assert.doesNotMatch(text, /abc123/, "the subject is bound by digest, never shown");
  await until(async () => ((await rpc.send({ type: "get_state" })).data?.isStreaming === false ? true : undefined), "Pi idle", rpc.context, WAIT_MS);
  const afterCard = (await rpc.entries()).slice((await rpc.entries()).indexOf(card));
  assert.equal(afterCard.filter((e) => e.type === "message" && e.message.role === "assistant").length, 0, "a decision starts no model turn");

  const answered = await rpc.send({ type: "prompt", message: `/workflow answer ${runId} fix rename the flag` });
  assert.equal(answered.success, true);
  await until(() => rpc.notifications().find((m) => /answered: fix/.test(m)), "the answer notice", rpc.context, WAIT_MS);
  const client = await WorkflowClient.connect(path.join(env.PI_CODING_AGENT_DIR, "workflows", "server", "server.sock"), { packageVersion: version, clientId: "pi-e2e-decision" });
  try {
    await until(async () => ((await client.call("view.run.get", { runId })).view?.display?.status === "completed" ? true : undefined), "the run to complete", rpc.context, WAIT_MS);
    const status = await client.call("run.status", { runId, payload: { includeResult: true } });
    assert.deepEqual(status.result?.output ?? status.result, { fix: "rename the flag" });
    const again = await client.request("decision.answer", { runId, payload: { answer: "merge" }, idempotencyKey: "second-person" });
    assert.equal(again.outcome, "rejected", "the first valid answer won");
  } finally {
    client.close();
  }
});

test("/workflow-channel shows the channels, refuses a configuration others can read, and checks its arguments", { skip: missingPi }, async () => {
  const rpc = new Rpc(["--session-dir", path.join(root, "sessions-channel"), "-ne", "-e", path.join(packageDir, "dist/extension/index.js")], env, path.join(root, "proj"));
  opened.push(rpc);
  const seen = () => rpc.notifications().length;
  const notice = async (message, pattern, what) => {
    const from = seen();
    const sent = await rpc.send({ type: "prompt", message });
    assert.equal(sent.success, true, JSON.stringify(sent));
    return until(() => rpc.notifications().slice(from).find((m) => pattern.test(m)), what, rpc.context, WAIT_MS);
  };
  await notice("/workflow-channel status", /No Telegram profiles/, "the empty status");
  const config = env.PI_WORKFLOWS_CONFIG_DIR;
  mkdirSync(config, { recursive: true });
  writeFileSync(path.join(config, "channels.json"), JSON.stringify({ schema: "pi-workflows.channels.v1", audiences: { operator: { channels: ["pi"] } } }), { mode: 0o644 });
  chmodSync(path.join(config, "channels.json"), 0o644);
  const refused = await notice("/workflow-channel reload", /chmod 600/, "the refused reload");
  assert.match(refused, /readable by group or others/);
  const status = await notice("/workflow-channel status", /Configuration refused/, "the refusal in the status");
  assert.match(status, /chmod 600/);
  await notice("/workflow-channel recover nonsense", /usage: \/workflow-channel recover <cm-id> confirm\|retry/, "the usage");
  const setup = await notice("/workflow-channel setup", /BotFather/, "the set-up steps");
  assert.match(setup, /credentials\.json/);
  rmSync(path.join(config, "channels.json"));
});
