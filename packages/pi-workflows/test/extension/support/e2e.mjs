// Shared setup for the extension's real-Pi end-to-end tests (pinned Pi 1.6, RPC and tmux):
// a private PI_CODING_AGENT_DIR pointing at an in-process scripted model on 127.0.0.1, the
// `pi-workflows` server binary from target/debug with its state under a short /tmp path, RPC
// and tmux drivers for Pi, a probe client for the server's session and run views, and readers
// for Pi's session entries. Every child process (Pi, tmux, the server) is registered with the
// harness and ended by `close()`, also when a test fails.
//
// Waits are bounded polls (named constants below): a hang fails the test, it never stalls CI,
// and no assertion depends on how long something took.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { WorkflowClient } from "../../../dist/client/index.js";
import { writeMockAgentDir } from "../../agent/helpers.mjs";
import { removeTempDirs } from "../../support/fixtures.mjs";

export const packageDir = fileURLToPath(new URL("../../../", import.meta.url));
export const piBin = process.env.PI_WORKFLOWS_PI_BIN ?? path.join(packageDir, ".tools/bin/pi");
const piPackage = path.join(packageDir, ".tools/pi/node_modules/@earendil-works/pi-coding-agent");
export const serverBinary = process.env.PI_WORKFLOWS_BIN ?? path.resolve(packageDir, "../../target/debug/pi-workflows");
export const extensionPath = path.join(packageDir, "dist/extension/index.js");
const { version } = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8"));

/** Why the real-Pi tests cannot run here (undefined: they can). */
export const missingPi = fs.existsSync(piBin) && fs.existsSync(piPackage) ? undefined : `the pinned Pi is not installed (${piBin}); run packages/pi-workflows/scripts/install-pi.sh`;
const tmuxFound = spawnSync("sh", ["-c", "command -v tmux"], { encoding: "utf8" }).status === 0;
/** Why the tmux tests cannot run here (undefined: they can). */
export const missingTmux = missingPi ?? (tmuxFound ? undefined : "tmux is not installed (apt-get install -y tmux); the interactive-mode tests need it");

/** Bound on every wait for Pi, the model or the server. */
export const WAIT_MS = Number(process.env.PI_WORKFLOWS_E2E_WAIT_MS ?? 60_000);
/** Between two looks of a bounded poll. */
export const POLL_MS = 100;
/** Coordinator epochs a probe looks at to find the active one (they count up from 1 per server). */
const COORDINATOR_EPOCHS_SCANNED = 32;
/** How long a child gets to exit after EOF/SIGTERM before it is SIGKILLed. */
export const EXIT_GRACE_MS = 5_000;
/** tmux window size (wide enough that Pi does not wrap the commands we type). */
const TMUX_COLS = 160;
const TMUX_ROWS = 50;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns something truthy; throws naming `what` (and `context()`) after WAIT_MS. */
/** Continuations one chain lookup follows at most (one per answered checkpoint). */
const CONTINUATIONS_MAX = 16;

