// The runner started from a V8 startup snapshot (src/runner-snapshot.ts), built the way the
// server's pool builds it, against the fake server on fd 3.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { loadWorkflow, loadWorkflowFile } from "../dist/loader.js";
import { fixtureCopy } from "./support/fixtures.mjs";
import { launchFor, runRunner, runState } from "./support/fake-server.mjs";

const ENTRY = fileURLToPath(new URL("../dist/runner-snapshot.cjs", import.meta.url));
const supported = typeof process.getBuiltinModule === "function";

/** A temp directory removed after the test. */
function tempDir(t, prefix) {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A snapshot of the runner for this Node (`env` added to the build's), and the build's stderr. */
function buildSnapshotWith(t, env = {}) {
  const blob = path.join(tempDir(t, "piw-snap-"), "runner.blob");
  const built = spawnSync(process.execPath, ["--snapshot-blob", blob, "--build-snapshot", ENTRY], {
    encoding: "utf8",
    env: { ...process.env, ...env },
  });
  assert.equal(built.status, 0, built.stderr);
  return { blob, stderr: built.stderr };
}

function buildSnapshot(t) {
  return buildSnapshotWith(t).blob;
}

function checkSnapshot(blob) {
  return spawnSync(process.execPath, ["--snapshot-blob", blob, "pi-workflows-runner", "--check"], { encoding: "utf8" });
}

test("a snapshot passes its check: the build's rehearsal completed and import() works", { skip: !supported }, (t) => {
  const blob = buildSnapshot(t);
  const checked = checkSnapshot(blob);
  assert.equal(checked.status, 0, checked.stderr);
  assert.equal(checked.stderr, "", "no warning on the runner's stderr");
});

test("a runner from the snapshot runs a shell workflow exactly as the plain runner does", { skip: !supported }, async (t) => {
  const blob = buildSnapshot(t);
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("build-check", project, {});
  const launch = launchFor({ projectPath: project, loaded });
  const payload = { runState: runState({ input: { exitCode: 0 } }) };
  const plain = await runRunner({ launch, payload });
  const fromSnapshot = await runRunner({ launch, payload, nodeArgs: ["--snapshot-blob", blob, "pi-workflows-runner", "--no-warm-up"] });
  assert.equal(fromSnapshot.code, 0, fromSnapshot.stderr);
  assert.equal(fromSnapshot.stderr, "", "no warning on the runner's stderr");
  const summary = (result) => result.messages.map((m) => [m.kind, m.kind === "run.finished" ? m.payload : undefined]);
  assert.deepEqual(summary(fromSnapshot), summary(plain));
  assert.deepEqual(fromSnapshot.messages.at(-2).payload, { outcome: "completed", output: { verdict: "pass", probe: { exitCode: 0, stdout: "out" } } });
});

test("a warm runner from the snapshot left waiting longer than the build's timers still runs a workflow's timers", { skip: !supported, timeout: 30_000 }, async (t) => {
  const blob = buildSnapshot(t);
  const project = tempDir(t, "piw-snap-timer-");
  const file = path.join(project, "timer.workflow.ts");
  const step = (n) => `compute({ run: () => new Promise((resolve) => setTimeout(() => resolve(${n}), 20)) })`;
  writeFileSync(
    file,
    `import { compute, defineWorkflow } from "pi-workflows";\n` +
      `export default defineWorkflow({ name: "timer", startAt: "a", nodes: { a: ${step(1)}, b: ${step(2)} }, edges: [{ from: "a", to: "b" }] });\n`,
  );
  const loaded = await loadWorkflowFile(file);
  // The build's longest timer was the rehearsal's 2 s limit: wait past it, rehearsing meanwhile.
  const result = await runRunner({
    launch: launchFor({ projectPath: project, loaded }),
    payload: { runState: runState() },
    nodeArgs: ["--snapshot-blob", blob, "pi-workflows-runner"],
    launchDelayMs: 3_000,
    signal: t.signal,
  });
  assert.equal(result.code, 0, result.stderr);
  assert.deepEqual(result.messages.at(-2).payload, { outcome: "completed", output: 2 });
});

test("the snapshot entry refuses to run as a plain script", () => {
  const plain = spawnSync(process.execPath, [ENTRY], { encoding: "utf8" });
  assert.notEqual(plain.status, 0);
  assert.match(plain.stderr, /startup snapshot's entry/);
});

test("the build rehearses over a socket pair and leaves nothing in the temp dir", { skip: !supported }, (t) => {
  const tmp = tempDir(t, "piw-snap-tmp-");
  const { blob, stderr } = buildSnapshotWith(t, { TMPDIR: tmp });
  assert.equal(stderr, "", "the pair was made: no word of an in-memory rehearsal");
  assert.deepEqual(readdirSync(tmp), [], "the pair's directory is gone");
  assert.equal(checkSnapshot(blob).status, 0);
});

test("where no socket pair can be made the build rehearses in memory, and its snapshot works", { skip: !supported }, (t) => {
  // A Unix socket's path holds at most 107 bytes: a temp dir this deep cannot hold one.
  const parent = tempDir(t, "piw-snap-tmp-");
  const deep = path.join(parent, "d".repeat(120));
  mkdirSync(deep);
  const { blob, stderr } = buildSnapshotWith(t, { TMPDIR: deep });
  assert.match(stderr, /rehearsing in memory, no socket pair \(ENAMETOOLONG\)/);
  assert.deepEqual(readdirSync(deep), [], "nothing was left in the temp dir");
  assert.deepEqual(readdirSync(parent), [path.basename(deep)], "nor beside it (libuv binds a long path truncated)");
  const checked = checkSnapshot(blob);
  assert.equal(checked.status, 0, checked.stderr);
});

test("a socket pair carries bytes both ways and leaves no directory", async (t) => {
  const tmp = tempDir(t, "piw-pair-");
  const { unixSocketPair } = await import("../dist/runner/socket-pair.js");
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
  let ends;
  try {
    ends = await unixSocketPair();
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  }
  const [a, b] = ends;
  assert.deepEqual(readdirSync(tmp), []);
  const received = (end) => new Promise((resolve) => end.once("data", (chunk) => resolve(chunk.toString())));
  const atB = received(b);
  a.write("ping\n");
  assert.equal(await atB, "ping\n");
  const atA = received(a);
  b.write("pong\n");
  assert.equal(await atA, "pong\n");
  a.destroy();
  b.destroy();
});
