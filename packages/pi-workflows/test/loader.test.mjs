// Discovery order, esbuild loading without node_modules (and its service stopped when idle),
// source identity, and the resolver child.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import * as sdk from "../dist/index.js";
import { listWorkflows, loadWorkflow, resolveWorkflowFile } from "../dist/loader.js";
import { fixtureCopy, PACKAGE_DIR } from "./support/fixtures.mjs";
import { waitFor } from "./agent/helpers.mjs";

const run = promisify(execFile);
const sha = (file) => createHash("sha256").update(readFileSync(file)).digest("hex");

test("a project workflow wins over a global one of the same name; global-only names are found", async (t) => {
  const { project, agentDir } = fixtureCopy(t);
  const env = { PI_CODING_AGENT_DIR: agentDir };
  const greet = await resolveWorkflowFile("greet", project, env);
  assert.equal(greet.path, path.join(project, ".pi/workflows/greet.workflow.ts"));
  const solo = await resolveWorkflowFile("solo", project, env);
  assert.equal(solo.path, path.join(agentDir, "workflows/solo.workflow.js"));
  await assert.rejects(resolveWorkflowFile("state", project, env), (e) => e.code === "workflowNotFound");
  const direct = await resolveWorkflowFile("./.pi/workflows/review.workflow.ts", project, env);
  assert.equal(direct.name, "review");
  const listed = await listWorkflows(project, env);
  assert.deepEqual(listed.map((w) => `${w.scope}:${w.name}`).sort(), ["global:solo", "project:build-check", "project:greet", "project:review"]);
});

test("a TypeScript workflow imports pi-workflows with no node_modules and compiles as this SDK does", async (t) => {
  const { project } = fixtureCopy(t);
  assert.equal(existsSync(path.join(project, "node_modules")), false);
  const loaded = await loadWorkflow("greet", project, {});
  assert.equal(loaded.definition.name, "greet");
  assert.equal(loaded.definition.nodes.compose.kind, "compute");
  // Same module instance: the compiled definition behaves like one built here.
  assert.deepEqual(Object.keys(loaded.compiled.definition.nodes), ["compose", "shout"]);
  const root = path.join(project, ".pi/workflows/greet.workflow.ts");
  const helper = path.join(project, ".pi/workflows/lib/greeting.ts");
  assert.deepEqual(loaded.source, { root: { kind: "file", path: root, hash: sha(root) }, mounted: [{ path: helper, hash: sha(helper) }] });
  assert.equal(loaded.compiled.definitionDigest, sdk.compileWorkflow(loaded.definition).definitionDigest);
});

test("a workflow's SDK import is the runner's own module: the bundled runtime", async (t) => {
  const { project } = fixtureCopy(t);
  assert.equal(existsSync(path.join(PACKAGE_DIR, "dist/runtime.bundle.js")), true, "npm run build bundles the runtime");
  writeFileSync(
    path.join(project, ".pi/workflows/which-sdk.workflow.ts"),
    `import * as sdk from "pi-workflows";\nexport default sdk.defineWorkflow({ name: "which-sdk", startAt: "a", nodes: { a: sdk.compute({ run: () => typeof (sdk as any).runnerMain }) }, edges: [] });\n`,
  );
  const loaded = await loadWorkflow("which-sdk", project, {});
  const runnerMain = loaded.definition.nodes.a.run();
  // runnerMain is exported only by the runtime (runtime.ts), never by the plain entry.
  assert.equal(runnerMain, "function");
  assert.equal(typeof sdk.runnerMain, "undefined");
});

test("a definition error surfaces as invalidDefinition naming the node", async (t) => {
  const { project } = fixtureCopy(t);
  const file = path.join(project, ".pi/workflows/broken.workflow.ts");
  writeFileSync(file, `import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({ name: "broken", startAt: "a", nodes: { a: compute({ run: () => 1 }) }, edges: [{ from: "a", to: "nowhere" }] });\n`);
  await assert.rejects(loadWorkflow("broken", project, {}), (e) => e.code === "invalidDefinition" && /"nowhere"/.test(e.message));
});

async function resolver(args, env = {}) {
  try {
    const { stdout } = await run(process.execPath, [path.join(PACKAGE_DIR, "dist/resolver-main.js"), ...args], { env: { ...process.env, ...env } });
    return { code: 0, out: JSON.parse(stdout) };
  } catch (error) {
    return { code: error.code, out: JSON.parse(error.stdout) };
  }
}

