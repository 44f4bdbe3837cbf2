// Run settings in the SDK and the engine: declarations are checked and recorded in the
// definition snapshot; each node attempt sees one frozen copy; newer versions reach the
// nodes started after the runner learns of them; a resumed attempt sees its own copy.
import assert from "node:assert/strict";
import { test } from "node:test";
import { action, compileWorkflow, compute, defineWorkflow, idempotentEffect, includeWorkflow, LiveSettings, runWorkflow } from "../dist/index.js";
import { FakeHost } from "./support/fake-host.mjs";

const seen = (name) => compute({ run: ({ settings, settingsChangeNumber }) => ({ name, x: settings?.x, number: settingsChangeNumber }) });

function chain(extra = {}) {
  return defineWorkflow({
    name: "tuned",
    settings: { initial: { x: 1, list: [] }, changeable: { "/x": ["replace"], "/list": ["add", "remove"] } },
    startAt: "a",
    nodes: {
      a: seen("a"),
      b: action({ effect: idempotentEffect("b.effect"), run: ({ settings, settingsChangeNumber }) => ({ name: "b", x: settings.x, number: settingsChangeNumber }) }),
      c: compute({
        run: ({ settings, settingsChangeNumber }) => {
          assert.throws(() => {
            settings.list.push(9);
          }, TypeError);
          return { name: "c", x: settings.x, number: settingsChangeNumber };
        },
      }),
    },
    edges: [
      { from: "a", to: "b" },
      { from: "b", to: "c" },
    ],
    ...extra,
  });
}

test("the snapshot records the declaration with its paths sorted; undeclared workflows have none", () => {
  const snapshot = compileWorkflow(chain()).snapshot;
  assert.deepEqual(snapshot.settings, {
    initial: { x: 1, list: [] },
    paths: [
      { path: "/list", allow: ["add", "remove"] },
      { path: "/x", allow: ["replace"] },
    ],
  });
  const plain = defineWorkflow({ name: "plain", startAt: "a", nodes: { a: seen("a") }, edges: [] });
  assert.equal(compileWorkflow(plain).snapshot.settings, undefined);
});

test("bad declarations are refused at definition time", () => {
  const base = { name: "w", startAt: "a", nodes: { a: seen("a") }, edges: [] };
  for (const [settings, fragment] of [
    [{ initial: [1] }, "settings.initial must be a JSON object"],
    [{ initial: {}, changeable: { x: ["replace"] } }, "starts with"],
    [{ initial: {}, changeable: { "/x": ["move"] } }, "add, remove or replace"],
    [{ initial: {}, changeable: { "/x": [] } }, "add, remove or replace"],
    [{ initial: {}, changeable: { "/a~2": ["add"] } }, "followed by 0 or 1"],
    [{ initial: { big: "y".repeat(300 * 1024) } }, "above the"],
    [{ initial: { deep: JSON.parse("[".repeat(40) + "]".repeat(40)) } }, "nests deeper than 32"],
  ]) {
    assert.throws(() => defineWorkflow({ ...base, settings }), (error) => error.message.includes(fragment), fragment);
  }
});

test("only the root workflow declares settings", () => {
  const child = defineWorkflow({ name: "child", settings: { initial: { y: 1 } }, startAt: "a", nodes: { a: seen("a") }, edges: [] });
  const parent = defineWorkflow({ name: "parent", startAt: "inner", nodes: {}, includes: { inner: includeWorkflow(child) }, edges: [] });
  assert.throws(() => compileWorkflow(parent), /included at "inner"\) declares settings/);
});

