// Runs one headless agent step in a `pi --mode rpc --no-session --no-extensions` child (Pi >= 1.6) in its
// own process group, with the bridge extension (./bridge/extension.ts, loaded with `-e`) as its only
// extension. The step's output is the value the model submits through the bridge's `workflow` tool and
// the node's own checks accept, never the reply text; a turn that ends without one is reminded at most
// SUBMISSION_REMINDERS_MAX times, then the attempt fails with `missingSubmission`. Prompts, replies and
// submissions are never logged; stderr is kept (bounded) only for error messages.
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import { headlessReminder, headlessStepPrompt } from "../engine/agent-output.js";
import { type AgentUpdate, type BridgeHandlers, BridgeServer, type SubmissionVerdict } from "./bridge/server.js";
import { PI_INSTALL_HINT, piStartupHint, resolvePiCommand, stopProcessGroup } from "./process.js";
import { encodeCommand, isRecord, JsonlReader, oversizedType, type RpcLine, type RpcRecord } from "./rpc.js";

export type { AgentUpdate, SubmissionVerdict };

/** How the step takes its output: the bridge's request, the node's checks, where updates go. */
export interface AgentSubmission extends BridgeHandlers {
  /** For the prompt's header: the workflow's name and the node's path. */
  workflow?: string;
  nodePath?: string;
  /** A text answer's limit (an agent step without a JSON expectedOutput). */
  maxChars?: number;
}

export interface AgentRequest {
  prompt: string;
  /** The JSON contract described to the model; absent: the answer is one JSON string. */
  expectedOutput?: string;
  /** The step's request ID and checks (the Pi executor refuses a request without one). */
  submission: AgentSubmission;
  timeoutMs: number;
  cwd: string;
  signal: AbortSignal;
  registerProcess(pid: number): Promise<void>;
  unregisterProcess(pid: number): Promise<void>;
}

/**
 * `output`: the accepted submission, already shaped by the node's checks (the Pi executor).
 * `text`: a reply text the engine shapes with the same checks (executors without a bridge, e.g. test fakes).
 */
export type AgentResult = { ok: true; output: unknown } | { ok: true; text: string } | { ok: false; code: string; message: string };

export interface AgentExecutor {
  runAgent(request: AgentRequest): Promise<AgentResult>;
}

export interface PiRpcExecutorOptions {
  /**
   * Default: $PI_WORKFLOWS_PI_BIN, then packages/pi-workflows/.tools/pi, then `pi` on PATH. A JavaScript
   * entry runs with $PI_WORKFLOWS_PI_NODE, else packages/pi-workflows/.tools/node22 (see process.ts).
   */
  piBinary?: string;
  /** Appended to PI_RPC_ARGS and the bridge's `-e`, e.g. `["-e", "/abs/ext.ts"]` (explicit extensions still load with `-ne`). */
  extraArgs?: string[];
  /**
   * Environment of the Pi child (default: process.env). PI_OFFLINE=1 is added unless set here. The child
   * shares the user's PI_CODING_AGENT_DIR (models.json, auth.json): the executor never sends the RPC
   * settings commands (set_auto_retry, set_auto_compaction, set_steering_mode), which Pi would persist
   * into that directory's settings.json for every later run.
   */
  env?: NodeJS.ProcessEnv;
}

/**
 * `--no-session`: nothing is written to the user's session directory. `--no-extensions`: no discovered,
 * configured or built-in extension (MCP servers, llama.cpp, codemode, tool search) runs in a headless step,
 * and nothing depends on whether the project is trusted (untrusted project extensions would be skipped
 * silently anyway). The bridge extension is added with an explicit `-e BRIDGE_EXTENSION_PATH`, which
 * `--no-extensions` still loads.
 */
export const PI_RPC_ARGS: readonly string[] = ["--mode", "rpc", "--no-session", "--no-extensions"];

