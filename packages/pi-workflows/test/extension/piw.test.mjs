// `/piw` and Ctrl+Shift+R (src/extension/piw.ts) with a fake `herdr` on PATH: a small script
// that records every call (argv) to a file and keeps its panes in another, answering the way
// Herdr's CLI does (JSON on stdout). Without Pi: the documented commands with the run ID, the
// labelled pane focused (not opened again) by a fresh instance — a Pi reload — and found by its
// label when the ID file is gone, left/above/tab, an unregistered plugin, and the hint outside
// Herdr. With the real pinned Pi in RPC mode (skipped, saying so, when it is not installed):
// `/piw` on the session's run, the widget's `Ctrl+Shift+R piw`, the same pane focused after Pi is
// started again on the same session, and the hint without Herdr; under tmux (interactive Pi),
// Ctrl+Shift+R opens the pane. Real Herdr is not used.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, test } from "node:test";
import { findHerdr, HerdrPanes, openArgs, panesFile, paneLabel, parsePlacement, terminalHint } from "../../dist/extension/piw.js";
import { widgetLines } from "../../dist/extension/widget.js";
import { Harness, missingPi, missingTmux, serverBinary, until } from "./support/e2e.mjs";

// Answers: `pane list`, `pane get ID`, `pane rename ID LABEL…`, `pane swap …`,
// `plugin pane open …` (a new pane `w1:pN`; refused with FAKE_HERDR_NO_PLUGIN), `plugin pane focus ID`.
const FAKE_HERDR = `#!${process.execPath}
const fs = require("node:fs");
const args = process.argv.slice(2);
fs.appendFileSync(process.env.FAKE_HERDR_LOG, JSON.stringify(args) + "\\n");
const file = process.env.FAKE_HERDR_STATE;
const state = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : { next: 2, panes: { "w1:p1": { label: "pi" } } };
const save = () => fs.writeFileSync(file, JSON.stringify(state));
const answer = (result) => { process.stdout.write(JSON.stringify({ id: "cli", result }) + "\\n"); process.exit(0); };
const fail = (code) => { process.stderr.write(JSON.stringify({ error: { code, message: code } }) + "\\n"); process.exit(1); };
const pane = (id) => ({ pane_id: id, workspace_id: "w1", tab_id: "w1:t1", focused: false, ...state.panes[id] });
const [a, b, c] = args;
if (a === "pane" && b === "list") answer({ type: "pane_list", panes: Object.keys(state.panes).map(pane) });
if (a === "pane" && b === "get") state.panes[c] ? answer({ type: "pane_info", pane: pane(c) }) : fail("pane_not_found");
if (a === "pane" && b === "rename") { if (!state.panes[c]) fail("pane_not_found"); state.panes[c].label = args.slice(3).join(" "); save(); answer({ type: "pane_info", pane: pane(c) }); }
if (a === "pane" && b === "swap") answer({ type: "ok" });
if (a === "plugin" && b === "pane" && c === "open") {
  if (process.env.FAKE_HERDR_NO_PLUGIN) fail("plugin_not_found: pi-workflows.piw");
  const id = "w1:p" + state.next++;
  state.panes[id] = {};
  save();
  answer({ type: "plugin_pane_opened", pane: pane(id) });
}
if (a === "plugin" && b === "pane" && c === "focus") state.panes[args[3]] ? answer({ type: "ok" }) : fail("pane_not_found");
fail("unknown_command");
`;

/** A fake Herdr: its bin directory, call log and pane state under a fresh temporary root. */
function fakeHerdr(root) {
  const bin = path.join(root, "bin");
  fs.mkdirSync(bin, { recursive: true });
  fs.writeFileSync(path.join(bin, "herdr"), FAKE_HERDR, { mode: 0o755 });
  const log = path.join(root, "herdr.log");
  const vars = { HERDR_ENV: "1", HERDR_PANE_ID: "w1:p1", PATH: `${bin}${path.delimiter}${process.env.PATH}`, FAKE_HERDR_LOG: log, FAKE_HERDR_STATE: path.join(root, "herdr-state.json") };
  const calls = () => (fs.existsSync(log) ? fs.readFileSync(log, "utf8").trim().split("\n").filter(Boolean).map((line) => JSON.parse(line)) : []);
  const closePane = (id) => {
    const state = JSON.parse(fs.readFileSync(vars.FAKE_HERDR_STATE, "utf8"));
    delete state.panes[id];
    fs.writeFileSync(vars.FAKE_HERDR_STATE, JSON.stringify(state));
  };
  return { vars, calls, closePane, clear: () => fs.rmSync(log, { force: true }) };
}

const roots = [];
after(() => {
  for (const root of roots) fs.rmSync(root, { recursive: true, force: true });
});

function setup() {
  const root = fs.mkdtempSync("/tmp/piwh-");
  roots.push(root);
  const herdr = fakeHerdr(root);
  const env = { ...process.env, ...herdr.vars, HOME: root, PI_WORKFLOWS_STATE_DIR: path.join(root, "st"), PI_WORKFLOWS_BIN: serverBinary };
  return { root, herdr, env };
}

