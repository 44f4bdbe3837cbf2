// The runner child end to end, against a fake server on a socketpair at fd 3.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { loadWorkflow, loadWorkflowFile } from "../dist/loader.js";
import { fixtureCopy } from "./support/fixtures.mjs";
import { contentRef, launchFor, runRunner, runState } from "./support/fake-server.mjs";

const kinds = (messages) => messages.map((m) => m.kind);

test("a start command runs a shell workflow to completion over the channel", async (t) => {
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("build-check", project, {});
  const launch = launchFor({ projectPath: project, loaded });
  const result = await runRunner({ launch, payload: { runState: runState({ input: { exitCode: 0 } }) } });
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, "", "nothing but logs, and never on stdout");
  assert.deepEqual(kinds(result.messages), [
    "runner.ready",
    "node.started",
    "effect.reserve",
    "runner.progress",
    "runner.progress",
    "effect.settle",
    "node.finished",
    "nodes.finished",
    "run.finished",
    "runner.exiting",
  ]);
  result.messages.forEach((m, i) => {
    assert.equal(m.messageId, `epoch-1:${i + 1}`);
    assert.deepEqual([m.schema, m.launchSchema, m.runId, m.generation, m.runnerEpoch], ["pi-workflows.runner-message.v1", "pi-workflows.worker-launch.v1", "run-e2e", 1, "epoch-1"]);
  });
  const finished = result.messages.at(-2).payload;
  assert.deepEqual(finished, { outcome: "completed", output: { verdict: "pass", probe: { exitCode: 0, stdout: "out" } } });
  const register = result.messages[3].payload;
  assert.equal(register.operation, "process.register");
  assert.equal(result.messages[4].payload.pid, register.pid);
});

test("a changed mounted file parks the run before any workflow code runs", async (t) => {
  const { project, root } = fixtureCopy(t);
  const loaded = await loadWorkflow("greet", project, {});
  const marker = path.join(root, "ran");
  writeFileSync(
    path.join(project, ".pi/workflows/lib/greeting.ts"),
    `import { writeFileSync } from "node:fs";\nwriteFileSync(${JSON.stringify(marker)}, "ran");\nexport function greeting(who: string) { return who; }\n`,
  );
  const result = await runRunner({ launch: launchFor({ projectPath: project, loaded }), payload: { runState: runState({ input: { who: "x" } }) } });
  assert.equal(result.code, 0, result.stderr);
  assert.deepEqual(kinds(result.messages), ["runner.ready", "run.parked", "runner.exiting"]);
  assert.deepEqual(result.messages[1].payload, { reason: "workflowSourceChanged" });
  assert.equal(existsSync(marker), false, "changed code never executed");
});

test("a cached bundle of newer sources is refused before its code runs: the run parks", async (t) => {
  const { project, root } = fixtureCopy(t);
  const loaded = await loadWorkflow("greet", project, {});
  const marker = path.join(root, "ran");
  const cacheDir = path.join(root, "cache");
  // The newer code marks only inside a runner, so caching it here (as the resolver would) is harmless.
  writeFileSync(
    path.join(project, ".pi/workflows/lib/greeting.ts"),
    `import { writeFileSync } from "node:fs";\nif (process.argv[1]?.endsWith("runner-main.js")) writeFileSync(${JSON.stringify(marker)}, "ran");\nexport function greeting(who: string) { return who; }\n`,
  );
  const previous = process.env.PI_WORKFLOWS_CACHE_DIR;
  process.env.PI_WORKFLOWS_CACHE_DIR = cacheDir;
  try {
    await loadWorkflowFile(loaded.source.root.path, "greet");
  } finally {
    if (previous === undefined) delete process.env.PI_WORKFLOWS_CACHE_DIR;
    else process.env.PI_WORKFLOWS_CACHE_DIR = previous;
  }
  const result = await runRunner({
    launch: launchFor({ projectPath: project, loaded }),
    payload: { runState: runState({ input: { who: "x" } }) },
    env: { PI_WORKFLOWS_CACHE_DIR: cacheDir },
  });
  assert.equal(result.code, 0, result.stderr);
  assert.deepEqual(kinds(result.messages), ["runner.ready", "run.parked", "runner.exiting"]);
  assert.match(result.stderr, /greeting\.ts changed/);
  assert.equal(existsSync(marker), false, "the newer cached code never executed");
});

