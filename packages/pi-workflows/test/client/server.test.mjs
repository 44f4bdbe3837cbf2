// The TypeScript client against the real server (the Rust binary built by `cargo test` or
// `cargo build`): start a real workflow, watch it to the end from snapshot + patches, read
// referenced content, and see a retry with the same idempotency key adopted.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { WorkflowClient } from "../../dist/client/index.js";
import { removeTempDirs } from "../support/fixtures.mjs";

const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const binary = process.env.PI_WORKFLOWS_BIN ?? path.resolve(packageDir, "../../target/debug/pi-workflows");
const state = mkdtempSync("/tmp/piwts-");
const agentDir = mkdtempSync("/tmp/piwtsa-");
const env = { ...process.env, PI_WORKFLOWS_PACKAGE_DIR: packageDir, PI_CODING_AGENT_DIR: agentDir };
delete env.PI_WORKFLOWS_RUNNER;

function cli(...args) {
  const result = spawnSync(binary, ["--state-dir", state, ...args], { env, encoding: "utf8" });
  assert.equal(result.status, 0, `pi-workflows ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}

const workflow = path.join(state, "chain.workflow.ts");
const tuned = path.join(state, "tuned.workflow.ts");
const replying = path.join(state, "replying.workflow.ts");
const deciding = path.join(state, "deciding.workflow.ts");
let client;

before(async () => {
  assert.ok(existsSync(binary), `${binary} is missing: build the Rust binary first (cargo build)`);
  const nodes = Array.from({ length: 12 }, (_, i) => `    n${i + 1}: compute({ run: ({ outputs }) => ({ i: ${i + 1}, prev: outputs.n${i}?.i ?? 0 }) }),`);
  const edges = Array.from({ length: 11 }, (_, i) => `{ from: "n${i + 1}", to: "n${i + 2}" }`);
  writeFileSync(
    workflow,
    `import { compute, defineWorkflow } from "pi-workflows";\nexport default defineWorkflow({\n  name: "chain",\n  startAt: "n1",\n  nodes: {\n${nodes.join("\n")}\n  },\n  edges: [${edges.join(", ")}],\n});\n`,
  );
  writeFileSync(
    tuned,
    `import { checkpoint, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "tuned",
  settings: { initial: { mode: "quick" }, changeable: { "/mode": ["replace"] } },
  startAt: "ask",
  nodes: {
    ask: checkpoint({ summary: "Go?" }),
    report: compute({ run: ({ settings, settingsChangeNumber }) => ({ mode: settings.mode, number: settingsChangeNumber }) }),
  },
  edges: [{ from: "ask", to: "report" }],
});
`,
  );
  writeFileSync(
    replying,
    `import { agent, assistantMessage, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "replying",
  startAt: "reply",
  nodes: {
    reply: agent({ prompt: "Say hello briefly.", expectedOutput: assistantMessage({ maxChars: 20 }) }),
    done: compute({ run: ({ outputs }) => ({ said: outputs.reply }) }),
  },
  edges: [{ from: "reply", to: "done" }],
});
`,
  );
  writeFileSync(
    deciding,
    `import { choice, compute, defineHumanChoices, defineWorkflow, humanDecision, humanDecisionEdge, textInput } from "pi-workflows";