/** The built bridge extension (dist/agent/bridge/extension.js next to this file), loaded with `-e`. */
export const BRIDGE_EXTENSION_PATH = fileURLToPath(new URL("./bridge/extension.js", import.meta.url));

/** Turns that end without an accepted submission are prompted again this often, at most; then the attempt fails. */
export const SUBMISSION_REMINDERS_MAX = 2;

/** A streamed assistant reply longer than this stops the step (`agentOutputTooLarge`): a runaway reply. */
const MAX_REPLY_BYTES = 256 * 1024;
const MAX_RECORD_BYTES = 8 * 1024 * 1024;
const STDERR_TAIL_BYTES = 16 * 1024;
const STDERR_MESSAGE_CHARS = 2000;
const ABORT_GRACE_MS = 1000;
const EOF_GRACE_MS = 500;
const MODEL_HINT =
  "Check the Pi model configuration (models.json/settings.json in PI_CODING_AGENT_DIR, provider API key, model name).";

const fail = (code: string, message: string): AgentResult => ({ ok: false, code, message });
const clip = (text: string, max = 1000) => (text.length > max ? `${text.slice(0, max)}…` : text);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export function createPiRpcExecutor(options: PiRpcExecutorOptions = {}): AgentExecutor {
  return { runAgent: (request) => runPi(options, request) };
}

interface AssistantSummary {
  stopReason: string;
  errorMessage?: string | undefined;
  text: string;
  tooLarge: boolean;
}

function summarizeAssistant(message: RpcRecord): AssistantSummary {
  const content = Array.isArray(message.content) ? message.content : [];
  let text = "";
  let bytes = 0;
  for (const part of content) {
    if (!isRecord(part) || part.type !== "text" || typeof part.text !== "string") continue;
    bytes += Buffer.byteLength(part.text);
    if (bytes > MAX_REPLY_BYTES) return { stopReason: String(message.stopReason), text: "", tooLarge: true };
    text += part.text;
  }
  const errorMessage = typeof message.errorMessage === "string" ? message.errorMessage : undefined;
  return { stopReason: String(message.stopReason), errorMessage, text: text.trim(), tooLarge: false };
}

/** Why a settled turn failed, or undefined when it ended normally (with or without a submission). */
function turnFailure(last: AssistantSummary | undefined): AgentResult | undefined {
  if (!last) return fail("agentFailed", `Pi finished the turn without an assistant reply. ${MODEL_HINT}`);
  if (last.tooLarge) return fail("agentOutputTooLarge", `The agent reply exceeded ${MAX_REPLY_BYTES} bytes.`);
  switch (last.stopReason) {
    case "stop":
    case "toolUse": // the turn stopped after a tool batch (a terminating tool result)
      return undefined;
    case "error":
      return fail("agentFailed", `The model request failed: ${clip(last.errorMessage ?? "unknown error")}. ${MODEL_HINT}`);
    case "length":
      return fail("agentFailed", "The model stopped at its output token limit; raise maxTokens for the model or ask for a shorter reply.");
    case "aborted":
      return fail("agentFailed", "Pi aborted the turn (an extension or Pi itself cancelled it).");
    default:
      return fail("agentFailed", `Pi ended the turn with stop reason '${clip(last.stopReason, 40)}'.`);
  }
}

class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  constructor(private readonly max: number) {}
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= this.max) this.size -= (this.chunks.shift() as Buffer).length;
  }
  text(maxChars: number): string {
    const all = Buffer.concat(this.chunks).toString("utf8").trim();
    return all.length > maxChars ? `…${all.slice(-maxChars)}` : all;
  }
}

function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `signal ${signal}` : `exit code ${code}`;
}

async function waitForSpawn(child: ChildProcess): Promise<Error | undefined> {
  return new Promise((resolve) => {
    child.once("spawn", () => resolve(undefined));
    child.once("error", (error) => resolve(error));
  });
}

