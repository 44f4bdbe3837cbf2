// One run generation: `runner.ready` while the workflow loads, the one command, then the
// engine over the channel. The warm-up rehearses exactly this path in memory (warmup.ts), so
// a launched run starts on compiled code.
import { sha256Hex } from "../canonical.js";
import type { CompiledWorkflow } from "../compile.js";
import { runWorkflow, type RunCommand, type RunOutcome } from "../engine.js";
import type { AgentExecutor, RunState } from "../engine/host.js";
import { LiveSettings } from "../settings.js";
import { channelHost } from "./channel-host.js";
import { ProtocolError } from "./channel.js";
import { type ContentRef, readContent } from "./content.js";
import type { Launch, RunnerSession } from "./session.js";

const COMMANDS: readonly RunCommand[] = ["start", "resume", "continue", "restart"];

export interface GenerationOptions {
  /** Made once the command is read: before it, a stop needs no workflow code to end. */
  signal?: () => AbortSignal;
  /** Loads the headless agent executor on first use. */
  loadAgentExecutor?: () => Promise<AgentExecutor>;
}

async function readRunState(session: RunnerSession, payload: Record<string, unknown>): Promise<RunState> {
  if (payload.runState) return payload.runState as RunState;
  const ref = payload.runStateRef as ContentRef | undefined;
  if (!ref) throw new ProtocolError("the command payload has neither runState nor runStateRef");
  const parsed = JSON.parse((await readContent(session, ref)).toString("utf8")) as RunState | { runState: RunState };
  return "runState" in parsed && parsed.runState ? parsed.runState : (parsed as RunState);
}

/**
 * How long a runner loads its workflow after `runner.ready` when the launch names no deadline
 * (the server's ready deadline no longer applies then, so the launch carries it on): an
 * import that never settles ends the runner, and the run parks. A load that blocks the event
 * loop outright is caught by the server's liveness pings.
 */
export const LOAD_MS_DEFAULT = 10_000;
/** The longest load deadline a launch may name (the server's ready deadline is bounded too). */
export const LOAD_MS_MAX = 10 * 60_000;

/** The load deadline a launch names, if it is usable; else the default. */
export function loadDeadlineMs(launch: Launch): number {
  const named = launch.loadDeadlineMs;
  return typeof named === "number" && Number.isSafeInteger(named) && named > 0 ? Math.min(named, LOAD_MS_MAX) : LOAD_MS_DEFAULT;
}

export class LoadTimeoutError extends Error {}

/**
 * Send `runner.ready` at once and load meanwhile: the server records it and prepares the
 * command while the workflow's module loads, so the command is waiting when the load ends.
 * Ready says only that the process speaks the protocol; no workflow code runs before the
 * load has checked its sources, and nothing but the command is read before it is done.
 */
export async function readyWhileLoading<T>(session: RunnerSession, load: () => Promise<T>, loadMsMax = loadDeadlineMs(session.launch)): Promise<T> {
  const ready = session.send("runner.ready", {});
  ready.catch(() => undefined); // awaited below, after the load
  // Let the frame leave first: a load runs as one chain of promise jobs, and the socket's
  // write waits for the next tick, which would come only after the whole load.
  await new Promise((resolve) => setImmediate(resolve));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new LoadTimeoutError(`the workflow did not load within ${loadMsMax} ms`)), loadMsMax);
  });
  try {
    const loaded = await Promise.race([load(), late]);
    await ready;
    return loaded;
  } finally {
    clearTimeout(timer);
  }
}

/** Take the command that follows the `runner.ready` answer and run the workflow. */
export async function runGeneration(session: RunnerSession, workflow: CompiledWorkflow, options: GenerationOptions): Promise<RunOutcome> {
  const { launch } = session;
  const frame = await session.readCommand();
  const command = frame.command as RunCommand;
  if (!COMMANDS.includes(command)) throw new ProtocolError(`unknown command ${JSON.stringify(frame.command)}`);
  const runState = await readRunState(session, (frame.payload ?? {}) as Record<string, unknown>);
  const signal = options.signal?.();
  // Settings changed while the run goes on reach the runner in answers to node starts.
  const settings = new LiveSettings(runState.settings);
  session.onSettings = (version) => settings.offer(version);
  return runWorkflow({
    workflow,
    host: channelHost(session),
    runState,
    command,
    projectPath: launch.projectPath,
    attemptIdPrefix: "a" + sha256Hex(`${launch.runId}\0${launch.generation}\0${launch.runnerEpoch}`).slice(0, 20),
    loadAgentExecutor: options.loadAgentExecutor,
    signal,
    settings,
  });
}
