// A tiny server side of the runner protocol: spawns dist/runner-main.js with a socketpair on fd 3,
// sends the launch envelope and one command, and answers every message (recording them all).
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import path from "node:path";
import { canonicalJson } from "../../dist/index.js";
import { PACKAGE_DIR } from "./fixtures.mjs";

export function launchFor({ runId = "run-e2e", generation = 1, runnerEpoch = "epoch-1", projectPath, loaded }) {
  return {
    schema: "pi-workflows.worker-launch.v1",
    runId,
    generation,
    runnerEpoch,
    projectPath,
    workflowSource: loaded.source,
    definitionDigest: loaded.compiled.definitionDigest,
    inputHash: "sha256:unused",
    protocolVersion: 1,
  };
}

export function runState({ runId = "run-e2e", input = {}, attempts = [], effects = [], interaction = null } = {}) {
  return { schema: "pi-workflows.run-state.v1", runId, workflowName: "test", revision: 1, input, attempts, effects, interaction, continuation: null };
}

/**
 * Run one runner child to its exit. `command` is the command name; `payload` the command payload.
 * `answer(frame)` may return a custom response (or undefined for the default).
 */
export function runRunner({ launch, command = "start", payload, answer = () => undefined, content, env = {}, cwd, nodeArgs, launchDelayMs, signal }) {
  // `nodeArgs`: how node starts the runner (default: the plain entry; a test may pass a snapshot's).
  // `launchDelayMs`: the launch is sent that late, as to a warm runner left waiting.
  // `signal`: kills the runner when aborted (a test that timed out leaves no process behind).
  const child = spawn(process.execPath, nodeArgs ?? [path.join(PACKAGE_DIR, "dist/runner-main.js")], {
    cwd: cwd ?? launch.projectPath,
    stdio: ["ignore", "pipe", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  signal?.addEventListener("abort", () => child.kill("SIGKILL"), { once: true });
  const channel = child.stdio[3];
  const messages = [];
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const write = (value) => channel.write(canonicalJson(value) + "\n");
  const effects = new Map();
  let buffered = "";
  channel.on("data", (chunk) => {
    buffered += chunk;
    for (let index = buffered.indexOf("\n"); index >= 0; index = buffered.indexOf("\n")) {
      const line = buffered.slice(0, index);
      buffered = buffered.slice(index + 1);
      const frame = JSON.parse(line);
      messages.push(frame);
      const custom = answer(frame, messages);
      const response = custom ?? defaultAnswer(frame, effects, content);
      write({ schema: "pi-workflows.runner-response.v1", messageId: frame.messageId, revision: messages.length, ...response });
      if (frame.kind === "runner.ready" && response.outcome === "accepted") {
        write({ schema: "pi-workflows.runner-command.v1", command, payload });
      }
    }
  });
  channel.on("error", () => {});
  if (launchDelayMs === undefined) write(launch);
  else setTimeout(() => write(launch), launchDelayMs);
  return new Promise((resolve) => {
    child.on("close", (code, signal) => resolve({ code, signal, messages, stdout, stderr }));
  });
}

function defaultAnswer(frame, effects, content) {
  if (frame.kind === "effect.reserve") {
    const known = effects.get(frame.payload.idempotencyKey);
    if (known) return { outcome: "accepted", result: { effectId: known.effectId, status: known.status, execute: false, result: known.result } };
    const effectId = `effect-${effects.size + 1}`;
    effects.set(frame.payload.idempotencyKey, { effectId, status: "applying", result: null });
    return { outcome: "accepted", result: { effectId, status: "applying", execute: true, result: null } };
  }
  if (frame.kind === "content.read" && content) {
    const { offset, length } = frame.payload;
    const part = content.subarray(offset, offset + length);
    return { outcome: "accepted", result: { offset, length: part.length, totalLength: content.length, dataBase64: part.toString("base64") } };
  }
  return { outcome: "accepted" };
}

export function contentRef(buffer) {
  return { digest: createHash("sha256").update(buffer).digest("hex"), mediaType: "application/json", byteLength: buffer.length };
}
