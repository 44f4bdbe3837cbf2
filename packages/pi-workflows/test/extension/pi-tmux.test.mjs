// Real Pi (1.6.0) in interactive mode under tmux (issue 15 item 5): keys go in with send-keys,
// the screen comes out with capture-pane (`--tui-mode regular` keeps the scrollback; pi-api.md
// §12). `/workflow start` typed into the editor starts a run whose step appears once, the
// model submits through the tool and the run completes; Escape during the workflow turn pauses
// the run through the aborted turn end (no pause command), and `/workflow resume` presents the
// step again exactly once and the run completes. Assertions are on the session JSONL Pi wrote
// and the server's session and run views; waits are bounded polls.
// Skipped, saying so, when the pinned Pi or tmux is missing (CI installs both).
import assert from "node:assert/strict";
import fs from "node:fs";
import { test } from "node:test";
import {
  assertNoDuplicateMessages,
  describeEntries,
  Harness,
  missingTmux,
  serverBinary,
  sessionFileEntries,
  sessionFiles,
  sessionHeader,
  stepEntries,
  textOf,
  toolResults,
  until,
} from "./support/e2e.mjs";

test.before(() => {
  if (!missingTmux) assert.ok(fs.existsSync(serverBinary), `${serverBinary} is missing: build the server first (cargo build --locked) or set PI_WORKFLOWS_BIN`);
});

const isPickStep = (e) => e.details?.content?.nodePath?.endsWith("pick");
const hasTerminal = (entries) => entries.some((e) => e.type === "custom_message" && e.customType === "pi-workflows-terminal");

/** The one session file Pi wrote in this harness (it appears once the session has content). */
async function theSessionFile(h, tmux) {
  // Until its header line is complete: Pi may be writing the file right now.
  const [file] = await until(() => {
    const files = sessionFiles(h.sessionsDir);
    return files.length === 1 && sessionHeader(files[0]) !== undefined ? files : undefined;
  }, "Pi's session file", () => `\nscreen:\n${tmux.screen()}`);
  return file;
}

/** The run ID from `/workflow start`'s notice on the screen. */
async function startedRun(tmux) {
  const match = await until(() => /started pick as run (run-[A-Za-z0-9-]+)/.exec(tmux.history()), "the start notice", () => `\nscreen:\n${tmux.screen()}`);
  return match[1];
}

test("interactive Pi under tmux: /workflow start, the step appears once, the model submits, the run completes", { skip: missingTmux }, async (t) => {
  const h = await Harness.create({ tag: "i" });
  t.after(() => h.close());
  const tmux = await h.tmux();
  const screen = () => `\nscreen:\n${tmux.history().split("\n").filter((l) => l.trim()).slice(-40).join("\n")}`;
  await tmux.submit(`/workflow start ${h.workflowPath("pick")}`);
  const runId = await startedRun(tmux);
  await h.runStatus(runId, "completed", screen);
  assert.deepEqual(await h.runResult(runId), { n: 42 });

  const file = await theSessionFile(h, tmux);
  const entries = await until(() => {
    const all = sessionFileEntries(file);
    return hasTerminal(all) ? all : undefined;
  }, "the terminal message in the session file", screen);
  const steps = stepEntries(entries).filter(isPickStep);
  assert.equal(steps.length, 1, `the step appears once: ${describeEntries(entries)}`);
  assert.equal(steps[0].details.reason, "initial");
  assertNoDuplicateMessages(entries, "in the session file");
  const results = toolResults(entries);
  assert.equal(results.length, 1, "one submission through the tool");
  assert.match(textOf(results[0].message.content), /^Accepted/);
  // The server knows Pi's entry for the step, and the session's view ends with the finished run.
  const view = await h.sessionView(sessionHeader(file).id);
  assert.equal(view.activeRun, null);
  assert.equal(view.retainedTerminal?.runId, runId, JSON.stringify(view).slice(0, 1500));
  // What the person saw: the step's card, the tool call, the terminal card.
  await until(() => /wf pick completed/.test(tmux.screen()), "the status line to say completed", screen);
  const history = tmux.history();
  assert.match(history, /Pick a number\./);
  assert.match(history, /workflow action="submit"/);
  assert.equal(history.split("Pick a number.").length - 1, 1, `the step is drawn once:${screen()}`);
});

test("interactive Pi under tmux: Escape during the workflow turn pauses the run, /workflow resume presents the step once more and it completes", { skip: missingTmux }, async (t) => {
  const h = await Harness.create({ tag: "e" });
  t.after(() => h.close());
  const tmux = await h.tmux();
  const screen = () => `\nscreen:\n${tmux.history().split("\n").filter((l) => l.trim()).slice(-40).join("\n")}`;
  // A first reply, so the session file exists before the workflow turn (Pi writes it once it has
  // an assistant message).
  await tmux.submit("hello");
  const file = await theSessionFile(h, tmux);
  const sessionId = sessionHeader(file).id;

  h.model.hold = true; // the model "thinks" about the step until Escape
  await tmux.submit(`/workflow start ${h.workflowPath("pick")}`);
  const runId = await startedRun(tmux);
  await until(() => h.model.requests.some((r) => r.kind === "step" && r.held), "the model to hold the step's turn", screen);
  const open = await until(async () => (await h.sessionView(sessionId)).openTurn, "the workflow turn to be open on the server", screen);
  assert.equal(open.runId, runId);

  tmux.keys("Escape");
  // The aborted turn end pauses the run: nothing else was sent (no /workflow pause).
  const paused = await h.runStatus(runId, "paused", screen);
  assert.ok(paused, "paused through the turn report");
  const afterEscape = await until(async () => {
    const v = await h.sessionView(sessionId);
    return v.openTurn === null ? v : undefined;
  }, "the turn to be closed", screen);
  assert.equal(afterEscape.nextEligible ?? null, null, "nothing is delivered while paused");
  const aborted = sessionFileEntries(file).filter((e) => e.type === "message" && e.message.role === "assistant" && e.message.stopReason === "aborted");
  assert.equal(aborted.length, 1, "Pi recorded the aborted turn");
  assert.equal(h.model.stepRequests().length, 1);

  h.model.hold = false;
  await tmux.submit("/workflow resume");
  await h.runStatus(runId, "completed", screen);
  assert.deepEqual(await h.runResult(runId), { n: 42 });
  const entries = await until(() => {
    const all = sessionFileEntries(file);
    return hasTerminal(all) ? all : undefined;
  }, "the terminal message in the session file", screen);
  const steps = stepEntries(entries).filter(isPickStep);
  assert.deepEqual(
    steps.map((e) => e.details.reason),
    ["initial", "resumed"],
    `the step once, then once more after resume: ${describeEntries(entries)}`,
  );
  assert.equal(steps[0].details.requestId, steps[1].details.requestId);
  assertNoDuplicateMessages(entries, "in the session file");
  assert.match(textOf(toolResults(entries).at(-1).message.content), /^Accepted/);
  assert.equal(h.model.stepRequests().length, 2, "the model saw the step twice: before Escape and after resume");
});
