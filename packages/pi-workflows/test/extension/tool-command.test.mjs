// The workflow tool's one flat schema and per-action validation, /workflow parsing and
// completion, shortcuts.json, the widget window and the step text (pure; no Pi needed).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { completions, parseCommand } from "../../dist/extension/command.js";
import { outgoing, stepText, triggersTurn } from "../../dist/extension/messages.js";
import { readStep, STEP_READ_CHARS_MAX } from "../../dist/extension/actions.js";
import { createHash } from "node:crypto";
import { loadShortcuts } from "../../dist/extension/shortcuts.js";
import { idempotencyKeyOf, TOOL_ACTIONS, TOOL_ERRORS_MAX, TOOL_PARAMETERS, ToolInputError, validateToolParams } from "../../dist/extension/tool.js";
import { WIDGET_LINES_MAX, statusLine, widgetLines } from "../../dist/extension/widget.js";

test("the tool schema is one flat object with an action enum (no top-level union)", () => {
  assert.equal(TOOL_PARAMETERS.type, "object");
  for (const key of ["anyOf", "oneOf", "allOf"]) assert.equal(TOOL_PARAMETERS[key], undefined);
  assert.deepEqual(TOOL_PARAMETERS.required, ["action"]);
  assert.deepEqual(TOOL_PARAMETERS.properties.action.enum, [...TOOL_ACTIONS]);
  assert.equal(TOOL_PARAMETERS.additionalProperties, false);
});

test("validation: unknown actions and fields, missing fields, bad IDs, at most 3 errors", () => {
  assert.throws(() => validateToolParams({ action: "explode" }), /action must be one of/);
  const error = (() => {
    try {
      validateToolParams({ action: "submit", bogus: 1, workflow: "x", runId: "has space", requestId: "r/1" });
    } catch (caught) {
      return caught;
    }
  })();
  assert.ok(error instanceof ToolInputError);
  assert.ok(error.errors.length > TOOL_ERRORS_MAX);
  const shown = error.message.split("\n").filter((line) => line.startsWith("- "));
  assert.equal(shown.length, TOOL_ERRORS_MAX + 1, "three errors and a count of the rest");
  assert.match(error.message, /and \d+ more/);
  assert.match(error.message, /changed nothing/);
  assert.deepEqual(validateToolParams({ action: "submit", requestId: "req:a-1", output: { ok: true } }).action, "submit");
  assert.throws(() => validateToolParams({ action: "submit", requestId: "req:a-1", output: "x".repeat(300 * 1024) }), /above the 262144-byte limit/);
  assert.throws(() => validateToolParams({ action: "update", requestId: "r", update: { type: "Bad", key: "k", data: 1 } }), /update.type/);
  assert.throws(() => validateToolParams({ action: "answer" }), /answer needs "input"/);
  assert.throws(() => validateToolParams({ action: "change-settings", patch: [] }), /non-empty array/);
  assert.throws(() => validateToolParams(null), /JSON object/);
});

test("the tool-call ID is the idempotency key, made a valid ID when needed", () => {
  assert.equal(idempotencyKeyOf("call_mock_3_0"), "tool:call_mock_3_0");
  const odd = idempotencyKeyOf("call with spaces/and slashes");
  assert.match(odd, /^[A-Za-z0-9._:@|+=~-]{1,256}$/);
  assert.equal(odd, idempotencyKeyOf("call with spaces/and slashes"), "stable");
});

test("/workflow parsing", () => {
  assert.deepEqual(parseCommand(""), { sub: "list", offset: 0 });
  assert.deepEqual(parseCommand("list 50"), { sub: "list", offset: 50 });
  assert.deepEqual(parseCommand("start review fix the login bug"), { sub: "start", workflow: "review", input: { task: "fix the login bug" } });
  assert.deepEqual(parseCommand('start ./w.workflow.ts --input-json {"a": [1, 2]}'), { sub: "start", workflow: "./w.workflow.ts", input: { a: [1, 2] } });
  assert.deepEqual(parseCommand("start review"), { sub: "start", workflow: "review" });
  assert.throws(() => parseCommand("start"), /usage/);
  assert.throws(() => parseCommand("start x --input-json {nope"), /not JSON/);
  assert.deepEqual(parseCommand("answer run-1-abc ship"), { sub: "answer", runId: "run-1-abc", answer: "ship" });
  assert.deepEqual(parseCommand('answer {"approved": true}'), { sub: "answer", answer: { approved: true } });
  assert.deepEqual(parseCommand('change-settings [{"op":"replace","path":"/m","value":1}] --expect 2'), {
    sub: "change-settings",
    patch: [{ op: "replace", path: "/m", value: 1 }],
    expect: 2,
  });
  assert.deepEqual(parseCommand("cancel run-9-x"), { sub: "cancel", runId: "run-9-x" });
  assert.throws(() => parseCommand("cancel not-a-run"), /usage/);
  assert.throws(() => parseCommand("frobnicate"), /unknown \/workflow subcommand/);
});