test("each attempt sees the version current at its start; a newer one reaches the next node", async () => {
  const host = new FakeHost();
  const live = new LiveSettings({ changeNumber: 0, value: { x: 1, list: [] } });
  // The answer to b's start carries a newer version (as the server's would after a change).
  const started = host.nodeStarted.bind(host);
  host.nodeStarted = async (attemptId, start) => {
    await started(attemptId, start);
    live.offer({ changeNumber: 1, value: { x: 2, list: [] } });
    live.offer({ changeNumber: 0, value: { x: 0, list: [] } }); // an older answer is ignored
  };
  const state = { ...host.runState(), settings: { changeNumber: 0, value: { x: 1, list: [] } } };
  const outcome = await runWorkflow({ workflow: compileWorkflow(chain()), host, runState: state, command: "start", projectPath: process.cwd(), attemptIdPrefix: "t", settings: live });
  assert.equal(outcome.kind, "completed");
  const outputs = host.messages.filter((m) => m.kind === "node.finished").map((m) => m.payload.output);
  assert.deepEqual(outputs, [
    { name: "a", x: 1, number: 0 },
    { name: "b", x: 1, number: 0 },
    { name: "c", x: 2, number: 1 },
  ]);
  const starts = host.messages.filter((m) => m.payload?.nodePath).map((m) => `${m.payload.nodePath}=${m.payload.settingsChangeNumber}`);
  assert.deepEqual(starts, ["a=0", "b=0", "c=1"], "every start names the version its node saw");
});

test("a run without settings sends no settings fields and nodes see none", async () => {
  const plain = defineWorkflow({ name: "plain", startAt: "a", nodes: { a: seen("a") }, edges: [] });
  const host = new FakeHost();
  const outcome = await runWorkflow({ workflow: compileWorkflow(plain), host, runState: host.runState(), command: "start", projectPath: process.cwd(), attemptIdPrefix: "p" });
  assert.deepEqual(outcome, { kind: "completed", output: { name: "a" } });
  assert.equal("settingsChangeNumber" in host.messages[0].payload, false);
});

test("a resumed unfinished attempt sees the copy it started with, later nodes the current one", async () => {
  const host = new FakeHost();
  host.attempts.set("old-a", { attemptId: "old-a", nodeId: "a", nodePath: "a", visit: 1, nodeType: "compute", status: "completed", output: { name: "a" }, error: null, settingsChangeNumber: 0 });
  host.attempts.set("old-b", { attemptId: "old-b", nodeId: "b", nodePath: "b", visit: 1, nodeType: "action", status: "running", output: null, error: null, settingsChangeNumber: 0 });
  const state = {
    ...host.runState(),
    settings: { changeNumber: 3, value: { x: 30, list: [] } },
    settingsVersions: [{ changeNumber: 0, value: { x: 1, list: [] } }],
  };
  const outcome = await runWorkflow({ workflow: compileWorkflow(chain()), host, runState: state, command: "resume", projectPath: process.cwd(), attemptIdPrefix: "r" });
  assert.equal(outcome.kind, "completed");
  const outputs = host.messages.filter((m) => m.kind === "node.finished").map((m) => m.payload.output);
  assert.deepEqual(outputs, [
    { name: "b", x: 1, number: 0 },
    { name: "c", x: 30, number: 3 },
  ]);
});

test("a rerun of an interrupted attempt keeps the copy that attempt saw", async () => {
  const host = new FakeHost();
  host.attempts.set("old-a", { attemptId: "old-a", nodeId: "a", nodePath: "a", visit: 1, nodeType: "compute", status: "interrupted", output: null, error: null, settingsChangeNumber: 1 });
  const state = {
    ...host.runState(),
    settings: { changeNumber: 2, value: { x: 20, list: [] } },
    settingsVersions: [{ changeNumber: 1, value: { x: 10, list: [] } }],
  };
  const outcome = await runWorkflow({ workflow: compileWorkflow(chain()), host, runState: state, command: "resume", projectPath: process.cwd(), attemptIdPrefix: "i" });
  assert.equal(outcome.kind, "completed");
  const starts = host.messages.filter((m) => m.payload?.nodePath).map((m) => `${m.payload.nodePath}=${m.payload.settingsChangeNumber}`);
  assert.deepEqual(starts, ["a=1", "b=2", "c=2"]);
  assert.deepEqual(host.messages[0].payload.output, { name: "a", x: 10, number: 1 });
});