const opens = (calls) => calls.filter((call) => call.slice(0, 3).join(" ") === "plugin pane open");
const mode = (file) => fs.statSync(file).mode & 0o777;

test("/piw placements and the Herdr check", () => {
  assert.equal(parsePlacement(""), "right");
  assert.equal(parsePlacement(" tab "), "tab");
  assert.throws(() => parsePlacement("sideways"), /usage: \/piw \[right\|below\|left\|above\|tab\]/);
  const { herdr, env } = setup();
  assert.ok(findHerdr(env), "HERDR_ENV=1 and herdr on PATH");
  assert.equal(findHerdr({ ...env, HERDR_ENV: undefined }), undefined, "not inside Herdr");
  assert.equal(findHerdr({ ...env, PATH: "/nonexistent" }), undefined, "no herdr executable");
  assert.equal(herdr.calls().length, 0);
});

test("a labelled pane runs piw for the run; a fresh instance (a reload) focuses it instead of opening another", async () => {
  const { herdr, env } = setup();
  const runId = "run-20260101-abc";
  const first = await new HerdrPanes(findHerdr(env), env).show(runId, "right");
  assert.match(first, new RegExp(`opened piw for run ${runId} in Herdr pane w1:p2 \\(right\\)`));
  const [list, open, rename, ...rest] = herdr.calls();
  assert.deepEqual(list, ["pane", "list"], "a pane labelled for the run is looked for first");
  assert.deepEqual(open.slice(0, 11), ["plugin", "pane", "open", "--plugin", "pi-workflows.piw", "--entrypoint", "piw", "--placement", "split", "--direction", "right"]);
  assert.deepEqual(open.slice(11, 13), ["--target-pane", "w1:p1"], "split next to Pi's own pane");
  assert.ok(open.includes(`PIW_RUN_ID=${runId}`), `the run ID: ${open}`);
  assert.ok(open.includes(`PIW_STATE_DIR=${env.PI_WORKFLOWS_STATE_DIR}`), `the state dir: ${open}`);
  assert.ok(open.some((arg) => /^PIW_BIN=\/.*\/piw$/.test(arg)) || !fs.existsSync(path.join(path.dirname(serverBinary), "piw")), `the piw beside the server: ${open}`);
  assert.equal(open.at(-1), "--focus");
  assert.deepEqual(rename, ["pane", "rename", "w1:p2", paneLabel(runId)]);
  assert.deepEqual(rest, []);
  const file = panesFile(env);
  assert.deepEqual(JSON.parse(fs.readFileSync(file, "utf8")), { schema: "pi-workflows.herdr-panes.v1", panes: { [runId]: "w1:p2" } });
  assert.equal(mode(file), 0o600, "a user-only file");
  assert.equal(mode(path.dirname(file)), 0o700);

  herdr.clear();
  const reloaded = await new HerdrPanes(findHerdr(env), env).show(runId, "right");
  assert.match(reloaded, /focused the Herdr pane w1:p2 \(piw · run-20260101-abc\)/);
  assert.deepEqual(herdr.calls(), [
    ["pane", "get", "w1:p2"],
    ["plugin", "pane", "focus", "w1:p2"],
  ]);

  herdr.clear();
  fs.rmSync(file);
  await new HerdrPanes(findHerdr(env), env).show(runId, "right");
  assert.deepEqual(herdr.calls(), [["pane", "list"], ["plugin", "pane", "focus", "w1:p2"]], "found again by its label");

  herdr.clear();
  herdr.closePane("w1:p2");
  const reopened = await new HerdrPanes(findHerdr(env), env).show(runId, "below");
  assert.match(reopened, /opened piw for run .* in Herdr pane w1:p3 \(below\)/, "a closed pane is opened again");
  assert.equal(opens(herdr.calls()).length, 1);
  assert.ok(opens(herdr.calls())[0].includes("down"), "below is Herdr's down split");
});