test("claimLost makes the runner exit 75 at once", async (t) => {
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("greet", project, {});
  const result = await runRunner({
    launch: launchFor({ projectPath: project, loaded }),
    payload: { runState: runState({ input: { who: "x" } }) },
    answer: (frame) => (frame.kind === "nodes.finished" ? { outcome: "claimLost" } : undefined),
  });
  assert.equal(result.code, 75);
  // Pure results, and the run's end behind them, may already be in flight (pipelined) when
  // the answer arrives (a server refuses all of it once the claim is lost); nothing else is
  // sent, not even the goodbye.
  const sent = kinds(result.messages);
  assert.equal(sent[0], "runner.ready");
  assert.ok(sent.slice(1).every((kind) => kind === "nodes.finished" || kind === "run.finished"), sent.join(","));
  assert.ok(!sent.includes("runner.exiting"), sent.join(","));
});

test("a runStateRef is read with content.read in 512 KiB parts and verified", async (t) => {
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("greet", project, {});
  const state = Buffer.from(JSON.stringify(runState({ input: { who: "y", padding: "p".repeat(700_000) } })));
  const result = await runRunner({ launch: launchFor({ projectPath: project, loaded }), payload: { runStateRef: contentRef(state) }, content: state });
  assert.equal(result.code, 0, result.stderr);
  const reads = result.messages.filter((m) => m.kind === "content.read").map((m) => [m.payload.offset, m.payload.length]);
  assert.deepEqual(reads, [[0, 524288], [524288, state.length - 524288]]);
  assert.equal(result.messages.at(-2).payload.outcome, "completed");

  const corrupt = Buffer.from(state);
  corrupt[10] ^= 1;
  const bad = await runRunner({ launch: launchFor({ projectPath: project, loaded }), payload: { runStateRef: contentRef(state) }, content: corrupt });
  assert.notEqual(bad.code, 0);
  assert.ok(!bad.messages.some((m) => m.kind.startsWith("node.")), "nothing ran from unverified state");
});

test("a checkpoint waits with no runner, and a resume with the settled answer finishes", async (t) => {
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("review", project, {});
  const launch = launchFor({ projectPath: project, loaded });
  const first = await runRunner({ launch, payload: { runState: runState() } });
  assert.equal(first.code, 0, first.stderr);
  assert.deepEqual(kinds(first.messages), ["runner.ready", "nodes.finished", "node.started", "interaction.requested", "runner.exiting"]);
  const [, preparedBatch, started, requested] = first.messages;
  assert.equal(preparedBatch.payload.results.length, 1);
  const prepared = preparedBatch.payload.results[0];
  assert.deepEqual(
    { nodeId: prepared.nodeId, nodePath: prepared.nodePath, visit: prepared.visit, nodeType: prepared.nodeType, outcome: prepared.outcome },
    { nodeId: "prepare", nodePath: "prepare", visit: 1, nodeType: "compute", outcome: "completed" },
  );
  assert.equal(requested.payload.contract.summary, "approve draft v1?");

  const attempts = [
    { attemptId: prepared.attemptId, nodeId: "prepare", nodePath: "prepare", visit: 1, nodeType: "compute", status: "completed", output: prepared.value, error: null },
    { attemptId: started.attemptId, nodeId: "approve", nodePath: "approve", visit: 1, nodeType: "checkpoint", status: "waiting", output: null, error: null },
  ];
  const interaction = { requestId: requested.payload.requestId, attemptId: started.attemptId, kind: "checkpoint", status: "settled", answer: { decision: "yes", by: "grace" } };
  const second = await runRunner({
    launch: { ...launch, generation: 2, runnerEpoch: "epoch-2" },
    command: "resume",
    payload: { runState: runState({ attempts, interaction }) },
  });
  assert.equal(second.code, 0, second.stderr);
  assert.deepEqual(kinds(second.messages), ["runner.ready", "node.finished", "nodes.finished", "run.finished", "runner.exiting"]);
  assert.equal(second.messages[1].attemptId, started.attemptId);
  assert.deepEqual(second.messages[3].payload, { outcome: "completed", output: { published: "v1", by: "grace" } });
});