const choices = defineHumanChoices({
  ship: choice({ label: "Ship" }),
  fix: choice({ label: "Fix first", input: textInput({ label: "What to fix", maxLength: 40 }) }),
});
export default defineWorkflow({
  name: "deciding",
  startAt: "pick",
  nodes: {
    pick: humanDecision({
      audience: "operator",
      choices,
      request: () => ({ title: "Ship it?", subject: { commit: "abc123" },
        presentation: { schema: "pi-workflows.decision-presentation.v1", summary: "All checks pass." } }),
    }),
    ship: compute({ run: ({ outputs }) => ({ shipped: outputs.pick }) }),
    fix: compute({ run: ({ outputs }) => ({ fixing: outputs.pick.text }) }),
  },
  edges: [humanDecisionEdge({ from: "pick", choices, cases: { ship: "ship", fix: "fix" } })],
});
`,
  );
  cli("server", "start");
  const { version } = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8"));
  client = await WorkflowClient.connect(path.join(state, "server", "server.sock"), { packageVersion: version });
});

after(() => {
  client?.close();
  spawnSync(binary, ["--state-dir", state, "server", "stop"], { env });
  removeTempDirs([state, agentDir]);
});

test("a watched run is materialized from its snapshot and patches to the server's final view", async () => {
  const runId = `run-ts-${Date.now()}`;
  const key = "start-key-1";
  const payload = { workflow: workflow, projectPath: state, executionMode: "headless" };
  const views = [];
  let finished;
  const done = new Promise((resolve) => (finished = resolve));
  const watching = client.watchRun(runId, (view, revision) => {
    views.push(revision);
    const display = view.display;
    if (display.status === "completed" && display.activity.kind === "none") finished(view);
  });
  // The run does not exist yet: the watch is refused as notFound.
  await assert.rejects(watching, (error) => error.code === "notFound");

  const started = await client.request("run.start", { runId, payload, idempotencyKey: key });
  assert.equal(started.outcome, "accepted", JSON.stringify(started.error));
  const retried = await client.request("run.start", { runId, payload, idempotencyKey: key });
  assert.equal(retried.outcome, "adopted", "a retry with the same key adopts the stored receipt");

  const subscription = await client.watchRun(runId, (view, revision) => {
    views.push(revision);
    if (view.display.status === "completed" && view.display.activity.kind === "none") finished(view);
  });
  const final = await done;
  await subscription.unwatch();
  assert.ok(views.every((revision, i) => i === 0 || revision > views[i - 1]), `revisions only grow: ${views}`);
  const fresh = (await client.call("view.run.get", { runId })).view;
  assert.deepEqual(final, fresh, "the materialized view equals a fresh read");
  assert.equal(fresh.run.completedSteps, 12);

  const definition = await client.readContent(runId, fresh.workflow.definition);
  const snapshot = JSON.parse(definition.toString("utf8"));
  assert.equal(snapshot.nodes.length, 12);
  assert.equal(fresh.workflow.definitionDigest, fresh.workflow.definition.digest);
});

test("reads fail clearly for unknown content and unknown runs", async () => {
  const runs = await client.call("view.runs.page", { payload: { limit: 5 } });
  assert.equal(runs.schema, "pi-workflows.run-list.v1");
  const runId = runs.items[0].runId;
  await assert.rejects(
    client.readContent(runId, { digest: "sha256:" + "0".repeat(64), mediaType: "application/json", byteLength: 3 }),
    (error) => error.code === "contentUnavailable",
  );
  await assert.rejects(client.call("view.run.get", { runId: "run-none" }), (error) => error.code === "notFound");
});

/** Poll one run's view until `check(view)` holds (bounded). */
async function viewUntil(runId, check) {
  for (let i = 0; i < 600; i++) {
    const { view } = await client.call("view.run.get", { runId });
    if (check(view)) return view;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`run ${runId} never reached the expected view`);
}

test("settings change on a waiting run with compare-and-set, and the resumed run sees them", async () => {
  const runId = `run-ts-settings-${Date.now()}`;
  const started = await client.call("run.start", { runId, payload: { workflow: tuned, projectPath: state, executionMode: "headless" } });
  assert.equal(started.runId, runId);
  await viewUntil(runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  const before = await client.readSettings(runId);
  assert.deepEqual([before.changeNumber, before.settings], [0, { mode: "quick" }]);

  assert.equal(await client.changeSettings(runId, [{ op: "replace", path: "/mode", value: "careful" }], { expectedChangeNumber: 0 }), 1);
  await assert.rejects(
    client.changeSettings(runId, [{ op: "replace", path: "/mode", value: "late" }], { expectedChangeNumber: 0 }),
    (error) => error.code === "settingsChanged",
  );
  await assert.rejects(
    client.changeSettings(runId, [{ op: "add", path: "/other", value: 1 }]),
    (error) => error.code === "settingsForbidden",
  );
  const after = await client.readSettings(runId);
  assert.deepEqual([after.changeNumber, after.settings, after.changes.length], [1, { mode: "careful" }, 2]);
  const view = await viewUntil(runId, (v) => v.run.settingsChangeNumber === 1);
  assert.equal(view.display.status, "waiting", "a settings change does not disturb a waiting run");

  // The answer settles the run; its continuation goes on with the changed settings.
  const answered = await client.call("checkpoint.answer", { runId, payload: { answer: "go" } });
  const continuation = answered.continuationRunId;
  assert.equal(typeof continuation, "string", JSON.stringify(answered));
  const parent = await client.call("run.status", { runId });
  assert.deepEqual([parent.status, parent.detail, parent.continuedAs], ["completed", "continued", continuation]);
  await viewUntil(continuation, (v) => v.display.status === "completed" && v.display.activity.kind === "none");
  const status = await client.call("run.status", { runId: continuation, payload: { includeResult: true } });
  // A continuation starts from its parent's current settings, as its own change 0.
  assert.deepEqual(status.result, { mode: "careful", number: 0 }, JSON.stringify(status));
});

test("a headless start of a workflow with an assistant-message step is refused, naming the step", async () => {
  const runId = `run-ts-headless-reply-${Date.now()}`;
  const refused = await client.request("run.start", { runId, payload: { workflow: replying, projectPath: state, executionMode: "headless" } });
  assert.equal(refused.outcome, "rejected", JSON.stringify(refused));
  assert.equal(refused.error.code, "assistantMessageHeadless");
  assert.match(refused.error.message, /step "reply" answers with a visible assistant message.*\/workflow start/);
  const status = await client.request("run.status", { runId });
  assert.equal(status.outcome, "notFound", "nothing was queued");
  // The CLI starts headless runs: it says the same.
  const cliStart = spawnSync(binary, ["--state-dir", state, "run", "start", replying], { env, encoding: "utf8" });
  assert.notEqual(cliStart.status, 0);
  assert.match(cliStart.stderr, /visible assistant message/);
});

test("an assistant-message step takes the visible reply; the step's own checks judge it", async () => {
  const runId = `run-ts-assistant-${Date.now()}`;
  const sessionId = `session-${runId}`;
  const payload = { workflow: replying, projectPath: state, executionMode: "interactive", originSessionId: sessionId };
  await client.call("run.start", { runId, payload });
  const waiting = await viewUntil(runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  assert.equal(waiting.display.request.kind, "assistant");
  // The model's reply comes from the run's own session, through its coordinator.
  const withoutAuthority = await client.request("interaction.assistant", { runId, payload: { text: "Hello!" } });
  assert.equal(withoutAuthority.error?.code, "coordinatorRequired", JSON.stringify(withoutAuthority));
  const { epoch } = await client.watchSession(sessionId, () => {}, { coordinator: true });
  const coordinator = { sessionId, epoch };
  const elsewhere = await client.request("interaction.assistant", { runId, payload: { text: "Hello!", coordinator: { sessionId: "session-other", epoch } } });
  assert.equal(elsewhere.error?.code, "wrongSession", JSON.stringify(elsewhere));
  const tooLong = await client.request("interaction.assistant", { runId, payload: { text: "x".repeat(21), coordinator } });
  assert.equal(tooLong.outcome, "rejected");
  assert.equal(tooLong.error.code, "submissionRejected");
  assert.match(tooLong.error.message, /limit is 20/);
  await viewUntil(runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  const accepted = await client.request("interaction.assistant", { runId, payload: { text: "Hello!", coordinator } });
  assert.equal(accepted.outcome, "accepted", JSON.stringify(accepted.error));
  await viewUntil(runId, (v) => v.display.status === "completed" && v.display.activity.kind === "none");
  const status = await client.call("run.status", { runId, payload: { includeResult: true } });
  assert.deepEqual(status.result, { said: "Hello!" });
});

test("a person answers a protected decision from the CLI; the server refuses what is not a choice, and the model cannot answer", async () => {
  const runId = `run-ts-decision-${Date.now()}`;
  const payload = { workflow: deciding, projectPath: state, executionMode: "interactive", originSessionId: `session-${runId}` };
  await client.call("run.start", { runId, payload });
  const waiting = await viewUntil(runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  assert.deepEqual(waiting.display.controls.includes("human-answer"), true);
  const refused = spawnSync(binary, ["--state-dir", state, "decision", "answer", runId, "maybe"], { env, encoding: "utf8" });
  assert.equal(refused.status, 1, refused.stderr);
  assert.match(refused.stderr, /not one of the choices: ship, fix/);
  const noText = spawnSync(binary, ["--state-dir", state, "decision", "answer", runId, "fix"], { env, encoding: "utf8" });
  assert.equal(noText.status, 1, noText.stderr);
  assert.match(noText.stderr, /needs text \(What to fix\)/);
  const sessionId = `session-${runId}`;
  const { epoch } = await client.watchSession(sessionId, () => {}, { coordinator: true });
  const byModel = await client.request("interaction.submit", { runId, payload: { output: "ship", coordinator: { sessionId, epoch } } });
  assert.equal(byModel.outcome, "rejected", "the model's submission never answers a protected decision");
  assert.match(byModel.error.message, /only a person answers it/);
  await viewUntil(runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  const out = JSON.parse(cli("decision", "answer", runId, "fix", "rename the flag", "--follow", "--json").trim().split("\n").at(-1));
  assert.equal(out.status, "completed", JSON.stringify(out));
  const status = await client.call("run.status", { runId, payload: { includeResult: true } });
  assert.deepEqual(status.result, { fixing: "rename the flag" });
  const late = spawnSync(binary, ["--state-dir", state, "decision", "answer", runId, "ship"], { env, encoding: "utf8" });
  assert.equal(late.status, 1, "a second answer loses");
});