test("/workflow completion", () => {
  const known = { workflows: ["review", "release"], runIds: ["run-1-a"] };
  assert.deepEqual(
    completions("st", known).map((item) => item.value),
    ["start", "status"],
  );
  assert.deepEqual(
    completions("start re", known).map((item) => item.value),
    ["start review", "start release"],
  );
  assert.deepEqual(
    completions("cancel ", known).map((item) => item.value),
    ["cancel run-1-a"],
  );
  assert.equal(completions("zzz", known), null);
});

test("shortcuts.json: defaults, remapping, removal, and one clear error for a malformed file", (t) => {
  const dir = mkdtempSync("/tmp/piw-shortcuts-");
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { PI_WORKFLOWS_CONFIG_DIR: dir };
  assert.deepEqual(loadShortcuts(env), { scrollUp: "shift+up", scrollDown: "shift+down" });
  writeFileSync(path.join(dir, "shortcuts.json"), JSON.stringify({ schema: "pi-workflows.shortcuts.v1", scrollUp: "alt+k", scrollDown: null }));
  assert.deepEqual(loadShortcuts(env), { scrollUp: "alt+k", scrollDown: undefined });
  writeFileSync(path.join(dir, "shortcuts.json"), "{not json");
  const broken = loadShortcuts(env);
  assert.equal(broken.scrollUp, "shift+up");
  assert.match(broken.warning, /is not JSON; using Shift\+Up\/Shift\+Down/);
  assert.ok(broken.warning.length < 400, "bounded");
  writeFileSync(path.join(dir, "shortcuts.json"), JSON.stringify({ schema: "pi-workflows.shortcuts.v1", scrollUp: "ctrl+c", scrollDown: "shift+down" }));
  const reserved = loadShortcuts(env);
  assert.equal(reserved.scrollUp, undefined);
  assert.equal(reserved.scrollDown, "shift+down");
  assert.match(reserved.warning, /a key Pi or pi-workflows uses/);
});

test("the widget draws the server's display only, at most 10 lines, stale after a disconnect", () => {
  const updates = Array.from({ length: 20 }, (_, i) => ({ type: "progress", key: `k${i}`, dataJson: `{"i":${i}}` }));
  const view = {
    messages: [],
    messageCount: 0,
    truncated: false,
    activeRun: {
      runId: "run-1",
      workflowName: "review",
      display: { status: "waiting", waitingOn: { nodePath: "write" }, controls: ["submit", "update"], request: { kind: "agent", requestId: "req:1", updates } },
    },
  };
  const state = { view, stale: false, scroll: 0, scrollHint: "shift+up/shift+down scroll" };
  const lines = widgetLines(state);
  assert.ok(lines.length <= WIDGET_LINES_MAX);
  assert.match(lines[0], /wf review · waiting · write/);
  assert.match(lines.at(-1), /lines 1-9 of \d+ · shift\+up\/shift\+down scroll/);
  const scrolled = widgetLines({ ...state, scroll: 5 });
  assert.notEqual(scrolled[0], lines[0]);
  assert.match(widgetLines({ ...state, stale: true })[0], /stale: reconnecting/);
  assert.equal(statusLine(state), "wf review waiting write");
  assert.equal(widgetLines({ stale: false, scroll: 0 }), undefined, "no run: no widget");
});

