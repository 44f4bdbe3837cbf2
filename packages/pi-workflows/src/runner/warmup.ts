// A waiting runner's warm-up. V8 compiles a function when it is first called, so the first run
// through the engine pays for compiling define, compile, the engine loop and frame encoding:
// a 10-step workflow took ~7 ms the first time in a fresh Node and ~1 ms the next. A warm
// runner pays that while it waits for its launch, by running a two-step workflow against a host
// that keeps and sends nothing, so a launched run starts on compiled code.
//
// Invariant: the warm-up touches no file, no channel and no global state a run could see; a
// failed warm-up only leaves the code cold.
import { canonicalJson, sha256Hex } from "../canonical.js";
import { compileWorkflow } from "../compile.js";
import { defineWorkflow } from "../define.js";
import { runWorkflow } from "../engine.js";
import type { Host, RunState } from "../engine/host.js";
import { compute } from "../nodes.js";

const done = async (): Promise<void> => {};

/** A host that accepts every message and keeps nothing. */
function silentHost(): Host {
  return {
    nodeStarted: done,
    nodeUpdate: done,
    nodeFinished: done,
    nodeFailed: done,
    runFinished: done,
    runParked: done,
    interactionAccepted: done,
    interactionRejected: done,
    interactionRequested: done,
    notificationRequested: done,
    effectReserve: async () => ({ effectId: "warm", status: "pending", execute: false }),
    effectSettle: done,
    processRegister: done,
    processUnregister: done,
  };
}

function emptyRunState(): RunState {
  return {
    schema: "pi-workflows.run-state.v1",
    runId: "warm-up",
    workflowName: "warm-up",
    revision: 0,
    input: {},
    attempts: [],
    effects: [],
    interaction: null,
    continuation: null,
  };
}

/** Run a two-step workflow in memory and encode a frame like the ones a run sends; whether
 * the workflow completed. */
export async function warmUp(): Promise<boolean> {
  try {
    const workflow = defineWorkflow({
      name: "warm-up",
      startAt: "first",
      nodes: { first: compute({ run: () => 1 }), second: compute({ run: ({ outputs }) => outputs.first }) },
      edges: [{ from: "first", to: "second" }],
    });
    const outcome = await runWorkflow({
      workflow: compileWorkflow(workflow),
      host: silentHost(),
      runState: emptyRunState(),
      command: "start",
      projectPath: process.cwd(),
      attemptIdPrefix: "warm",
    });
    const frame = canonicalJson({ type: "message", kind: "node.finished", payload: { output: { n: 1 }, nodeId: "first" } });
    JSON.parse(frame);
    sha256Hex(frame);
    return outcome.kind === "completed";
  } catch {
    return false;
  }
}
