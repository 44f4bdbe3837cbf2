// The workflow listing (the resolver's `list` request): order, shadowing, titles, load errors,
// paging and bounds; and the workflow title of defineWorkflow with its place in the digest.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { compileWorkflow, compute, defineWorkflow } from "../dist/index.js";
import { DIRECTORY_ENTRIES_MAX } from "../dist/discovery.js";
import { LOAD_ERROR_MESSAGE_BYTES_MAX, boundedText, listRequestOf, listWorkflowPage } from "../dist/workflow-list.js";
import { PACKAGE_DIR } from "./support/fixtures.mjs";

const run = promisify(execFile);

function source(name, title) {
  const titled = title === undefined ? "" : `title: ${JSON.stringify(title)}, `;
  return `import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({ name: ${JSON.stringify(name)}, ${titled}startAt: "a", nodes: { a: compute({ run: () => 1 }) }, edges: [] });\n`;
}

/** A project and an agent directory in a private temp dir, with the given workflow files. */
function workspace(t, { project = {}, global = {} } = {}) {
  const root = realpathSync(mkdtempSync(path.join(tmpdir(), "piw-list-")));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dirs = { project: path.join(root, "project"), agentDir: path.join(root, "agent") };
  for (const [dir, files] of [[path.join(dirs.project, ".pi/workflows"), project], [path.join(dirs.agentDir, "workflows"), global]]) {
    mkdirSync(dir, { recursive: true });
    for (const [file, text] of Object.entries(files)) writeFileSync(path.join(dir, file), text);
  }
  mkdirSync(dirs.project, { recursive: true });
  return { ...dirs, env: { PI_CODING_AGENT_DIR: dirs.agentDir } };
}

const request = (project, fields = {}) => listRequestOf({ project, ...fields });

/** Run `body` with TMPDIR set (the list's load worker copies the environment when it starts). */
async function withTmpdir(dir, body) {
  const before = process.env.TMPDIR;
  process.env.TMPDIR = dir;
  try {
    return await body();
  } finally {
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
  }
}

test("project workflows come first, then global ones, by name; a project file hides a global one", async (t) => {
  const { project, agentDir, env } = workspace(t, {
    project: { "zeta.workflow.ts": source("zeta", "Last but local"), "greet.workflow.ts": source("greet", "Say hello"), "notes.md": "not a workflow" },
    global: { "greet.workflow.js": source("greet", "Hidden"), "alpha.workflow.mjs": source("alpha") },
  });
  const page = await listWorkflowPage(request(project), env);
  assert.deepEqual(page.workflows.map((w) => `${w.scope}:${w.name}`), ["project:greet", "project:zeta", "global:alpha"]);
  assert.equal(page.workflows[0].title, "Say hello");
  assert.equal(page.workflows[0].path, path.join(project, ".pi/workflows/greet.workflow.ts"));
  assert.equal(page.workflows[2].title, undefined, "no title declared, none listed");
  assert.deepEqual([page.total, page.offset, page.nextOffset, page.truncated], [3, 0, undefined, false]);
  assert.deepEqual(page.directories, { project: path.join(project, ".pi/workflows"), global: path.join(agentDir, "workflows") });
});

test("a workflow that does not load is listed with a bounded load error; the others list fine", async (t) => {
  const { project, env } = workspace(t, {
    project: {
      "broken.workflow.ts": "export default {{{",
      "plain.workflow.js": "export default { not: 'a workflow' };",
      "throws.workflow.js": `throw new Error(${JSON.stringify("x".repeat(2000))});`,
      "exits.workflow.js": "process.exit(3);",
      "fine.workflow.ts": source("fine", "Fine"),
    },
  });
  // The loads' temp files go to a dir of this test's, to see that none is left behind.
  const loadsTmp = mkdtempSync(path.join(tmpdir(), "piw-loads-"));
  t.after(() => rmSync(loadsTmp, { recursive: true, force: true }));
  const page = await withTmpdir(loadsTmp, () => listWorkflowPage(request(project), env));
  assert.deepEqual(readdirSync(loadsTmp), [], "every load removed its temp dir, also the one whose workflow ended its loader");
  const byName = Object.fromEntries(page.workflows.map((w) => [w.name, w]));
  assert.equal(byName.broken.loadError.code, "invalidDefinition");
  assert.match(byName.plain.loadError.message, /must default-export defineWorkflow/);
  assert.equal(byName.throws.loadError.code, "invalidDefinition");
  assert.ok(Buffer.byteLength(byName.throws.loadError.message) <= LOAD_ERROR_MESSAGE_BYTES_MAX);
  assert.ok(byName.throws.loadError.message.endsWith("…"));
  // Workflow code that ends its loader costs only that workflow (the next one loads fine).
  assert.equal(byName.exits.loadError.code, "loadFailed");
  assert.deepEqual([byName.fine.title, byName.fine.loadError], ["Fine", undefined]);
});

