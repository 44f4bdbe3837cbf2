// A waiting runner's warm-up. V8 compiles a function when it is first called, so a runner's
// first launch pays for compiling every function on its path: the frame reader and writer,
// the session, the loader's in-memory import, compile, the engine loop, the channel host. A
// warm runner whose launch is not already waiting pays that meanwhile, by
// rehearsing a whole generation: an in-memory peer plays the server (launch, answers, the
// command), a two-step workflow is loaded from memory the way a real workflow's bundle is
// (as a function, with the SDK a real workflow gets) while `runner.ready` is answered, and
// runGeneration runs it exactly as a launched run does.
//
// Invariant: the warm-up touches no file, no process channel and no state a run could see
// (its module is built in memory and is no workflow's bundle); a failed or slow warm-up only
// leaves the code cold.
import { Duplex } from "node:stream";
import { canRunFunctionForm, processSdk, runFunctionForm } from "../function-form.js";
import { compileDefaultExport, importVerified } from "../loader.js";
import type { compute } from "../nodes.js";
import type { defineWorkflow } from "../define.js";
import type { RunState } from "../engine/host.js";
import { SDK_URL } from "../runtime-url.js";
import { FrameChannel } from "./channel.js";
import { readyWhileLoading, runGeneration } from "./generation.js";
import { COMMAND_SCHEMA, LAUNCH_SCHEMA, parseLaunch, RESPONSE_SCHEMA, RunnerSession } from "./session.js";

/** The longest a warm-up may hold a runner before it takes its launch (it takes ~20 ms of CPU). */
export const WARM_UP_MS_MAX = 2_000;

const WARM_UP_ID = "warm-up";

/** The SDK parts the rehearsal's workflow uses. */
interface WarmUpSdk {
  compute: typeof compute;
  defineWorkflow: typeof defineWorkflow;
}

/**
 * The rehearsal's workflow. Self-contained (its source is also the rehearsal module's, see
 * warmUpCode): it may use nothing but its argument.
 */
function warmUpWorkflow(sdk: WarmUpSdk) {
  return sdk.defineWorkflow({
    name: "warm-up",
    startAt: "first",
    nodes: {
      first: sdk.compute({ run: () => ({ n: 1 }) }),
      second: sdk.compute({ run: ({ outputs }) => outputs.first }),
    },
    edges: [{ from: "first", to: "second" }],
  });
}

/** The rehearsal's module as a function-form bundle would have it (function-form.ts). */
function warmUpFunctionCode(): string {
  return [
    '"use strict";',
    "// pi-workflows runner warm-up (never a workflow's bundle)",
    `const sdk = require(${JSON.stringify(SDK_URL)});`,
    `module.exports = { default: (${warmUpWorkflow.toString()})(sdk) };`,
  ].join("\n");
}

/** The rehearsal's module, as a bundle would import it (the SDK by its URL). */
function warmUpCode(): string {
  return [
    "// pi-workflows runner warm-up (never a workflow's bundle)",
    `import * as sdk from ${JSON.stringify(SDK_URL)};`,
    `export default (${warmUpWorkflow.toString()})(sdk);`,
  ].join("\n");
}

/** Loads the rehearsal's module. */
export type WarmUpLoader = () => Promise<Record<string, unknown>>;

/** The rehearsal's module run as a function with `sdk`: the path a function-form bundle takes. */
export function warmUpAsFunction(sdk: WarmUpSdk): WarmUpLoader {
  return async () => runFunctionForm(warmUpFunctionCode(), sdk);
}

/** The rehearsal's module imported as an ES module: the path of a bundle without a function form. */
export const warmUpAsModule: WarmUpLoader = () => importVerified(warmUpCode());

/** The path a launched run's bundle most likely takes here. */
async function warmUpLoader(): Promise<WarmUpLoader> {
  return canRunFunctionForm() ? warmUpAsFunction((await processSdk()) as WarmUpSdk) : warmUpAsModule;
}

