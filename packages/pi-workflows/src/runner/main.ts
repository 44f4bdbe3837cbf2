// The runner child's work (its entry is runner-main.ts): speaks docs/RUNNER-PROTOCOL.md on
// fd 3, executes one run generation, and returns the exit code: 0 done, 75 claim lost, 76
// protocol or launch error, 70 anything else.
import { fileURLToPath } from "node:url";
import type { AgentExecutor } from "../engine/host.js";
import { nodeError } from "../engine/limits.js";
import { WorkflowError } from "../errors.js";
import { importModule } from "../module-import.js";
import { loadWorkflowFile, type LoadedWorkflow, SourceChangedError } from "../loader.js";
import { FrameChannel, ProtocolError } from "./channel.js";
import { dropServerTunables } from "./environment.js";
import { readyWhileLoading, runGeneration } from "./generation.js";
import { type Launch, parseLaunch, RunnerSession } from "./session.js";
import { warmUpUnlessLaunched } from "./warmup.js";
import { parseWorkflowSource, verifySourceOnDisk, type WorkflowSource } from "../source-identity.js";

const EXIT_PROTOCOL = 76;
const EXIT_INTERNAL = 70;

function log(message: string) {
  process.stderr.write(`pi-workflows runner: ${message}\n`);
}

/** Imported only when a headless agent step runs (`executorUrl`: dist/agent/executor.js). */
function lazyAgentExecutor(executorUrl: URL, projectPath: string): () => Promise<AgentExecutor> {
  let loading: Promise<AgentExecutor> | undefined;
  return () =>
    (loading ??= (async () => {
      let module: { createPiRpcExecutor?: (options: unknown) => AgentExecutor | Promise<AgentExecutor> };
      try {
        module = await importModule(executorUrl.href);
      } catch (error) {
        throw new Error(`the headless agent executor ${fileURLToPath(executorUrl)} is unavailable: ${(error as Error).message}`);
      }
      if (typeof module.createPiRpcExecutor !== "function") {
        throw new Error(`${fileURLToPath(executorUrl)} does not export createPiRpcExecutor`);
      }
      return module.createPiRpcExecutor({ cwd: projectPath });
    })());
}

/** Take the command (it always follows the ready answer), park, leave: no workflow code ran. */
async function parkSourceChanged(session: RunnerSession, why: string): Promise<void> {
  log(`workflow source changed: ${why}`);
  await session.readCommand();
  await session.send("run.parked", { reason: "workflowSourceChanged" });
}

type Verified = { loaded: LoadedWorkflow } | { changed: string } | { loadError: string };

/**
 * Load the saved workflow, refusing any other sources before their code runs (the loader
 * compares what it would import with the saved identity). A load that fails is told apart
 * from changed sources by hashing the saved files: a missing or edited file parks the run,
 * only an unchanged source that no longer loads fails it.
 */
async function loadVerified(launch: Launch, saved: WorkflowSource): Promise<Verified> {
  let loaded: LoadedWorkflow;
  try {
    loaded = await loadWorkflowFile(saved.root.path, undefined, saved);
  } catch (error) {
    if (error instanceof SourceChangedError) return { changed: (await verifySourceOnDisk(saved)) ?? error.message };
    if (!(error instanceof WorkflowError)) throw error;
    const onDisk = await verifySourceOnDisk(saved);
    return onDisk ? { changed: onDisk } : { loadError: error.message };
  }
  if (launch.definitionDigest && loaded.compiled.definitionDigest !== launch.definitionDigest) {
    return { changed: `definition digest is ${loaded.compiled.definitionDigest}, saved ${launch.definitionDigest}` };
  }
  return { loaded };
}

/** The unchanged source no longer loads (e.g. a missing external package): fail the run clearly. */
async function failUnloadable(session: RunnerSession, why: string): Promise<void> {
  log(`workflow does not load: ${why}`);
  await session.readCommand();
  await session.send("run.finished", { outcome: "failed", error: nodeError("invalidDefinition", why) });
}

async function execute(session: RunnerSession, launch: Launch, loaded: LoadedWorkflow, executorUrl: URL): Promise<void> {
  const outcome = await runGeneration(session, loaded.compiled, {
    // From the command on, SIGTERM stops the workflow between steps; before it, the default kill.
    signal: () => {
      const controller = new AbortController();
      process.once("SIGTERM", () => controller.abort(new Error("runner stopped (SIGTERM)")));
      return controller.signal;
    },
    loadAgentExecutor: lazyAgentExecutor(executorUrl, launch.projectPath),
  });
  // A run that completed or now waits is told by the store; only a stop or a failure leaves
  // a line here (the server creates the capture file at its first byte).
  if (outcome.kind === "failed" || outcome.kind === "stopped") {
    log(`run ${launch.runId} generation ${launch.generation}: ${outcome.kind}`);
  }
}

/** Keep in step with `NO_WARM_UP_FLAG` in the server's src/server/runners/pool.rs. */
const NO_WARM_UP_FLAG = "--no-warm-up";

/**
 * What both runner entries run (runner-main.ts, runner-snapshot.ts): one generation, with the
 * lazily loaded parts under `distUrl` (the package's dist/). The server's pool passes
 * NO_WARM_UP_FLAG while runs are running: a rehearsal's CPU would go to them.
 */
export function runnerMainFromCommandLine(distUrl: URL): Promise<number> {
  return runnerMain({
    executorUrl: new URL("./agent/executor.js", distUrl),
    warmUp: !process.argv.includes(NO_WARM_UP_FLAG),
  });
}

/** Run one generation; the entry passes where the lazily loaded parts live. */
export async function runnerMain({ executorUrl, warmUp = true }: { executorUrl: URL; warmUp?: boolean }): Promise<number> {
  // Workflow code must never write to stdout as if it were protocol (it is only a log).
  for (const method of ["log", "info", "debug"] as const) console[method] = console.error;
  // Read by glibc when this process started; its steps' processes must not inherit them.
  dropServerTunables();
  const channel = FrameChannel.fromFd(3);
  let session: RunnerSession | undefined;
  try {
    // A warm runner left waiting rehearses its run's path meanwhile; one taken at once does
    // not, nor one the pool started beside running runs (`warmUp` false).
    const launchFrame = channel.readFrame();
    if (warmUp) await warmUpUnlessLaunched(launchFrame);
    const launch = parseLaunch(await launchFrame);
    // A warm runner was started before its run was known: move into the run's project.
    try {
      process.chdir(launch.projectPath);
    } catch {
      // No usable project directory: steps that need one fail with their own error.
    }
    const saved = parseWorkflowSource(launch.workflowSource);
    if (!saved) throw new ProtocolError("the launch envelope has no usable workflowSource.root");
    session = new RunnerSession(channel, launch);
    const verified = await readyWhileLoading(session, () => loadVerified(launch, saved));
    if ("changed" in verified) await parkSourceChanged(session, verified.changed);
    else if ("loadError" in verified) await failUnloadable(session, verified.loadError);
    else await execute(session, launch, verified.loaded, executorUrl);
    await session.send("runner.exiting", {});
    return 0;
  } catch (error) {
    log((error as Error)?.stack ?? String(error));
    if (session?.hasSent) await session.send("runner.exiting", {}).catch(() => undefined);
    return error instanceof ProtocolError ? EXIT_PROTOCOL : EXIT_INTERNAL;
  } finally {
    channel.close();
  }
}