test("the resolver prints source identity, digest, snapshot and normalized input", async (t) => {
  const { project, agentDir } = fixtureCopy(t);
  const { code, out } = await resolver(["greet", "--project", project, "--input-json", '{"who":"ada","extra":1}'], { PI_CODING_AGENT_DIR: agentDir });
  assert.equal(code, 0);
  assert.equal(out.name, "greet");
  assert.deepEqual(out.input, { who: "ada" });
  assert.equal(out.inputHash, "sha256:" + createHash("sha256").update('{"who":"ada"}').digest("hex"));
  assert.equal(out.workflowSource.root.kind, "file");
  assert.equal(out.workflowSource.mounted.length, 1);
  assert.equal(out.definitionDigest, "sha256:" + createHash("sha256").update(sdk.canonicalJson(out.snapshot)).digest("hex"));
  assert.deepEqual(out.snapshot.nodes.map((n) => n.path), ["compose", "shout"]);
});

test("the resolver reports workflowNotFound, invalidInput and invalidDefinition with exit code 2", async (t) => {
  const { project, agentDir } = fixtureCopy(t);
  const env = { PI_CODING_AGENT_DIR: agentDir };
  const missing = await resolver(["nope", "--project", project], env);
  assert.deepEqual([missing.code, missing.out.error.code], [2, "workflowNotFound"]);
  const badInput = await resolver(["greet", "--project", project, "--input-json", '{"who":""}'], env);
  assert.deepEqual([badInput.code, badInput.out.error.code], [2, "invalidInput"]);
  writeFileSync(path.join(project, ".pi/workflows/syntax.workflow.ts"), "export default {{{");
  const syntax = await resolver(["syntax", "--project", project], env);
  assert.deepEqual([syntax.code, syntax.out.error.code], [2, "invalidDefinition"]);
});

