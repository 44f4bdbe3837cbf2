// Run one shell node command in its own process group with bounded output and a timeout.
import path from "node:path";
import type { ShellReceipt, ShellSpec } from "../types.js";
import { importModule } from "../module-import.js";

export const DEFAULT_MAX_OUTPUT_BYTES = 1_000_000;
export const DEFAULT_SHELL_TIMEOUT_MS = 10 * 60_000;
const KILL_GRACE_MS = 2_000;

/** The spec with defaults filled in: the effect request that is fingerprinted. */
export function normalizeShellSpec(spec: ShellSpec, projectPath: string): Required<ShellSpec> {
  if (!spec || typeof spec.command !== "string" || spec.command === "") throw new Error("shell exec must return { command }");
  const args = spec.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) throw new Error("shell args must be strings");
  const timeoutMs = spec.timeoutMs ?? DEFAULT_SHELL_TIMEOUT_MS;
  const maxOutputBytes = spec.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  for (const [name, value] of [["timeoutMs", timeoutMs], ["maxOutputBytes", maxOutputBytes]] as const) {
    if (!Number.isInteger(value) || value <= 0) throw new Error(`shell ${name} must be a positive integer`);
  }
  return {
    command: spec.command,
    args: [...args],
    cwd: path.resolve(projectPath, spec.cwd ?? "."),
    timeoutMs,
    allowNonZeroExit: spec.allowNonZeroExit ?? false,
    maxOutputBytes,
  };
}

class BoundedBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly limit: number) {}
  push(chunk: Buffer) {
    const room = this.limit - this.size;
    if (room <= 0) {
      this.truncated = this.truncated || chunk.length > 0;
      return;
    }
    if (chunk.length > room) this.truncated = true;
    const kept = chunk.subarray(0, room);
    this.chunks.push(kept);
    this.size += kept.length;
  }
  text(): string {
    return Buffer.concat(this.chunks).toString("utf8");
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals) {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is already gone
  }
}

export interface ShellHooks {
  /** Added to the runner's environment (e.g. the effect key an idempotent command passes on). */
  env?: Record<string, string>;
  signal: AbortSignal;
  onSpawn(pid: number): Promise<void>;
  onGroupGone(pid: number): Promise<void>;
}

/** Spawn, capture, and always leave no process of the group behind. Rejects only if spawning fails. */
export async function runShell(spec: Required<ShellSpec>, hooks: ShellHooks): Promise<ShellReceipt> {
  // Loaded by the first shell step only: most runs never start a process, and every builtin
  // a runner imports at start costs CPU in each runner process.
  const { spawn } = await importModule<typeof import("node:child_process")>("node:child_process");
  const started = Date.now();
  const child = spawn(spec.command, spec.args, {
    cwd: spec.cwd,
    env: hooks.env ? { ...process.env, ...hooks.env } : process.env,
    detached: true, // own process group, so a timeout can stop every descendant
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdout = new BoundedBuffer(spec.maxOutputBytes);
  const stderr = new BoundedBuffer(spec.maxOutputBytes);
  child.stdout!.on("data", (chunk: Buffer) => stdout.push(chunk));
  child.stderr!.on("data", (chunk: Buffer) => stderr.push(chunk));

  const spawned = new Promise<void>((resolve, reject) => {
    child.once("spawn", resolve);
    child.once("error", reject);
  });
  await spawned;
  const pid = child.pid!;
  let timedOut = false;
  let killTimer: NodeJS.Timeout | undefined;
  const stop = () => {
    signalGroup(pid, "SIGTERM");
    killTimer ??= setTimeout(() => signalGroup(pid, "SIGKILL"), KILL_GRACE_MS);
  };
  const timeout = setTimeout(() => {
    timedOut = true;
    stop();
  }, spec.timeoutMs);
  hooks.signal.addEventListener("abort", stop, { once: true });
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", () => signalGroup(pid, "SIGKILL")); // descendants must not outlive the node
    child.once("close", (code, signal) => resolve({ code, signal }));
  });
  try {
    await hooks.onSpawn(pid);
  } catch (error) {
    signalGroup(pid, "SIGKILL");
    await closed;
    throw error;
  }
  const exit = await closed;
  clearTimeout(timeout);
  if (killTimer) clearTimeout(killTimer);
  hooks.signal.removeEventListener("abort", stop);
  await hooks.onGroupGone(pid);
  return {
    command: spec.command,
    args: spec.args,
    cwd: spec.cwd,
    exitCode: exit.code,
    signal: exit.signal,
    durationMs: Date.now() - started,
    timedOut,
    stdout: stdout.text(),
    stderr: stderr.text(),
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
  };
}

/** A receipt that fits in `limitBytes` of JSON: long streams keep their head and are flagged. */
export function fitReceipt(receipt: ShellReceipt, limitBytes: number): ShellReceipt {
  const size = (value: ShellReceipt) => Buffer.byteLength(JSON.stringify(value), "utf8");
  if (size(receipt) <= limitBytes) return receipt;
  const cut = (text: string, bytes: number) =>
    Buffer.from(text, "utf8").subarray(0, bytes).toString("utf8").replace(/\uFFFD+$/, "");
  let perStream = Math.floor((limitBytes - 4096) / 2);
  for (;;) {
    const fitted: ShellReceipt = {
      ...receipt,
      stdout: cut(receipt.stdout, perStream),
      stderr: cut(receipt.stderr, perStream),
      stdoutTruncated: receipt.stdoutTruncated || Buffer.byteLength(receipt.stdout) > perStream,
      stderrTruncated: receipt.stderrTruncated || Buffer.byteLength(receipt.stderr) > perStream,
    };
    // JSON escaping can make text longer than its bytes: shrink until it fits.
    if (size(fitted) <= limitBytes || perStream === 0) return fitted;
    perStream = Math.floor(perStream * 0.7);
  }
}
