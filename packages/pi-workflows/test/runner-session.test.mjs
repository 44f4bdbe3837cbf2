// The runner session's gathering of pure results into `nodes.finished`, over an in-memory
// channel that answers every frame as a server would (in order, revisions advancing).
import assert from "node:assert/strict";
import { test } from "node:test";
import { PipelineError, PURE_RESULTS_MAX, RunnerSession } from "../dist/runner/session.js";

const READY_REVISION = 10;

/** A channel whose server accepts everything except what `refuse(frame)` names. */
class AnsweringChannel {
  constructor(refuse = () => false) {
    this.refuse = refuse;
    this.frames = [];
    this.answers = [];
    this.revision = READY_REVISION;
  }

  async writeFrame(frame) {
    this.frames.push(frame);
    if (frame.kind === "runner.ready") return this.push({ messageId: frame.messageId, outcome: "accepted", revision: this.revision });
    if (this.refuse(frame)) {
      return this.push({ messageId: frame.messageId, outcome: "rejected", error: { code: "invalidInput", message: "refused" } });
    }
    this.revision += frame.kind === "nodes.finished" ? frame.payload.results.length : 1;
    this.push({ messageId: frame.messageId, outcome: "accepted", revision: this.revision });
  }

  push(answer) {
    const waiter = this.waiter;
    this.waiter = undefined;
    if (waiter) waiter(answer);
    else this.answers.push(answer);
  }

  readFrame() {
    if (this.answers.length > 0) return Promise.resolve(this.answers.shift());
    return new Promise((resolve) => (this.waiter = resolve));
  }
}

const launch = { schema: "pi-workflows.worker-launch.v1", runId: "run-1", generation: 1, runnerEpoch: "e1", projectPath: "/p", protocolVersion: 1 };

async function readySession(channel) {
  const session = new RunnerSession(channel, launch, () => {
    throw new Error("claim lost");
  });
  await session.send("runner.ready", {});
  return session;
}

const pure = (n, value = n) => ({ attemptId: `a${n}`, nodeId: `n${n}`, nodePath: `n${n}`, visit: 1, nodeType: "compute", outcome: "completed", value });
const results = (frame) => frame.payload.results.map((result) => result.nodeId);

test("the pure results of one tick leave as one nodes.finished of at most 32, the revision one per result", async () => {
  const channel = new AnsweringChannel();
  const session = await readySession(channel);
  const count = PURE_RESULTS_MAX + 8;
  for (let n = 1; n <= count; n++) await session.sendPureResult(pure(n), 2);
  await session.flush();
  const sent = channel.frames.slice(1);
  assert.deepEqual(sent.map((frame) => frame.kind), ["nodes.finished", "nodes.finished"]);
  assert.deepEqual(sent.map((frame) => frame.payload.results.length), [PURE_RESULTS_MAX, 8]);
  assert.deepEqual(sent.flatMap(results), Array.from({ length: count }, (_, i) => `n${i + 1}`), "in step order");
  assert.deepEqual(sent.map((frame) => frame.expectedRevision), [READY_REVISION, READY_REVISION + PURE_RESULTS_MAX]);
  assert.equal(sent[0].attemptId, undefined, "the results name their attempts");
  await session.send("run.finished", { outcome: "completed", output: null });
  assert.equal(channel.frames.at(-1).expectedRevision, READY_REVISION + count);
});

test("gathered results stay under the frame limit: a large value starts the next message", async () => {
  const channel = new AnsweringChannel();
  const session = await readySession(channel);
  const value = "x".repeat(200 * 1024);
  for (let n = 1; n <= 3; n++) await session.sendPureResult(pure(n, value), value.length + 2);
  await session.flush();
  assert.deepEqual(channel.frames.slice(1).map((frame) => frame.payload.results.length), [2, 1]);
});

test("another message leaves after the results gathered before it, and a later tick starts a new batch", async () => {
  const channel = new AnsweringChannel();
  const session = await readySession(channel);
  await session.sendPureResult(pure(1), 1);
  await session.sendPureResult(pure(2), 1);
  await session.send("node.started", { nodeId: "n3", nodePath: "n3", visit: 1, nodeType: "shell" }, "a3");
  await session.sendPureResult(pure(4), 1);
  await new Promise((resolve) => setImmediate(resolve));
  await session.sendPureResult(pure(5), 1);
  await session.flush();
  const sent = channel.frames.slice(1);
  assert.deepEqual(sent.map((frame) => frame.kind), ["nodes.finished", "node.started", "nodes.finished", "nodes.finished"]);
  assert.deepEqual(sent.filter((frame) => frame.kind === "nodes.finished").map(results), [["n1", "n2"], ["n4"], ["n5"]]);
  assert.deepEqual(sent.map((frame) => frame.expectedRevision), [10, 12, 13, 14]);
});

test("a refused batch surfaces at the next flush: the runner cannot tell what followed it", async () => {
  const channel = new AnsweringChannel((frame) => frame.kind === "nodes.finished");
  const session = await readySession(channel);
  await session.sendPureResult(pure(1), 1);
  await session.sendPureResult(pure(2), 1);
  await assert.rejects(session.flush(), PipelineError);
});