test("left and above swap the new pane with Pi's; a tab is a tab; an unregistered plugin says to run setup", async () => {
  const { herdr, env } = setup();
  await new HerdrPanes(findHerdr(env), env).show("run-1-left", "left");
  const calls = herdr.calls();
  assert.ok(opens(calls)[0].includes("right"), "Herdr splits right or down only");
  assert.deepEqual(calls.at(-1), ["pane", "swap", "--source-pane", "w1:p2", "--target-pane", "w1:p1"]);

  const tab = openArgs("run-1-tab", "tab", env);
  assert.deepEqual(tab.slice(7, 9), ["--placement", "tab"]);
  assert.ok(!tab.includes("--direction") && !tab.includes("--target-pane"), `${tab}`);

  const refused = await new HerdrPanes(findHerdr(env), { ...env, FAKE_HERDR_NO_PLUGIN: "1" }).show("run-1-none", "right").catch((error) => error.message);
  assert.match(refused, /Herdr did not open the piw pane \(.*plugin_not_found/);
  assert.match(refused, /herdr setup` once, then \/piw again/);
  assert.match(refused, /piw --state-dir \S+ run-1-none` in another terminal/);
});

test("without Herdr /piw says what to run in another terminal, and when the session has no run", () => {
  const { env } = setup();
  const outside = { ...env, HERDR_ENV: undefined };
  const hint = terminalHint("run-7-x", outside);
  assert.match(hint, /to watch run run-7-x live, run `\S*piw --state-dir \S+ run-7-x` in another terminal/);
  assert.match(hint, /inside Herdr, \/piw and Ctrl\+Shift\+R open it in a pane/);
  assert.match(terminalHint(undefined, outside), /this session has no workflow run yet; start one with \/workflow start <name>/);
  assert.match(terminalHint("run-7-x", { ...env, PATH: "/nonexistent" }), /HERDR_ENV=1, but no herdr executable is on PATH/);
});

test("the widget shows Ctrl+Shift+R piw only when it is given the hint", () => {
  const view = { messages: [], messageCount: 0, truncated: false, activeRun: { runId: "run-1", workflowName: "gate", display: { status: "waiting", controls: ["answer"] } } };
  assert.ok(widgetLines({ view, stale: false, scroll: 0, piwHint: "Ctrl+Shift+R piw" }).some((line) => line.includes("Ctrl+Shift+R piw")));
  assert.ok(!widgetLines({ view, stale: false, scroll: 0 }).some((line) => line.includes("piw")));
});

test("real Pi: /piw opens the session's run in a Herdr pane and focuses the same pane after Pi starts again", { skip: missingPi }, async (t) => {
  const h = await Harness.create({ tag: "h" });
  t.after(() => h.close());
  const herdr = fakeHerdr(h.root);
  Object.assign(h.env, herdr.vars);
  const first = h.rpc();
  await first.prompt("hello"); // Pi writes the session file once it has a reply
  await first.idle();
  await first.prompt(`/workflow start ${h.workflowPath("gate")}`);
  const runId = await first.startedRun();
  await h.runStatus(runId, "waiting");
  const { sessionFile } = await first.state();
  const from = first.notifications().length;
  await first.prompt("/piw");
  const opened = await until(() => first.notifications().slice(from).find((m) => m.startsWith("/piw")), "the /piw notice", first.context);
  assert.match(opened, new RegExp(`opened piw for run ${runId} in Herdr pane w1:p2`));
  const open = opens(herdr.calls());
  assert.equal(open.length, 1);
  assert.ok(open[0].includes(`PIW_RUN_ID=${runId}`), `${open[0]}`);
  const widgets = first.events.filter((e) => e.type === "extension_ui_request" && e.method === "setWidget");
  assert.ok(
    widgets.some((e) => JSON.stringify(e).includes("Ctrl+Shift+R piw")),
    "the widget names the shortcut inside Herdr",
  );
  await first.close();

  const second = h.rpc(["--session", sessionFile]);
  await second.prompt("/piw");
  const focused = await until(() => second.notifications().find((m) => m.startsWith("/piw")), "the /piw notice after the restart", second.context);
  assert.match(focused, /focused the Herdr pane w1:p2/);
  assert.equal(opens(herdr.calls()).length, 1, "the pane was not opened again");
  await second.close();

  for (const name of Object.keys(herdr.vars)) if (name !== "PATH") delete h.env[name];
  const outside = h.rpc(["--session", sessionFile]);
  await outside.prompt("/piw");
  const hint = await until(() => outside.notifications().find((m) => m.startsWith("/piw")), "the /piw hint", outside.context);
  assert.match(hint, new RegExp(`run \`\\S*piw --state-dir \\S+ ${runId}\` in another terminal`));
  const outsideWidgets = outside.events.filter((e) => e.type === "extension_ui_request" && e.method === "setWidget");
  assert.ok(!outsideWidgets.some((e) => JSON.stringify(e).includes("Ctrl+Shift+R")), "no shortcut hint outside Herdr");
});

test("real Pi under tmux: the widget names Ctrl+Shift+R piw inside Herdr, and the shortcut opens the run's pane", { skip: missingTmux }, async (t) => {
  const h = await Harness.create({ tag: "r" });
  t.after(() => h.close());
  const herdr = fakeHerdr(h.root);
  Object.assign(h.env, herdr.vars);
  const tmux = await h.tmux();
  const screen = () => `\nscreen:\n${tmux.screen()}\nherdr calls: ${JSON.stringify(herdr.calls())}`;
  await tmux.submit(`/workflow start ${h.workflowPath("gate")}`);
  const runId = (await until(() => /as run (run-[A-Za-z0-9-]+)/.exec(tmux.history()), "the start notice", screen))[1];
  await until(() => tmux.screen().includes("Ctrl+Shift+R piw"), "the shortcut in the widget", screen);
  tmux.keys("C-S-r");
  const open = await until(() => opens(herdr.calls())[0], "the pane opened by Ctrl+Shift+R", screen);
  assert.ok(open.includes(`PIW_RUN_ID=${runId}`), `${open}`);
  await until(() => /opened piw for run .* in Herdr pane w1:p2/.test(tmux.history()), "the shortcut's notice", screen);
});