test("an unchanged source that no longer loads fails the run clearly; a bad launch exits 76", async (t) => {
  const { project } = fixtureCopy(t);
  const file = path.join(project, ".pi/workflows/needs-pkg.workflow.ts");
  writeFileSync(file, `import missing from "no-such-package-anywhere";\nimport { compute, defineWorkflow } from "pi-workflows";\nexport default defineWorkflow({ name: "n", startAt: "a", nodes: { a: compute({ run: () => missing }) }, edges: [] });\n`);
  const hash = createHash("sha256").update(readFileSync(file)).digest("hex");
  const launch = { ...launchFor({ projectPath: project, loaded: { source: { root: { kind: "file", path: file, hash }, mounted: [] }, compiled: { definitionDigest: "" } } }) };
  const result = await runRunner({ launch, payload: { runState: runState() } });
  assert.equal(result.code, 0, result.stderr);
  assert.deepEqual(kinds(result.messages), ["runner.ready", "run.finished", "runner.exiting"]);
  assert.equal(result.messages[1].payload.error.code, "invalidDefinition");
  assert.match(result.messages[1].payload.error.message, /no-such-package-anywhere/);

  const bad = await runRunner({ launch: { ...launch, workflowSource: {} }, payload: { runState: runState() } });
  assert.equal(bad.code, 76);
  assert.deepEqual(bad.messages, []);
});

test("state-changing messages after ready carry an increasing expectedRevision", async (t) => {
  const { project } = fixtureCopy(t);
  const loaded = await loadWorkflow("greet", project, {});
  const result = await runRunner({ launch: launchFor({ projectPath: project, loaded }), payload: { runState: runState({ input: { who: "z" } }) } });
  assert.equal(result.code, 0, result.stderr);
  const changes = result.messages.filter((m) => !["runner.ready", "runner.exiting", "runner.progress", "content.read"].includes(m.kind));
  assert.deepEqual(kinds(changes), ["nodes.finished", "run.finished"]);
  const revisions = changes.map((m) => m.expectedRevision);
  assert.ok(revisions.every((r) => Number.isInteger(r)), JSON.stringify(revisions));
  // A batch of pure results advances the revision by one per result.
  const results = changes[0].payload.results.length;
  assert.ok(results >= 2, JSON.stringify(changes[0].payload));
  assert.equal(revisions[1], revisions[0] + results, JSON.stringify(revisions));
  assert.equal(result.messages[0].expectedRevision, undefined, "runner.ready comes before the runner knows a revision");
});

test("a waiting runner's warm-up rehearses a whole generation in memory and leaves nothing behind", async (t) => {
  const { project } = fixtureCopy(t);
  const { readdirSync } = await import("node:fs");
  const { warmUp, warmUpAsFunction, warmUpAsModule } = await import("../dist/runner/warmup.js");
  const sdk = await import("../dist/sdk.js");
  const before = readdirSync(project).sort();
  const cwd = process.cwd();
  process.chdir(project);
  t.after(() => process.chdir(cwd));
  assert.equal(await warmUp(warmUpAsFunction(sdk)), true, "the rehearsed two-step workflow, loaded as a function, completed over the in-memory channel");
  assert.equal(await warmUp(warmUpAsModule), true, "so did the one imported as a module");
  assert.deepEqual(readdirSync(project).sort(), before, "no file was created or removed");
});

test("a runner rehearses only while it waits: a launch that is already there is taken at once", async () => {
  const { warmUpUnlessLaunched } = await import("../dist/runner/warmup.js");
  assert.equal(await warmUpUnlessLaunched(Promise.resolve({})), false, "a waiting launch skips the rehearsal");
  assert.equal(await warmUpUnlessLaunched(Promise.reject(new Error("end of file"))), false, "so does a closed channel");
  assert.equal(await warmUpUnlessLaunched(new Promise(() => {})), true, "a runner left waiting rehearses");
});

test("runner.ready goes out before the workflow loads, and a load that never settles ends the runner", async () => {
  const { Duplex, PassThrough } = await import("node:stream");
  const { FrameChannel } = await import("../dist/runner/channel.js");
  const { RunnerSession } = await import("../dist/runner/session.js");
  const { LoadTimeoutError, readyWhileLoading } = await import("../dist/runner/generation.js");
  const toServer = new PassThrough();
  const channel = new FrameChannel(Duplex.from({ readable: new PassThrough(), writable: toServer }));
  const launch = { runId: "r", generation: 1, runnerEpoch: "e", projectPath: "/" };
  const session = new RunnerSession(channel, launch, () => {
    throw new Error("claimLost");
  });
  let loadStarted = false;
  const never = () => {
    loadStarted = true;
    return new Promise(() => {});
  };
  await assert.rejects(readyWhileLoading(session, never, 50), LoadTimeoutError);
  assert.ok(loadStarted);
  const sent = String(toServer.read() ?? "").trim().split("\n").map((line) => JSON.parse(line));
  assert.deepEqual(sent.map((m) => m.kind), ["runner.ready"], "ready was sent while the load was still pending");
  channel.close();
});
