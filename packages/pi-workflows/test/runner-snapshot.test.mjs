// The runner started from a V8 startup snapshot (src/runner-snapshot.ts), built the way the
// server's pool builds it, against the fake server on fd 3.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { loadWorkflow } from "../dist/loader.js";
import { fixtureCopy } from "./support/fixtures.mjs";
import { launchFor, runRunner, runState } from "./support/fake-server.mjs";

const ENTRY = fileURLToPath(new URL("../dist/runner-snapshot.cjs", import.meta.url));
const supported = typeof process.getBuiltinModule === "function";

/** A snapshot of the runner for this Node, in a temp directory removed after the test. */
function buildSnapshot(t) {
  const dir = mkdtempSync(path.join(tmpdir(), "piw-snap-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const blob = path.join(dir, "runner.blob");
  const built = spawnSync(process.execPath, ["--snapshot-blob", blob, "--build-snapshot", ENTRY], { encoding: "utf8" });
  assert.equal(built.status, 0, built.stderr);
  return blob;
}

test("a snapshot passes its check: the build's rehearsal completed and import() works", { skip: !supported }, (t) => {
  const blob = buildSnapshot(t);
  const checked = spawnSync(process.execPath, ["--snapshot-blob", blob, "pi-workflows-runner", "--check"], { encoding: "utf8" });
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

test("the snapshot entry refuses to run as a plain script", () => {
  const plain = spawnSync(process.execPath, [ENTRY], { encoding: "utf8" });
  assert.notEqual(plain.status, 0);
  assert.match(plain.stderr, /startup snapshot's entry/);
});