async function runPi(options: PiRpcExecutorOptions, request: AgentRequest): Promise<AgentResult> {
  if (request.signal.aborted) return fail("agentAborted", "The agent run was cancelled before Pi started.");
  const submission = request.submission;
  if (!submission || typeof submission.requestId !== "string" || typeof submission.check !== "function") {
    return fail("agentFailed", "A headless agent step needs a submission contract (requestId and checks).");
  }
  if (!fs.existsSync(BRIDGE_EXTENSION_PATH)) {
    return fail("agentUnavailable", `The workflow bridge extension ${BRIDGE_EXTENSION_PATH} is missing; build the package (npm run build).`);
  }
  let bridge: BridgeServer;
  try {
    bridge = await BridgeServer.open(submission);
  } catch (error) {
    return fail("agentFailed", `The workflow bridge channel could not be opened (${clip((error as Error).message)}).`);
  }
  try {
    return await runPiChild(options, request, submission, bridge);
  } finally {
    await bridge.close();
  }
}

async function runPiChild(options: PiRpcExecutorOptions, request: AgentRequest, submission: AgentSubmission, bridge: BridgeServer): Promise<AgentResult> {
  const env: NodeJS.ProcessEnv = { PI_OFFLINE: "1", PI_SKIP_VERSION_CHECK: "1", PI_TELEMETRY: "0", ...(options.env ?? process.env), ...bridge.env() };
  const args = [...PI_RPC_ARGS, "-e", BRIDGE_EXTENSION_PATH, ...(options.extraArgs ?? [])];
  const resolved = resolvePiCommand(options.piBinary ?? env["PI_WORKFLOWS_PI_BIN"], env, args);
  if (!resolved.ok) return fail(resolved.code, resolved.message);
  const command = resolved.command;
  if (!fs.existsSync(request.cwd)) return fail("agentFailed", "The agent working directory does not exist.");
  const step = {
    requestId: submission.requestId,
    prompt: request.prompt,
    ...(request.expectedOutput !== undefined ? { expectedOutput: request.expectedOutput } : {}),
    ...(submission.workflow !== undefined ? { workflow: submission.workflow } : {}),
    ...(submission.nodePath !== undefined ? { nodePath: submission.nodePath } : {}),
    ...(submission.maxChars !== undefined ? { maxChars: submission.maxChars } : {}),
  };

  let child: ChildProcess;
  try {
    child = spawn(command.file, command.args, { cwd: request.cwd, env, detached: true, stdio: ["pipe", "pipe", "pipe"] });
  } catch (error) {
    return fail("piNotFound", `Pi could not be started (${(error as Error).message}). ${PI_INSTALL_HINT}`);
  }
  child.on("error", () => {}); // later errors (e.g. signalling a dead child) are not fatal
  const spawnError = await waitForSpawn(child);
  if (spawnError || child.pid === undefined) {
    const code = (spawnError as NodeJS.ErrnoException | undefined)?.code;
    if (code === "ENOENT" || code === "EACCES") return fail("piNotFound", `Pi could not be started (${code}). ${PI_INSTALL_HINT}`);
    return fail("agentFailed", `Pi could not be started (${clip(spawnError?.message ?? "no pid")}).`);
  }
  const pid = child.pid;
  const stdin = child.stdin!;
  stdin.on("error", () => {}); // EPIPE after Pi exited
  const send = (cmd: Record<string, unknown>) => {
    if (!stdin.destroyed && stdin.writable) stdin.write(encodeCommand(cmd));
  };

  let outcome: AgentResult | undefined;
  let resolveOutcome!: (result: AgentResult) => void;
  const settled = new Promise<AgentResult>((resolve) => (resolveOutcome = resolve));
  const settle = (result: AgentResult) => {
    if (outcome) return;
    outcome = result;
    resolveOutcome(result);
  };

  const stderr = new TailBuffer(STDERR_TAIL_BYTES);
  child.stderr!.on("data", (chunk: Buffer) => stderr.push(chunk));

  // Completion (pi-api.md §9): the prompt response only says the prompt was accepted (`disposition`);
  // the run is over at `agent_settled`, which Pi sends once per prompt after every retry, compaction and
  // queued continuation (`agent_end` comes once per low-level run, e.g. twice with an auto-retry). The
  // step's output is the bridge's accepted submission; the last assistant `message_end` says how a turn
  // without one ended (a failure, or a normal end that is reminded).
  let last: AssistantSummary | undefined;
  let streamedBytes = 0;
  let abortAcked = false;
  let onAbortAck: (() => void) | undefined;
  let reminders = 0;
  const onSettled = (aborted: boolean) => {
    if (outcome) return;
    if (bridge.accepted) {
      settle({ ok: true, output: bridge.accepted.output });
      return;
    }
    if (aborted) {
      // Not our abort (that settles first): Pi itself or an extension cancelled the run.
      settle(fail("agentFailed", "Pi aborted the turn (an extension or Pi itself cancelled it)."));
      return;
    }
    const failure = turnFailure(last);
    if (!failure && !bridge.connected) {
      // Without the bridge the model has no way to submit: say so instead of reminding it.
      const tail = stderr.text(STDERR_MESSAGE_CHARS);
      settle(fail("agentFailed", `The workflow bridge extension never connected to the runner, so the step cannot take a submission.${tail ? ` Pi stderr: ${tail}` : ""}`));
    } else if (failure) {
      settle(failure);
    } else if (reminders < SUBMISSION_REMINDERS_MAX) {
      reminders++;
      last = undefined;
      send({ id: `reminder-${reminders}`, type: "prompt", message: headlessReminder(step, reminders, SUBMISSION_REMINDERS_MAX, bridge.lastRejection) });
    } else {
      const rejected = bridge.lastRejection ? ` The last submission was rejected: ${clip(bridge.lastRejection)}` : "";
      settle(
        fail(
          "missingSubmission",
          `The agent ended ${reminders + 1} turns without an accepted submission through the workflow tool (${SUBMISSION_REMINDERS_MAX} reminders sent; ${bridge.submissions} submitted).${rejected}`,
        ),
      );
    }
  };
  const onPromptResponse = (record: RpcRecord) => {
    if (record.success !== true) {
      settle(fail("agentFailed", `Pi rejected the prompt: ${clip(String(record.error ?? "unknown error"))}. ${MODEL_HINT}`));
    }
    // The prompt never starts with `/` (it starts with "Workflow step:"), so no command handles it:
    // "started" (or "queued") means agent_settled follows.
  };

  const onRecord = (record: RpcRecord) => {
    switch (record.type) {
      case "response": {
        const id = typeof record.id === "string" ? record.id : "";
        if (id === "prompt" || id.startsWith("reminder-")) onPromptResponse(record);
        else if (id === "abort") {
          abortAcked = true;
          onAbortAck?.();
        }
        return;
      }
      case "agent_settled":
        onSettled(record.aborted === true);
        return;
      case "message_start":
        if (isRecord(record.message) && record.message.role === "assistant") streamedBytes = 0;
        return;
      case "message_update": {
        // Delta-only in Pi 1.6 (no cumulative `message`): count the text deltas to stop a runaway reply
        // before its message_end, which may never fit a record.
        const event = record.assistantMessageEvent;
        if (isRecord(event) && event.type === "text_delta" && typeof event.delta === "string") {
          streamedBytes += Buffer.byteLength(event.delta);
          if (streamedBytes > MAX_REPLY_BYTES) {
            settle(fail("agentOutputTooLarge", `The agent reply exceeded ${MAX_REPLY_BYTES} bytes.`));
          }
        }
        return;
      }
      case "message_end":
        if (isRecord(record.message) && record.message.role === "assistant") {
          last = summarizeAssistant(record.message);
          if (last.tooLarge) settle(fail("agentOutputTooLarge", `The agent reply exceeded ${MAX_REPLY_BYTES} bytes.`));
        }
        return;
      case "extension_ui_request":
        // Nobody can answer an extension dialog in a headless run: cancel it instead of blocking the turn.
        if (typeof record.id === "string" && ["select", "confirm", "input", "editor"].includes(String(record.method))) {
          send({ type: "extension_ui_response", id: record.id, cancelled: true });
        }
        return;
      default:
        return;
    }
  };
  const onLine = (line: RpcLine) => {
    if (line.kind === "json") {
      if (isRecord(line.value)) onRecord(line.value);
    } else if (line.kind === "oversized") {
      // agent_end, turn_end and the system message_end carry whole transcripts and may be dropped
      // harmlessly; an assistant message_end that does not fit is a reply over the bound.
      if (oversizedType(line.head) === "message_end" && line.head.includes('"role":"assistant"')) {
        last = { stopReason: "unknown", text: "", tooLarge: true };
      }
    }
  };
  const reader = new JsonlReader(MAX_RECORD_BYTES, onLine);
  child.stdout!.on("data", (chunk: Buffer) => reader.push(chunk));
  child.stdout!.on("end", () => reader.end());

  child.once("exit", (code, signal) => {
    if (bridge.accepted) {
      settle({ ok: true, output: bridge.accepted.output }); // the value was accepted before Pi went away
      return;
    }
    const tail = stderr.text(STDERR_MESSAGE_CHARS);
    const hint = piStartupHint(tail) ?? MODEL_HINT;
    settle(fail("agentFailed", `Pi exited before the turn completed (${describeExit(code, signal)}). ${hint}${tail ? ` Pi stderr: ${tail}` : ""}`));
  });
  const timeoutMs = Math.min(Math.max(0, Number.isFinite(request.timeoutMs) ? request.timeoutMs : 0), 2_147_483_647);
  const timer = setTimeout(() => settle(fail("agentTimedOut", `The agent did not finish within ${request.timeoutMs} ms.`)), timeoutMs);
  const onAbort = () => settle(fail("agentAborted", "The agent run was cancelled."));
  request.signal.addEventListener("abort", onAbort, { once: true });

  const running = () => child.exitCode === null && child.signalCode === null;
  const exited = new Promise<void>((resolve) => (running() ? child.once("exit", () => resolve()) : resolve()));
  let stopping: Promise<void> | undefined;
  const stop = (result: AgentResult | undefined) =>
    (stopping ??= (async () => {
      clearTimeout(timer);
      request.signal.removeEventListener("abort", onAbort);
      const interrupt = result && !result.ok && ["agentTimedOut", "agentAborted", "agentOutputTooLarge"].includes(result.code);
      if (interrupt && running()) {
        send({ id: "abort", type: "abort" }); // let Pi cancel the model call and its tools first
        if (!abortAcked) await Promise.race([new Promise<void>((resolve) => (onAbortAck = resolve)), exited, sleep(ABORT_GRACE_MS)]);
      }
      stdin.end(); // EOF asks Pi to shut down cleanly; the group is signalled anyway
      if (running()) await Promise.race([exited, sleep(EOF_GRACE_MS)]);
      await stopProcessGroup(child);
    })());

  // Register before anything is sent. If the run ends (timeout, abort, Pi exit) while registration is
  // still pending, the group is stopped at once, but unregistering still waits for registration.
  const registration = request.registerProcess(pid).then(
    () => ({ registered: true as const }),
    (error: unknown) => ({ registered: false as const, error }),
  );
  const first = await Promise.race([registration, settled]);
  if ("registered" in first && first.registered) {
    send({ id: "prompt", type: "prompt", message: headlessStepPrompt(step) });
  }
  if (!("registered" in first)) await stop(first);
  const registered = await registration;
  if (!registered.registered) {
    await stop(undefined);
    await request.unregisterProcess(pid).catch(() => {}); // in case registration half-succeeded
    throw registered.error;
  }
  const result = await settled;
  await stop(result);
  await request.unregisterProcess(pid);
  return result;
}