test("pages are bounded by offset and limit and name the next offset", async (t) => {
  const files = Object.fromEntries(["a", "b", "c", "d", "e"].map((name) => [`${name}.workflow.ts`, source(name)]));
  const { project, env } = workspace(t, { project: files });
  const first = await listWorkflowPage(request(project, { limit: 2 }), env);
  assert.deepEqual([first.workflows.map((w) => w.name), first.nextOffset, first.total], [["a", "b"], 2, 5]);
  const last = await listWorkflowPage(request(project, { offset: 4, limit: 2 }), env);
  assert.deepEqual([last.workflows.map((w) => w.name), last.nextOffset], [["e"], undefined]);
  const past = await listWorkflowPage(request(project, { offset: 10 }), env);
  assert.deepEqual([past.workflows, past.nextOffset, past.total], [[], undefined, 5]);
  for (const bad of [{ limit: 51 }, { limit: 0 }, { offset: -1 }, { offset: 1.5 }, { budgetMs: 0 }]) {
    assert.throws(() => request(project, bad), (e) => e.code === "invalidArguments", JSON.stringify(bad));
  }
  assert.throws(() => listRequestOf({ project: "relative" }), (e) => e.code === "invalidArguments");
  await assert.rejects(listWorkflowPage(request(path.join(project, "missing")), env), (e) => e.code === "projectNotFound");
});

test("a spent budget lists the rest unloaded (loadSkipped) instead of answering late", async (t) => {
  const { project, env } = workspace(t, { project: { "a.workflow.ts": source("a", "A"), "b.workflow.ts": source("b", "B") } });
  const page = await listWorkflowPage(request(project, { budgetMs: 1 }), env);
  assert.deepEqual(page.workflows.map((w) => w.name), ["a", "b"]);
  assert.ok(page.workflows.every((w) => w.loadError?.code === "loadSkipped"), JSON.stringify(page.workflows));
});

test("a directory is read only up to its bound and the page says so", async (t) => {
  const { project, env } = workspace(t);
  const dir = path.join(project, ".pi/workflows");
  for (let i = 0; i <= DIRECTORY_ENTRIES_MAX; i += 1) writeFileSync(path.join(dir, `w${String(i).padStart(4, "0")}.txt`), "");
  writeFileSync(path.join(dir, "only.workflow.ts"), source("only"));
  const page = await listWorkflowPage(request(project, { limit: 1 }), env);
  assert.equal(page.truncated, true);
  assert.ok(page.total <= 1);
});

test("the one-shot resolver lists with --list and refuses a bad limit", async (t) => {
  const { project, env } = workspace(t, { project: { "greet.workflow.ts": source("greet", "Say hello") } });
  const resolver = path.join(PACKAGE_DIR, "dist/resolver-main.js");
  const { stdout } = await run(process.execPath, [resolver, "--list", "--project", project, "--limit", "1"], { env: { ...process.env, ...env } });
  const page = JSON.parse(stdout);
  assert.deepEqual([page.workflows[0].name, page.workflows[0].title, page.total], ["greet", "Say hello", 1]);
  const refused = await run(process.execPath, [resolver, "--list", "--project", project, "--limit", "51"], { env: { ...process.env, ...env } }).catch((e) => e);
  assert.deepEqual([refused.code, JSON.parse(refused.stdout).error.code], [2, "invalidArguments"]);
});

test("a workflow title is optional display metadata, checked when defined", () => {
  const base = { name: "w", startAt: "a", nodes: { a: compute({ run: () => 1 }) }, edges: [] };
  const untitled = compileWorkflow(defineWorkflow(base));
  assert.equal("title" in untitled.snapshot, false, "no title: the snapshot and its digest stay as they were");
  const titled = compileWorkflow(defineWorkflow({ ...base, title: "Weekly digest" }));
  assert.equal(titled.definition.title, "Weekly digest");
  assert.equal(titled.snapshot.title, "Weekly digest");
  assert.notEqual(titled.definitionDigest, untitled.definitionDigest);
  for (const [title, fragment] of [
    ["", "must not be empty"],
    ["   ", "must not be empty"],
    [42, "must be a string"],
    ["x".repeat(201), "at most 200 characters"],
    ["two\nlines", "one line of printable text"],
    ["bell\u0007", "one line of printable text"],
  ]) {
    assert.throws(() => defineWorkflow({ ...base, title }), (e) => e.message.includes('workflow "w"') && e.message.includes(fragment), JSON.stringify(title));
  }
  assert.equal(defineWorkflow({ ...base, title: "é".repeat(200) }).title.length, 200);
});

test("bounded text stays on one line within its bytes, cut at a character", () => {
  assert.equal(boundedText("a\n  b\tc", 300), "a b c");
  const cut = boundedText("é".repeat(400), 300);
  assert.ok(Buffer.byteLength(cut) <= 300 && cut.endsWith("…"));
});