function emptyRunState(): RunState {
  return {
    schema: "pi-workflows.run-state.v1",
    runId: WARM_UP_ID,
    workflowName: WARM_UP_ID,
    revision: 1,
    input: {},
    attempts: [],
    effects: [],
    interaction: null,
    continuation: null,
  };
}

/** The rehearsal's two ends, the runner's and the server's: joined, what one writes the other reads. */
export type EndPair = () => [Duplex, Duplex] | Promise<[Duplex, Duplex]>;

/** Two in-memory streams joined end to end: a waiting runner's rehearsal opens no socket. */
export function memoryPair(): [Duplex, Duplex] {
  const ends: Duplex[] = [];
  const end = (peer: () => Duplex) =>
    new Duplex({
      read() {},
      write(chunk, _encoding, callback) {
        peer().push(chunk);
        callback();
      },
      final(callback) {
        peer().push(null);
        callback();
      },
    });
  ends.push(end(() => ends[1]!), end(() => ends[0]!));
  return [ends[0]!, ends[1]!];
}

/** The server's part: the launch, an accepted answer to every message, the command after ready. */
async function playServer(server: FrameChannel): Promise<void> {
  await server.writeFrame({
    schema: LAUNCH_SCHEMA,
    runId: WARM_UP_ID,
    generation: 1,
    runnerEpoch: WARM_UP_ID,
    projectPath: process.cwd(),
    workflowSource: null,
    definitionDigest: "",
    inputHash: "",
    protocolVersion: 1,
  });
  let revision = 1;
  for (;;) {
    const message = await server.readFrame();
    const results = (message.payload as { results?: unknown[] } | undefined)?.results;
    // A `nodes.finished` advances the revision by one per result, any other change by one.
    if (typeof message.expectedRevision === "number") revision = message.expectedRevision + (results?.length ?? 1);
    await server.writeFrame({ schema: RESPONSE_SCHEMA, messageId: message.messageId, outcome: "accepted", revision });
    if (message.kind === "runner.ready") {
      await server.writeFrame({ schema: COMMAND_SCHEMA, command: "start", payload: { runState: emptyRunState() } });
    }
    if (message.kind === "runner.exiting") return;
  }
}

const claimLost = (): never => {
  throw new Error("the warm-up's peer answered claimLost");
};

async function rehearse(loadModule: WarmUpLoader, pair: EndPair): Promise<boolean> {
  const [runnerEnd, serverEnd] = await pair();
  const runner = new FrameChannel(runnerEnd);
  const server = new FrameChannel(serverEnd);
  const serving = playServer(server);
  serving.catch(() => undefined); // a runner-side failure closes the pair; awaited below otherwise
  try {
    const launch = parseLaunch(await runner.readFrame());
    const session = new RunnerSession(runner, launch, claimLost);
    const load = async () => compileDefaultExport(WARM_UP_ID, await loadModule());
    const { compiled } = await readyWhileLoading(session, load);
    const outcome = await runGeneration(session, compiled, {});
    await session.send("runner.exiting", {});
    await serving;
    return outcome.kind === "completed";
  } finally {
    runner.close();
    server.close();
  }
}

/**
 * Rehearse unless the launch is already waiting (the runner was started for a run, or taken
 * while it was still starting up): then its run would wait for the rehearsal, and pays a few
 * ms of compiling instead. Whether a rehearsal ran.
 */
export async function warmUpUnlessLaunched(launch: Promise<unknown>): Promise<boolean> {
  // A launch already in the channel is read in the event loop's next poll phase (the socket
  // starts reading on a later tick), which comes before the next-but-one check phase.
  const waited = new Promise<boolean>((resolve) => setImmediate(() => setImmediate(() => resolve(true))));
  const arrived = launch.then(
    () => false,
    () => false,
  );
  if (!(await Promise.race([waited, arrived]))) return false;
  await warmUp(await warmUpLoader());
  return true;
}

/** Rehearse one generation over `pair`, within WARM_UP_MS_MAX; whether it completed. */
export async function warmUp(loadModule: WarmUpLoader, pair: EndPair = memoryPair): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), WARM_UP_MS_MAX);
  });
  try {
    return await Promise.race([rehearse(loadModule, pair), late]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}
