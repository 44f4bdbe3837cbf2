// Runs one agent prompt in a headless `pi --mode rpc --no-session` child in its own process group.
// Prompts and replies are never logged; stderr is kept (bounded) only for error messages.
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import { PI_INSTALL_HINT, resolvePiCommand, stopProcessGroup } from "./process.js";
import { encodeCommand, isRecord, JsonlReader, oversizedType, type RpcLine, type RpcRecord } from "./rpc.js";

export interface AgentRequest {
  prompt: string;
  expectedOutput?: string;
  timeoutMs: number;
  cwd: string;
  signal: AbortSignal;
  registerProcess(pid: number): Promise<void>;
  unregisterProcess(pid: number): Promise<void>;
}

export type AgentResult = { ok: true; text: string } | { ok: false; code: string; message: string };

export interface AgentExecutor {
  runAgent(request: AgentRequest): Promise<AgentResult>;
}

export interface PiRpcExecutorOptions {
  /** Default: $PI_WORKFLOWS_PI_BIN, then packages/pi-workflows/.tools/pi, then `pi` on PATH. */
  piBinary?: string;
  extraArgs?: string[];
  /** Environment of the Pi child (default: process.env). PI_OFFLINE=1 is added unless set here. */
  env?: NodeJS.ProcessEnv;
}

const MAX_REPLY_BYTES = 256 * 1024;
const MAX_RECORD_BYTES = 8 * 1024 * 1024;
const STDERR_TAIL_BYTES = 16 * 1024;
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

function buildPrompt(prompt: string, expectedOutput?: string): string {
  if (expectedOutput === undefined || expectedOutput.trim() === "") return prompt;
  return `${prompt}\n\nExpected output: ${expectedOutput}\nEnd with a final reply that contains only this output, with no other text.`;
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

function finalResult(last: AssistantSummary | undefined): AgentResult {
  if (!last) return fail("agentFailed", `Pi finished the turn without an assistant reply. ${MODEL_HINT}`);
  if (last.tooLarge) return fail("agentOutputTooLarge", `The agent reply exceeded ${MAX_REPLY_BYTES} bytes.`);
  switch (last.stopReason) {
    case "stop":
      return { ok: true, text: last.text };
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
  const env: NodeJS.ProcessEnv = { PI_OFFLINE: "1", PI_SKIP_VERSION_CHECK: "1", PI_TELEMETRY: "0", ...(options.env ?? process.env) };
  const args = ["--mode", "rpc", "--no-session", ...(options.extraArgs ?? [])];
  const command = resolvePiCommand(options.piBinary ?? env["PI_WORKFLOWS_PI_BIN"], env, args);
  if (!command) return fail("piNotFound", `The Pi coding agent was not found. ${PI_INSTALL_HINT}`);
  if (!fs.existsSync(request.cwd)) return fail("agentFailed", "The agent working directory does not exist.");

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

  // Turn tracking. After each agent_end a get_state round trip confirms Pi is idle: auto-retry and
  // compaction announce themselves (auto_retry_start/agent_start/compaction_start) before that response.
  let last: AssistantSummary | undefined;
  let streamedBytes = 0;
  let idleCheck = 0;
  let abortAcked = false;
  let onAbortAck: (() => void) | undefined;
  const checkIdle = (token: number) => {
    if (token === idleCheck && !outcome) send({ id: `state-${token}`, type: "get_state" });
  };
  const onAgentEnd = () => {
    const token = ++idleCheck;
    checkIdle(token);
  };
  const confirmed = new Set<number>();
  const onState = (token: number, data: unknown) => {
    if (token !== idleCheck || outcome) return;
    if (isRecord(data) && (data.isStreaming === true || data.isCompacting === true)) {
      setTimeout(() => checkIdle(token), 100);
      return;
    }
    if (last?.stopReason === "error" && !confirmed.has(token)) {
      confirmed.add(token); // a failed call may still be followed by a retry or compaction: look twice
      setTimeout(() => checkIdle(token), 300);
      return;
    }
    settle(finalResult(last));
  };

  const onRecord = (record: RpcRecord) => {
    switch (record.type) {
      case "response": {
        const id = typeof record.id === "string" ? record.id : "";
        if (id === "prompt" && record.success !== true) {
          settle(fail("agentFailed", `Pi rejected the prompt: ${clip(String(record.error ?? "unknown error"))}. ${MODEL_HINT}`));
        } else if (id.startsWith("state-")) {
          onState(Number(id.slice(6)), record.data);
        } else if (id === "abort") {
          abortAcked = true;
          onAbortAck?.();
        }
        return;
      }
      case "agent_start":
      case "auto_retry_start":
      case "compaction_start":
        idleCheck++; // a pending idle check is stale
        return;
      case "agent_end":
        onAgentEnd();
        return;
      case "message_start":
        if (isRecord(record.message) && record.message.role === "assistant") streamedBytes = 0;
        return;
      case "message_update": {
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
      const type = oversizedType(line.head);
      if (type === "agent_end") onAgentEnd();
      if (type === "message_end" && line.head.includes('"role":"assistant"')) {
        last = { stopReason: "unknown", text: "", tooLarge: true };
      }
    }
  };
  const reader = new JsonlReader(MAX_RECORD_BYTES, onLine);
  child.stdout!.on("data", (chunk: Buffer) => reader.push(chunk));
  child.stdout!.on("end", () => reader.end());

  child.once("exit", (code, signal) => {
    const tail = stderr.text(2000);
    settle(fail("agentFailed", `Pi exited before the turn completed (${describeExit(code, signal)}). ${MODEL_HINT}${tail ? ` Pi stderr: ${tail}` : ""}`));
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
    send({ id: "prompt", type: "prompt", message: buildPrompt(request.prompt, request.expectedOutput) });
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