test("the step text tells the model how to submit; details carry the hidden ID", () => {
  const message = {
    workflowMessageId: "msg-ab-3",
    runId: "run-1",
    kind: "step",
    reason: "resumed",
    sourceId: "req:att-1",
    order: 3,
    status: "pending",
    content: { workflow: "review", nodePath: "write", attemptId: "att-1", prompt: "Write notes.", expectedOutput: "{notes: string}" },
  };
  const text = stepText(message);
  assert.match(text, /Workflow step: review › write \(resumed\)/);
  assert.match(text, /Expected output: \{notes: string\}/);
  assert.match(text, /"action": "submit", "requestId": "req:att-1"/);
  assert.match(text, /end your turn/);
  const built = outgoing(message);
  assert.equal(built.customType, "pi-workflows-step");
  assert.equal(built.details.workflowMessageId, "msg-ab-3");
  assert.ok(!built.content.includes("msg-ab-3"), "the hidden ID is not in the model's text");
});

test("a huge prompt reaches the model as an excerpt with its size and digest; the stored value stays whole", () => {
  const prompt = `Review this:\n${"diff line\n".repeat(100_000)}`; // ~1 MB, as a prompt built from many step results can be
  const content = { workflow: "review", nodePath: "write", attemptId: "att-1", prompt, expectedOutput: "{notes: string}" };
  const message = { workflowMessageId: "msg-ab-4", runId: "run-1", kind: "step", reason: "initial", sourceId: "req:att-1", order: 4, status: "pending", content };
  const built = outgoing(message);
  assert.ok(Buffer.byteLength(built.content) < 20 * 1024, `bounded: ${Buffer.byteLength(built.content)} bytes`);
  assert.match(built.content, new RegExp(`${Buffer.byteLength(prompt)} bytes in all, sha256 ${createHash("sha256").update(prompt).digest("hex")}`));
  assert.match(built.content, /"action": "submit", "requestId": "req:att-1"/, "the contract survives the cut");
  assert.equal(built.details.content.prompt, prompt, "the renderer keeps the whole stored value");
  const hint = /\{"action": "read-step", "requestId": "req:att-1", "offset": (\d+)\}/.exec(built.content);
  assert.ok(hint, "the text says how to read the rest");
  assert.equal(prompt.slice(0, Number(hint[1])), built.content.slice(built.content.indexOf("Review this:"), built.content.indexOf("Review this:") + Number(hint[1])), "the offset is where the excerpt ends");
});

test("read-step pages through the stored prompt of the open step, and refuses a closed one", async () => {
  const prompt = `${"a".repeat(STEP_READ_CHARS_MAX)}${"b".repeat(10)}`;
  const calls = [];
  const ctx = {
    view: { activeRun: { runId: "run-1" }, messages: [] },
    idempotencyKey: "tool:k",
    client: {
      call: async (operation, options) => {
        calls.push({ operation, options });
        return { pendingRequest: { requestId: "req:att-1", kind: "agent" }, request: { prompt } };
      },
    },
  };
  const first = await readStep(ctx, "req:att-1", undefined, 0);
  assert.ok(first.startsWith("a".repeat(100)));
  assert.match(first, new RegExp(`characters 0 to ${STEP_READ_CHARS_MAX} of ${prompt.length}; more: \\{"action": "read-step", "requestId": "req:att-1", "offset": ${STEP_READ_CHARS_MAX}\\}`));
  const rest = await readStep(ctx, "req:att-1", undefined, STEP_READ_CHARS_MAX);
  assert.ok(rest.startsWith("bbbbbbbbbb\n"), rest.slice(0, 40));
  assert.match(rest, /that is the end/);
  assert.deepEqual(calls[0], { operation: "run.status", options: { runId: "run-1", payload: { includeResult: true }, idempotencyKey: "tool:k" } });
  await assert.rejects(readStep(ctx, "req:other", undefined, 0), (error) => error.code === "stepClosed");
});

test("a cancelled run's terminal message is passive; other endings and follow-ups start a turn", () => {
  const terminal = (outcome) => ({ kind: "terminal", content: { outcome, runId: "run-1", workflowName: "w" } });
  assert.equal(triggersTurn(terminal("cancelled")), false);
  assert.equal(triggersTurn(terminal("completed")), true);
  assert.equal(triggersTurn(terminal("failed")), true);
  assert.equal(triggersTurn({ kind: "followUp", content: { prompt: "next" } }), true);
  assert.equal(triggersTurn({ kind: "notification", content: { message: "hi" } }), false);
});
