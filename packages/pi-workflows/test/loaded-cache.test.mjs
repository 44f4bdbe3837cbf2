// The served resolver reuses a loaded workflow only while every source byte is unchanged.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { canonicalJson } from "../dist/canonical.js";
import { LoadedWorkflowCache } from "../dist/loaded-cache.js";
import { loadWorkflowFile } from "../dist/loader.js";
import { fixtureCopy, PACKAGE_DIR } from "./support/fixtures.mjs";

/** The same number of bytes, other content: neither size nor a coarse mtime tells them apart. */
function rewriteSameLength(file, from, to) {
  assert.equal(from.length, to.length);
  const text = readFileSync(file, "utf8");
  assert.ok(text.includes(from), `${file} contains ${from}`);
  writeFileSync(file, text.replace(from, to));
}

function greetFiles(project) {
  const dir = path.join(project, ".pi/workflows");
  return { root: path.join(dir, "greet.workflow.ts"), helper: path.join(dir, "lib/greeting.ts") };
}

test("a cache entry is used while its sources are unchanged and never after a byte changed", async (t) => {
  const { project } = fixtureCopy(t);
  const { root, helper } = greetFiles(project);
  const cache = new LoadedWorkflowCache(4);
  const loaded = await loadWorkflowFile(root, "greet");
  cache.remember(loaded);
  assert.equal(await cache.lookup(root), loaded);
  rewriteSameLength(helper, "hello", "hullo");
  assert.equal(await cache.lookup(root), undefined, "a changed mounted file is a miss");
  assert.equal(cache.size, 0, "the stale entry is gone");
  const reloaded = await loadWorkflowFile(root, "greet");
  assert.notEqual(reloaded.source.mounted[0].hash, loaded.source.mounted[0].hash);
  cache.remember(reloaded);
  rewriteSameLength(root, "greet", "gReet");
  assert.equal(await cache.lookup(root), undefined, "a changed root file is a miss");
  assert.deepEqual([cache.hits, cache.misses], [1, 2]);
});

test("the cache holds at most its capacity, dropping the least recently used", async (t) => {
  const { project } = fixtureCopy(t);
  const dir = path.join(project, ".pi/workflows");
  const cache = new LoadedWorkflowCache(1);
  const greet = await loadWorkflowFile(path.join(dir, "greet.workflow.ts"), "greet");
  const review = await loadWorkflowFile(path.join(dir, "review.workflow.ts"), "review");
  cache.remember(greet);
  cache.remember(review);
  assert.equal(cache.size, 1);
  assert.equal(await cache.lookup(greet.source.root.path), undefined);
  assert.equal(await cache.lookup(review.source.root.path), review);
  assert.throws(() => new LoadedWorkflowCache(0), /at least one entry/);
});

/** A served resolver on a socket at fd 3, as the server runs it. */
function servedResolver(t) {
  const child = spawn(process.execPath, [path.join(PACKAGE_DIR, "dist/resolver-main.js"), "--serve"], {
    stdio: ["ignore", "ignore", "pipe", "pipe"],
  });
  t.after(() => child.kill("SIGKILL"));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const lines = createInterface({ input: child.stdio[3] })[Symbol.asyncIterator]();
  let id = 0;
  const resolve = async (request) => {
    id += 1;
    child.stdio[3].write(canonicalJson({ id, ...request }) + "\n");
    const { value, done } = await lines.next();
    assert.ok(!done, `the resolver closed its channel instead of answering request ${id}`);
    const reply = JSON.parse(value);
    assert.equal(reply.id, id);
    return reply;
  };
  resolve.exited = exited;
  return resolve;
}

/** Fresh imports a served resolver makes before it retires (resolver-main.ts). */
const SERVED_IMPORTS_MAX = 64;

test("a served resolver retires after its import quota: its last answer arrives, says so, and it exits 0", async (t) => {
  const { project } = fixtureCopy(t);
  const file = path.join(project, ".pi/workflows/quota.workflow.ts");
  const version = (n) =>
    `import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({ name: "quota", title: "version ${n}", startAt: "a", input: () => { throw new Error("no input"); }, nodes: { a: compute({ run: () => 1 }) }, edges: [] });
`;
  const resolve = servedResolver(t);
  const request = { target: "quota", project };
  writeFileSync(file, version(0));
  for (let reuse = 0; reuse < 3; reuse += 1) {
    const reply = await resolve(request);
    assert.equal(reply.error?.code, "invalidInput", JSON.stringify(reply));
    assert.equal(reply.retiring, undefined, "reusing a loaded workflow spends no import");
  }
  for (let n = 1; n < SERVED_IMPORTS_MAX; n += 1) {
    writeFileSync(file, version(n));
    const reply = await resolve(request);
    assert.equal(reply.error?.code, "invalidInput", JSON.stringify(reply));
    assert.equal(reply.retiring, n === SERVED_IMPORTS_MAX - 1 ? true : undefined, `answer ${n}`);
  }
  assert.deepEqual(await resolve.exited, { code: 0, signal: null });
});

test("the served resolver reuses an unchanged workflow's module and loads a changed one anew", async (t) => {
  const { project } = fixtureCopy(t);
  const file = path.join(project, ".pi/workflows/stamped.workflow.ts");
  // The title is made when the module is evaluated: the same title means the same module.
  writeFileSync(
    file,
    `import { compute, defineWorkflow } from "pi-workflows";
const stamp = Math.random().toString(36).slice(2, 10);
export default defineWorkflow({ name: "stamped", title: "load " + stamp, startAt: "a", nodes: { a: compute({ run: () => 1 }) }, edges: [] });
`,
  );
  const resolve = servedResolver(t);
  const request = { target: "stamped", project, inputJson: '{"n":1}' };
  const first = await resolve(request);
  assert.ok(first.answer, JSON.stringify(first));
  const second = await resolve({ ...request, inputJson: '{"n":2}' });
  assert.equal(second.answer.snapshot.title, first.answer.snapshot.title, "an unchanged source is not imported again");
  assert.equal(second.answer.definitionDigest, first.answer.definitionDigest);
  assert.deepEqual(second.answer.input, { n: 2 }, "the input is the request's own");
  rewriteSameLength(file, "load ", "load:");
  const third = await resolve(request);
  assert.ok(third.answer.snapshot.title.startsWith("load:"), "a changed source is loaded anew");
  assert.notEqual(third.answer.workflowSource.root.hash, first.answer.workflowSource.root.hash);
  assert.notEqual(third.answer.definitionDigest, first.answer.definitionDigest);
});