test("the bundle cache serves unchanged sources and never serves code that does not match its hash", async (t) => {
  const { mkdtempSync, readdirSync, appendFileSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const pathModule = await import("node:path");
  const { loadWorkflow: load } = await import("../dist/loader.js");
  const cacheDir = mkdtempSync(pathModule.join(tmpdir(), "piw-cache-"));
  const previous = process.env.PI_WORKFLOWS_CACHE_DIR;
  process.env.PI_WORKFLOWS_CACHE_DIR = cacheDir;
  t.after(() => {
    if (previous === undefined) delete process.env.PI_WORKFLOWS_CACHE_DIR;
    else process.env.PI_WORKFLOWS_CACHE_DIR = previous;
    rmSync(cacheDir, { recursive: true, force: true });
  });
  const { project } = fixtureCopy(t);
  const first = await load("greet", project, {});
  const modules = readdirSync(pathModule.join(cacheDir, "bundles")).filter((name) => name.endsWith(".mjs"));
  assert.equal(modules.length, 1, "one content-addressed module cached");
  const second = await load("greet", project, {});
  assert.equal(second.compiled.definitionDigest, first.compiled.definitionDigest);
  // Tamper with the cached code: its hash no longer matches, so it is rebuilt, never run.
  appendFileSync(pathModule.join(cacheDir, "bundles", modules[0]), "\nthrow new Error('tampered cache ran');\n");
  const third = await load("greet", project, {});
  assert.equal(third.compiled.definitionDigest, first.compiled.definitionDigest);
  // Its function form too (this bundle has one: it needs only the SDK's named exports).
  const forms = readdirSync(pathModule.join(cacheDir, "bundles")).filter((name) => name.endsWith(".cjs"));
  assert.equal(forms.length, 1, "one content-addressed function form cached");
  appendFileSync(pathModule.join(cacheDir, "bundles", forms[0]), "\nthrow new Error('tampered cache ran');\n");
  const fourth = await load("greet", project, {});
  assert.equal(fourth.compiled.definitionDigest, first.compiled.definitionDigest);
});

/** Where a thrown error's stack says the workflow's code ran: function form or module. */
function ranAs(definition) {
  try {
    definition.nodes.a.run({ input: {}, outputs: {} });
  } catch (error) {
    return /workflow-bundle\.cjs/.test(error.stack) ? "function" : "module";
  }
  throw new Error("node a must throw");
}

test("a bundle needing only the SDK's named exports and builtins runs as a function, as its module would", async (t) => {
  const { project } = fixtureCopy(t);
  const dir = path.join(project, ".pi/workflows");
  // What a workflow can see of how it runs: strictness, `this`, the CommonJS names, builtins.
  const source = (name, tail) => `import { compute, defineWorkflow } from "pi-workflows";
import { join } from "node:path";
import * as os from "node:os";
const seen = { self: this === undefined, names: [typeof require, typeof module, typeof exports], join: join("a", "b"), os: typeof os.tmpdir };
let strict = false;
try { (undefined as any).x = 1; } catch { strict = true; }
export default defineWorkflow({ name: "${name}", startAt: "a", nodes: { a: compute({ run: () => { throw new Error(JSON.stringify({ seen, strict })); } }) }, edges: [] });
${tail}`;
  // The same code with a top-level await, which only a module has.
  writeFileSync(path.join(dir, "plain.workflow.ts"), source("plain", ""));
  writeFileSync(path.join(dir, "awaiting.workflow.ts"), source("awaiting", "await 0;\n"));
  const told = (definition) => {
    try {
      definition.nodes.a.run({});
    } catch (error) {
      return JSON.parse(error.message);
    }
  };
  const asFunction = await loadWorkflow("plain", project, {});
  const asModule = await loadWorkflow("awaiting", project, {});
  assert.deepEqual([ranAs(asFunction.definition), ranAs(asModule.definition)], ["function", "module"]);
  assert.deepEqual(told(asFunction.definition), told(asModule.definition));
  assert.deepEqual(told(asFunction.definition), { seen: { self: true, names: ["function", "undefined", "undefined"], join: "a/b", os: "function" }, strict: true });
  // The same SDK instance as a module import gets: the definition compiles the same.
  assert.equal(asFunction.compiled.definitionDigest, sdk.compileWorkflow(asFunction.definition).definitionDigest);
});

test("a bundle that needs a module (top-level await, import.meta, import(), the SDK as a namespace) is imported as one", async (t) => {
  const { project } = fixtureCopy(t);
  const dir = path.join(project, ".pi/workflows");
  const node = `a: compute({ run: () => { throw new Error("where"); } })`;
  const cases = {
    awaits: `import { compute, defineWorkflow } from "pi-workflows";\nawait Promise.resolve();\nexport default defineWorkflow({ name: "awaits", startAt: "a", nodes: { ${node} }, edges: [] });`,
    meta: `import { compute, defineWorkflow } from "pi-workflows";\nconst url = import.meta.url;\nexport default defineWorkflow({ name: "meta", title: typeof url, startAt: "a", nodes: { ${node} }, edges: [] });`,
    dynamic: `import { compute, defineWorkflow } from "pi-workflows";\nconst later = () => import("node:os");\nexport default defineWorkflow({ name: "dynamic", title: typeof later, startAt: "a", nodes: { ${node} }, edges: [] });`,
    namespace: `import * as piw from "pi-workflows";\nexport default piw.defineWorkflow({ name: "namespace", startAt: "a", nodes: { a: piw.compute({ run: () => { throw new Error("where"); } }) }, edges: [] });`,
  };
  for (const [name, source] of Object.entries(cases)) {
    writeFileSync(path.join(dir, `${name}.workflow.ts`), source);
    const loaded = await loadWorkflow(name, project, {});
    assert.equal(loaded.definition.name, name);
    assert.equal(ranAs(loaded.definition), "module", name);
  }
});

/** The pids of this process's esbuild service children (esbuild's Go binary, `--service`). */
function esbuildChildren() {
  const pids = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // ended meanwhile
    }
    // pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid === process.pid && comm === "esbuild") pids.push(Number(entry));
  }
  return pids;
}

test("esbuild's service process is stopped once no build has used it for a while, and a later build starts one", async (t) => {
  const { ESBUILD_IDLE_STOP_MS } = await import("../dist/esbuild-service.js");
  const { project } = fixtureCopy(t);
  // Bounded: far beyond the grace, so only a service that never stops fails this.
  const waitUntilStopped = () =>
    waitFor(() => esbuildChildren().length === 0, ESBUILD_IDLE_STOP_MS + 10_000, "esbuild's service to stop after its last build");
  // No bundle cache here, so every load bundles.
  await loadWorkflow("greet", project, {});
  assert.equal(esbuildChildren().length, 1, "the build ran on a service process, still up within its grace");
  await waitUntilStopped();
  const again = await loadWorkflow("greet", project, {});
  assert.equal(again.definition.name, "greet", "a build after the stop starts a new service");
  await waitUntilStopped();
});