export async function until(check, what, context = () => "", ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${context()}`);
    await sleep(POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------
// The scripted model: an OpenAI Chat Completions mock (streaming SSE) in this process, so a test
// can hold a step's answer open (Pi is then inside the workflow turn) and release it.
//   - last message is a workflow step naming `"action": "submit", "requestId": "R"`: call the
//     `workflow` tool with {action: "submit", requestId: R, output: <next output>};
//   - last message is the tool's result "Rejected…": submit the next output for the same request;
//     any other tool result: reply "STEP-DONE";
//   - anything else: reply "MOCK-REPLY".
// While `hold` is on, a step request gets its first chunk and then waits for `release()`.
//
// A test can script any answer with `script(ctx)` (return undefined for the rules above). ctx:
// `messages` (no system message), `last`, `lastText`, `step` ({requestId} when the last message
// is a step), `toolName` / `toolCall` ({name, arguments}: the call whose result is the last
// message), `n`, `next()` (the next output). A scripted reply is `{text}` or
// `{tools: [{name, arguments}]}` (one response, calls in order), with `kind` (default
// "scripted"; `hold` also holds a scripted reply of kind "step"), `hold: true` (first chunk,
// then wait for `release()`) and `chunkDelayMs` (stream the reply slowly). Every request
// records its last message as `lastRole` / `lastText`.
export class ScriptedModel {
  requests = [];
  held = [];
  hold = false;
  constructor(outputs) {
    this.outputs = outputs;
    this.next = 0;
    this.server = http.createServer((req, res) => this.#serve(req, res));
  }
  async start() {
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return this;
  }
  /** Step requests the model answered or holds (a step re-presented to the model counts again). */
  stepRequests() {
    return this.requests.filter((r) => r.kind === "step");
  }
  /** Let every held answer go on (the held ones whose connection is still open). */
  release() {
    this.hold = false;
    for (const go of this.held.splice(0)) go();
  }
  close() {
    this.release();
    this.server.closeAllConnections?.();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
  #output() {
    return this.outputs[Math.min(this.next++, this.outputs.length - 1)];
  }
  /** Requests whose last message's text matches `pattern` (what the model was asked to answer). */
  requestsFor(pattern) {
    return this.requests.filter((r) => pattern.test(r.lastText ?? ""));
  }
  #decide(messages) {
    const relevant = messages.filter((m) => m.role !== "system");
    const last = relevant[relevant.length - 1];
    if (this.script) {
      const lastText = last ? textOf(last.content) : "";
      const step = last?.role === "user" ? /"action": "submit", "requestId": "([^"]+)"/.exec(lastText) : null;
      const scripted = this.script({
        messages: relevant,
        last,
        lastText,
        step: step ? { requestId: step[1] } : undefined,
        toolName: last?.role === "tool" ? toolCallOf(relevant, last.tool_call_id)?.name : undefined,
        toolCall: last?.role === "tool" ? toolCallOf(relevant, last.tool_call_id) : undefined,
        n: this.requests.length + 1,
        next: () => this.#output(),
      });
      if (scripted) return { kind: "scripted", ...scripted, scripted: true };
    }
    if (!last) return { kind: "other", text: "MOCK-REPLY" };
    if (last.role === "tool") {
      if (/^Rejected/.test(textOf(last.content))) {
        for (let i = relevant.length - 1; i >= 0; i--) {
          const call = relevant[i].tool_calls?.[0];
          if (call) return { kind: "retry", toolCall: { ...JSON.parse(call.function.arguments), output: this.#output() } };
        }
      }
      return { kind: "after-tool", text: "STEP-DONE" };
    }
    const step = /"action": "submit", "requestId": "([^"]+)"/.exec(textOf(last.content));
    if (last.role === "user" && step) return { kind: "step", requestId: step[1], toolCall: { action: "submit", requestId: step[1], output: this.#output() } };
    return { kind: "other", text: "MOCK-REPLY" };
  }
  async #serve(req, res) {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    if (req.method === "GET" && req.url?.startsWith("/v1/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify({ object: "list", data: [{ id: "mock-model", object: "model" }] }));
    }
    if (req.method !== "POST" || !req.url?.startsWith("/v1/chat/completions")) {
      res.writeHead(404);
      return res.end();
    }
    const body = JSON.parse(raw || "{}");
    const n = this.requests.length + 1;
    const reply = this.#decide(body.messages ?? []);
    const lastMessage = (body.messages ?? []).at(-1);
    const record = { n, ...reply, held: false, closed: false, lastRole: lastMessage?.role, lastText: lastMessage ? textOf(lastMessage.content) : "" };
    this.requests.push(record);
    res.on("close", () => {
      record.closed = true;
    });
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    const id = `chatcmpl-${n}`;
    const created = Math.floor(Date.now() / 1000);
    const send = (o) => res.write(`data: ${JSON.stringify(o)}\n\n`);
    const chunk = (delta, finish = null) => send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] });
    if (reply.scripted) {
      chunk({ role: "assistant", content: reply.tools ? null : "" });
      if (reply.hold || (reply.kind === "step" && this.hold)) {
        record.held = true;
        await new Promise((resolve) => this.held.push(resolve));
        if (record.closed) return; // Pi aborted or died meanwhile
      }
      const pause = () => (reply.chunkDelayMs ? sleep(reply.chunkDelayMs) : undefined);
      if (reply.tools) {
        for (const [index, call] of reply.tools.entries()) {
          await pause();
          chunk({ tool_calls: [{ index, id: `call_${call.name}_${n}_${index}`, type: "function", function: { name: call.name, arguments: "" } }] });
          chunk({ tool_calls: [{ index, function: { arguments: JSON.stringify(call.arguments) } }] });
        }
        await pause();
        chunk({}, "tool_calls");
      } else {
        for (const part of String(reply.text).match(/[\s\S]{1,16}/g) ?? [""]) {
          await pause();
          if (record.closed) return;
          chunk({ content: part });
        }
        chunk({}, "stop");
      }
    } else if (reply.toolCall) {
      chunk({ role: "assistant", content: null });
      if (reply.kind === "step" && this.hold) {
        record.held = true;
        await new Promise((resolve) => this.held.push(resolve));
        if (record.closed) return; // Pi aborted or died meanwhile
      }
      chunk({ tool_calls: [{ index: 0, id: `call_wf_${n}`, type: "function", function: { name: "workflow", arguments: "" } }] });
      chunk({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify(reply.toolCall) } }] });
      chunk({}, "tool_calls");
    } else {
      chunk({ role: "assistant", content: "" });
      chunk({ content: reply.text });
      chunk({}, "stop");
    }
    send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
    res.write("data: [DONE]\n\n");
    res.end();
  }
}

/** The call `toolCallId` an earlier assistant message made: {name, arguments} (parsed). */
function toolCallOf(messages, toolCallId) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const call = messages[i].tool_calls?.find((c) => c.id === toolCallId);
    if (!call) continue;
    let args;
    try {
      args = JSON.parse(call.function?.arguments || "{}");
    } catch {
      args = undefined;
    }
    return { name: call.function?.name, arguments: args };
  }
  return undefined;
}

export const textOf = (content) =>
  typeof content === "string" ? content : Array.isArray(content) ? content.filter((p) => p && p.type === "text").map((p) => p.text ?? "").join("") : "";

// ---------------------------------------------------------------------------------------------
// Workflows used by the tests.
export const WORKFLOWS = {
  // One agent step checked by the workflow, then a compute node.
  pick: `import { agent, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "pick",
  startAt: "pick",
  nodes: {
    pick: agent({
      prompt: "Pick a number.",
      expectedOutput: '{"n": a number above 10}',
      validate: (value) => {
        if (typeof value?.n !== "number" || value.n <= 10) throw new Error("n must be a number above 10");
        return value;
      },
    }),
    done: compute({ run: ({ outputs }) => ({ n: outputs.pick.n }) }),
  },
  edges: [{ from: "pick", to: "done" }],
});
`,
  // A checkpoint (a step that starts no model turn: Pi stays idle while it waits), then a compute node.
  gate: `import { checkpoint, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "gate",
  startAt: "approve",
  nodes: {
    approve: checkpoint({ summary: "Approve the gate?" }),
    done: compute({ run: ({ outputs }) => ({ approved: outputs.approve }) }),
  },
  edges: [{ from: "approve", to: "done" }],
});
`,
};

// ---------------------------------------------------------------------------------------------
// The harness: one per test file (a private agent dir, state dir, project and model).
export class Harness {
  children = [];
  tmuxSockets = [];
  serverPids = new Set();
  probes = [];

  /** @param {{outputs?: unknown[], tag?: string}} options */
  static async create({ outputs = [{ n: 42 }], tag = "x" } = {}) {
    const h = new Harness();
    // Short: the server socket lives below it (Unix socket paths are ≤ 107 bytes).
    h.root = fs.mkdtempSync(`/tmp/piw${tag}-`);
    h.agentDir = path.join(h.root, "agent");
    h.stateDir = path.join(h.root, "st");
    h.proj = path.join(h.root, "proj");
    h.sessionsDir = path.join(h.root, "sessions");
    for (const dir of [h.agentDir, h.proj, h.sessionsDir, path.join(h.root, "home")]) fs.mkdirSync(dir, { recursive: true });
    h.model = await new ScriptedModel(outputs).start();
    writeMockAgentDir(h.agentDir, h.model.port, { retry: { enabled: false } });
    for (const [name, source] of Object.entries(WORKFLOWS)) fs.writeFileSync(path.join(h.proj, `${name}.workflow.ts`), source);
    h.env = {
      ...process.env,
      HOME: path.join(h.root, "home"),
      PI_CODING_AGENT_DIR: h.agentDir,
      PI_OFFLINE: "1",
      PI_WORKFLOWS_BIN: serverBinary,
      PI_WORKFLOWS_PACKAGE_DIR: packageDir,
      PI_WORKFLOWS_CONFIG_DIR: path.join(h.root, "config"),
      PI_WORKFLOWS_STATE_DIR: h.stateDir,
    };
    delete h.env.PI_WORKFLOWS_RUNNER;
    delete h.env.TMUX;
    return h;
  }

  workflowPath(name) {
    return path.join(this.proj, `${name}.workflow.ts`);
  }

  get socket() {
    return path.join(this.stateDir, "server", "server.sock");
  }

  /** The pid of the server serving this harness's state dir (undefined: none runs). */
  serverPid() {
    const marker = `--state-dir ${this.stateDir} server run`;
    for (const name of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, "utf8").replaceAll("\0", " ");
        const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
        const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
        if (cmdline.includes(marker) && state !== "Z" && state !== "X") {
          this.serverPids.add(Number(name));
          return Number(name);
        }
      } catch {
        // gone while scanning
      }
    }
    return undefined;
  }

  /**
   * A `pi --mode rpc` child with this package's extension (and `extraArgs`); `detached`: in its
   * own process group (so `killGroup()` ends Pi and every tool process it started).
   */
  rpc(extraArgs = [], { sessionDir = this.sessionsDir, detached = false } = {}) {
    const rpc = new Rpc(["--session-dir", sessionDir, "-ne", "-e", extensionPath, ...extraArgs], this.env, this.proj, { detached });
    this.children.push(rpc);
    return rpc;
  }

  /** Interactive Pi in a private tmux server (`--tui-mode regular`, so the scrollback has everything). */
  async tmux(extraArgs = []) {
    const t = new Tmux(this, extraArgs);
    this.tmuxSockets.push(t);
    await t.start();
    return t;
  }

  /** A client of the server for reading views (never a coordinator). */
  async probe() {
    const client = await until(
      async () => {
        try {
          return await WorkflowClient.connect(this.socket, { packageVersion: version, clientId: `e2e-probe-${this.probes.length}` });
        } catch {
          return undefined;
        }
      },
      "a connection to the workflow server",
    );
    this.probes.push(client);
    return client;
  }

  async sessionView(sessionId) {
    const client = await this.probe();
    try {
      return await client.sessionWindow(sessionId);
    } finally {
      client.close();
    }
  }

  /** The epoch of the session's active coordinator (a probe's own view names none), if any. */
  async coordinatorEpoch(sessionId, maxEpoch = COORDINATOR_EPOCHS_SCANNED) {
    const client = await this.probe();
    try {
      for (let epoch = 1; epoch <= maxEpoch; epoch++) {
        const view = await client.sessionWindow(sessionId, { epoch });
        if (view.coordinator?.active) return epoch;
      }
      return undefined;
    } finally {
      client.close();
    }
  }

  async runView(runId) {
    const client = await this.probe();
    try {
      return (await client.call("view.run.get", { runId })).view;
    } finally {
      client.close();
    }
  }

  /** The result of the run's chain: an answered checkpoint's continuation carries it on. */
  async runResult(runId) {
    const client = await this.probe();
    try {
      let status = await client.call("run.status", { runId, payload: { includeResult: true } });
      for (let hops = 0; typeof status.continuedAs === "string" && hops < CONTINUATIONS_MAX; hops++) {
        status = await client.call("run.status", { runId: status.continuedAs, payload: { includeResult: true } });
      }
      return status.result?.output ?? status.result;
    } finally {
      client.close();
    }
  }

  /** The newest run of `runId`'s continuation chain (itself when its checkpoint was never answered). */
  async chainLeaf(runId) {
    const client = await this.probe();
    try {
      let leaf = runId;
      for (let hops = 0; hops < CONTINUATIONS_MAX; hops++) {
        const next = (await client.call("run.status", { runId: leaf })).continuedAs;
        if (typeof next !== "string") break;
        leaf = next;
      }
      return leaf;
    } finally {
      client.close();
    }
  }

  /** Waits for the display status of the run's chain (its newest continuation) to be `status`. */
  async runStatus(runId, status, context) {
    let last;
    await until(
      async () => {
        last = (await this.runView(await this.chainLeaf(runId)))?.display;
        return last?.status === status;
      },
      `run ${runId} to be ${status}`,
      () => `\nlast display: ${JSON.stringify(last)?.slice(0, 1500)}${context ? context() : ""}`,
    );
    return last;
  }

  /** Ends everything this harness started: Pi children, tmux, the server, probes, the model. */
  async close() {
    for (const child of this.children) await child.close().catch(() => {});
    for (const t of this.tmuxSockets) t.kill();
    for (const probe of this.probes) probe.close();
    spawnSync(serverBinary, ["--state-dir", this.stateDir, "server", "stop"], { env: this.env, timeout: 20_000 });
    this.serverPid(); // also records a server started since the last look
    for (const pid of this.serverPids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    await this.model?.close();
    if (!process.env.PI_WORKFLOWS_KEEP_E2E) removeTempDirs([this.root]);
  }
}

// ---------------------------------------------------------------------------------------------
/** One `pi --mode rpc` child: JSON lines in, events and responses out (split on \n only, §8.15). */
export class Rpc {
  events = [];
  responses = new Map();
  stderr = "";
  #n = 0;
  constructor(args, env, cwd, { detached = false } = {}) {
    this.detached = detached;
    this.child = spawn(piBin, ["--mode", "rpc", ...args], { env, cwd, detached, stdio: ["pipe", "pipe", "pipe"] });
    let buffered = "";
    this.child.stdout.on("data", (chunk) => {
      buffered += chunk;
      for (let i = buffered.indexOf("\n"); i >= 0; i = buffered.indexOf("\n")) {
        const line = buffered.slice(0, i).replace(/\r$/, "");
        buffered = buffered.slice(i + 1);
        if (!line) continue;
        const message = JSON.parse(line);
        if (message.type === "response" && message.id) this.responses.set(message.id, message);
        else this.events.push(message);
      }
    });
    this.child.stderr.on("data", (chunk) => {
      if (this.stderr.length < 20_000) this.stderr += chunk;
    });
    this.child.stdin.on("error", () => {}); // a killed child: writes fail, the test says why
    this.exited = new Promise((resolve) => this.child.on("exit", resolve));
  }
  get alive() {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  context = () => `\nnotifications: ${JSON.stringify(this.notifications()).slice(-2000)}\nstderr: ${this.stderr.slice(-2000)}`;
  async send(command) {
    const id = `t${++this.#n}`;
    this.child.stdin.write(JSON.stringify({ id, ...command }) + "\n");
    await until(() => this.responses.get(id), `a response to ${command.type}`, this.context);
    return this.responses.get(id);
  }
  async prompt(message) {
    const response = await this.send({ type: "prompt", message });
    assert.equal(response.success, true, JSON.stringify(response));
    return response;
  }
  async entries() {
    const response = await this.send({ type: "get_entries" });
    assert.equal(response.success, true, JSON.stringify(response));
    return response.data.entries;
  }
  /** The active branch (root → leaf), from get_tree's leaf and get_entries. */
  async branch() {
    const entries = await this.entries();
    const tree = await this.send({ type: "get_tree" });
    return branchOf(entries, tree.data.leafId);
  }
  async state() {
    const response = await this.send({ type: "get_state" });
    assert.equal(response.success, true, JSON.stringify(response));
    return response.data;
  }
  async idle() {
    return until(async () => ((await this.state()).isStreaming === false ? true : undefined), "Pi to be idle", this.context);
  }
  notifications() {
    return this.events.filter((e) => e.type === "extension_ui_request" && e.method === "notify").map((e) => e.message);
  }
  /** The run ID from `/workflow start`'s notice (after `from` notifications). */
  async startedRun(from = 0) {
    const notice = await until(() => this.notifications().slice(from).find((m) => /started .* as run run-|^\/workflow start/.test(m)), "the start notice", this.context);
    const runId = /run (run-[A-Za-z0-9-]+)/.exec(notice)?.[1];
    assert.ok(runId, `the run started: ${notice}`);
    return runId;
  }
  kill(signal = "SIGKILL") {
    if (this.alive) this.child.kill(signal);
    return this.exited;
  }
  /** Signals Pi's whole process group (a `detached` child: Pi and the tools it runs). */
  killGroup(signal = "SIGKILL") {
    assert.ok(this.detached, "killGroup needs a detached Rpc (its own process group)");
    try {
      process.kill(-this.child.pid, signal);
    } catch (error) {
      if (error.code !== "ESRCH") throw error;
    }
    return this.exited;
  }
  async close() {
    if (!this.alive) return;
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), EXIT_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
    if (this.detached) this.killGroup().catch(() => {}); // a tool process Pi left behind
  }
}

