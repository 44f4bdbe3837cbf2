// Test helpers: the real pinned Pi 1.6 (installed with its Node 22 by scripts/install-pi.sh) plus the
// scripted mock model. The tests themselves run on whatever Node runs `npm test` (20 or 22).
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const packageDir = path.resolve(here, "..", "..");

/**
 * Installs Pi and Node 22 when needed and returns the launcher path (`.tools/bin/pi`, which runs Pi with
 * that Node). Throws (so the test fails) when that is impossible.
 */
export function ensurePi() {
  const script = path.join(packageDir, "scripts", "install-pi.sh");
  const out = execFileSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 300_000 });
  const bin = out.trim().split("\n").pop();
  if (!bin || !fs.existsSync(bin)) throw new Error(`install-pi.sh did not produce a pi binary (got '${bin}')`);
  return bin;
}

export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `piw-agent-${prefix}-`));
}

/** The scripted model of headless steps: it submits through the bridge's `workflow` tool (see its header). */
export const BRIDGE_MODEL = path.join(here, "fixtures", "bridge-model.mjs");

/**
 * Starts a mock model on 127.0.0.1 (default: test/agent/fixtures/bridge-model.mjs; scripts/mock-model.mjs
 * answers with text only) and resolves once it printed its port.
 */
export async function startMock(extraEnv = {}, script = BRIDGE_MODEL) {
  const dir = tempDir("mock");
  const logFile = path.join(dir, "requests.jsonl");
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, MOCK_REQUEST_LOG: logFile, ...extraEnv },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const port = await new Promise((resolve, reject) => {
    let buffer = "";
    const timer = setTimeout(() => reject(new Error("mock model did not start")), 10_000);
    child.once("exit", (code) => reject(new Error(`mock model exited early (${code})`)));
    child.stdout.on("data", (chunk) => {
      buffer += chunk;
      const newline = buffer.indexOf("\n");
      if (newline >= 0) {
        clearTimeout(timer);
        resolve(JSON.parse(buffer.slice(0, newline)).port);
      }
    });
  });
  return {
    port,
    logFile,
    requests() {
      if (!fs.existsSync(logFile)) return [];
      return fs.readFileSync(logFile, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** models.json and settings.json in `agentDir` that point Pi at the mock model on `port` (pi-api.md §11). */
export function writeMockAgentDir(agentDir, port, settingsExtra = {}) {
  const models = {
    providers: {
      mock: {
        baseUrl: `http://127.0.0.1:${port}/v1`,
        api: "openai-completions",
        apiKey: "sk-mock-not-a-real-key",
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsStore: false },
        models: [{ id: "mock-model", name: "Mock Model", reasoning: false, input: ["text"], contextWindow: 128000, maxTokens: 4096 }],
      },
    },
  };
  const settings = { defaultProvider: "mock", defaultModel: "mock-model", quietStartup: true, enableInstallTelemetry: false, ...settingsExtra };
  fs.writeFileSync(path.join(agentDir, "models.json"), JSON.stringify(models, null, 2));
  fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify(settings, null, 2));
}

/** A temporary PI_CODING_AGENT_DIR with models.json/settings.json pointing at the mock (pi-api.md §11). */
export function makePiEnv(port) {
  const root = tempDir("pi");
  const agentDir = path.join(root, "agent");
  const home = path.join(root, "home");
  const cwd = path.join(root, "project");
  for (const dir of [agentDir, home, cwd]) fs.mkdirSync(dir, { recursive: true });
  writeMockAgentDir(agentDir, port);
  const env = { ...process.env, HOME: home, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: "1" };
  delete env.PI_WORKFLOWS_PI_BIN;
  return { env, cwd, root };
}

/**
 * True once no process of the group is left. `process.kill(-pgid, 0)` throwing ESRCH is the normal proof;
 * on Linux a group whose only members are orphaned zombies (waiting for a non-reaping container init)
 * also counts as gone, because those processes no longer run.
 */
export function groupGone(pgid) {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    if (error.code === "ESRCH") return true;
    throw error;
  }
  if (process.platform !== "linux") return false;
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue;
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") return false;
  }
  return true;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function waitFor(predicate, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The real path of the program `pid` runs (Linux /proc), or null. */
export function exeOf(pid) {
  try {
    return fs.realpathSync(`/proc/${pid}/exe`);
  } catch {
    return null;
  }
}

/** Register/unregister callbacks that record the order of events and check the process group. */
export function makeSupervisor(mock, { registerDelayMs = 0, registerError } = {}) {
  const events = [];
  return {
    events,
    async registerProcess(pid) {
      events.push({ event: "register", pid, time: Date.now(), requestsSoFar: mock.requests().length, exe: exeOf(pid) });
      if (registerDelayMs) await sleep(registerDelayMs);
      // Nothing may reach the model before registration has completed.
      events.push({ event: "registered", pid, time: Date.now(), requestsSoFar: mock.requests().length });
      if (registerError) throw registerError;
    },
    async unregisterProcess(pid) {
      let killError = null;
      try {
        process.kill(-pid, 0);
      } catch (error) {
        killError = error.code;
      }
      events.push({ event: "unregister", pid, time: Date.now(), killError, groupGone: groupGone(pid) });
    },
  };
}

/** Live (non-zombie) processes whose command line contains `marker` (Linux /proc). */
export function liveProcessesWith(marker) {
  const found = [];
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, "utf8").replaceAll("\0", " ");
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      if (cmdline.includes(marker) && state !== "Z" && state !== "X") found.push(Number(name));
    } catch {
      // gone while scanning
    }
  }
  return found;
}

/** A test file's pinned Pi, mock model and private Pi environment (see `removeMockPi`). */
export async function setUpMockPi() {
  const piBinary = ensurePi();
  const mock = await startMock();
  return { piBinary, mock, pi: makePiEnv(mock.port) };
}

/** Stop the mock model and remove the Pi environment `setUpMockPi` made (either may be absent). */
export async function removeMockPi({ mock, pi }) {
  await mock?.stop();
  if (pi) fs.rmSync(pi.root, { recursive: true, force: true });
}