// ---------------------------------------------------------------------------------------------
let tmuxCount = 0;
/**
 * Interactive Pi in its own tmux server, driven with send-keys and read with capture-pane. Its
 * socket is in the harness's dir (`-S`), so nothing of it outlives the test.
 */
export class Tmux {
  constructor(harness, extraArgs) {
    this.h = harness;
    this.session = "pi";
    this.dir = path.join(harness.root, `tmux${++tmuxCount}`);
    this.socket = path.join(this.dir, "tmux.sock");
    this.extraArgs = extraArgs;
  }
  #tmux(args, options = {}) {
    const r = spawnSync("tmux", ["-S", this.socket, ...args], { encoding: "utf8", timeout: 10_000, ...options });
    return r;
  }
  async start() {
    fs.mkdirSync(this.dir, { recursive: true });
    const conf = path.join(this.dir, "tmux.conf");
    // extended-keys: Pi's TUI tells keys apart (pi-api.md §12); history for --tui-mode regular.
    fs.writeFileSync(conf, 'set -g extended-keys on\nset -g default-terminal "tmux-256color"\nset -g history-limit 50000\n');
    const script = path.join(this.dir, "run-pi.sh");
    const exports = Object.entries(this.h.env)
      .filter(([k]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      .map(([k, v]) => `export ${k}=${shellQuote(v)}`)
      .join("\n");
    const args = ["--tui-mode", "regular", "--session-dir", this.h.sessionsDir, "-ne", "-e", extensionPath, ...this.extraArgs].map(shellQuote).join(" ");
    fs.writeFileSync(script, `#!/bin/sh\n${exports}\ncd ${shellQuote(this.h.proj)}\n${shellQuote(piBin)} ${args}\necho "PI-EXITED rc=$?"\nsleep 600\n`, { mode: 0o755 });
    const r = this.#tmux(["-f", conf, "new-session", "-d", "-s", this.session, "-x", String(TMUX_COLS), "-y", String(TMUX_ROWS), script]);
    assert.equal(r.status, 0, `tmux new-session failed: ${r.stderr}`);
    // Pi draws its editor once it is ready for keys.
    await until(() => this.screen().includes("───") || this.screen().includes("PI-EXITED"), "Pi's editor in tmux", () => `\nscreen:\n${this.screen()}`);
    assert.ok(!this.screen().includes("PI-EXITED"), `Pi exited:\n${this.screen()}`);
  }
  /** The visible pane. */
  screen() {
    return this.#tmux(["capture-pane", "-p", "-t", this.session]).stdout ?? "";
  }
  /** The pane with all its scrollback. */
  history() {
    return this.#tmux(["capture-pane", "-p", "-S", "-", "-t", this.session]).stdout ?? "";
  }
  keys(...keys) {
    const r = this.#tmux(["send-keys", "-t", this.session, ...keys]);
    assert.equal(r.status, 0, `tmux send-keys failed: ${r.stderr}`);
  }
  /** Types `text` literally, closes a completion popup with Escape (§12), then presses Enter. */
  async submit(text) {
    this.keys("-l", text);
    await until(() => this.screen().includes(text.slice(0, 40)), `"${text}" in Pi's editor`, () => `\nscreen:\n${this.screen()}`);
    // Escape closes the completion popup; Enter on an open popup would accept a completion instead.
    this.keys("Escape");
    await sleep(300); // Pi tells a lone Escape from an escape sequence by a short pause
    this.keys("Enter");
  }
  /** The pid of Pi (the pane's process runs the launcher script, Pi is its child). */
  piPid() {
    const pane = Number(this.#tmux(["display-message", "-p", "-t", this.session, "#{pane_pid}"]).stdout.trim());
    for (const name of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
        const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
        if (ppid === pane) return Number(name);
      } catch {
        // gone
      }
    }
    return undefined;
  }
  kill() {
    this.#tmux(["kill-server"]);
  }
}

function shellQuote(value) {
  return `'${String(value).replaceAll("'", `'\\''`)}'`;
}

// ---------------------------------------------------------------------------------------------
// Pi's session entries.

/** The complete lines of a JSONL file Pi may be writing right now (a partial last line is left out). */
function completeLines(file) {
  const text = fs.readFileSync(file, "utf8");
  const lines = text.split("\n");
  lines.pop(); // after the last newline: empty, or a line still being written
  return lines.filter(Boolean);
}

/** Entries of one session JSONL file (the header line excluded). */
export function sessionFileEntries(file) {
  return completeLines(file)
    .map((line) => JSON.parse(line))
    .filter((entry) => entry.type !== "session");
}

/** The header line of a session file; undefined while Pi has not finished writing it. */
export function sessionHeader(file) {
  const [first] = completeLines(file);
  return first === undefined ? undefined : JSON.parse(first);
}

/** Session files below `dir` (Pi writes one JSONL per session). */
export function sessionFiles(dir) {
  const found = [];
  const walk = (d) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith(".jsonl")) found.push(full);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return found;
}

/** root → leaf */
export function branchOf(entries, leafId) {
  const byId = new Map(entries.map((e) => [e.id, e]));
  const branch = [];
  for (let e = byId.get(leafId); e; e = e.parentId ? byId.get(e.parentId) : undefined) branch.unshift(e);
  return branch;
}

export const stepEntries = (entries) => entries.filter((e) => e.type === "custom_message" && e.customType === "pi-workflows-step");
export const workflowEntries = (entries) => entries.filter((e) => e.type === "custom_message" && String(e.customType).startsWith("pi-workflows-"));
export const toolResults = (entries) => entries.filter((e) => e.type === "message" && e.message.role === "toolResult" && e.message.toolName === "workflow");

/** No workflow message appears twice among `entries` (each hidden ID once). */
export function assertNoDuplicateMessages(entries, where) {
  const ids = workflowEntries(entries).map((e) => e.details?.workflowMessageId);
  assert.ok(
    ids.every((id) => typeof id === "string"),
    `every workflow entry carries its hidden ID (${where})`,
  );
  assert.equal(new Set(ids).size, ids.length, `no workflow message appears twice (${where}): ${JSON.stringify(ids)}`);
}

/** A compact picture of the workflow entries, for assertion messages. */
export function describeEntries(entries) {
  return JSON.stringify(
    workflowEntries(entries).map((e) => ({ id: e.id, type: e.customType, kind: e.details?.kind, reason: e.details?.reason, msg: e.details?.workflowMessageId, req: e.details?.requestId })),
  );
}
