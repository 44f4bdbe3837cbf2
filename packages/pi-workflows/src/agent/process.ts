// Locating the `pi` binary (and the Node it needs) and stopping a Pi process group.
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

/** The oldest Node that Pi 1.6 starts on (`engines.node >=22.19.0`; Node 20 fails at once with a SyntaxError). */
export const PI_MIN_NODE: readonly [major: number, minor: number] = [22, 19];
/** A Node >= 22.19 to run a JavaScript `pi` entry with (absolute path). */
export const PI_NODE_ENV = "PI_WORKFLOWS_PI_NODE";
/** Bytes read from the head of a `pi` file to see whether it is a `#!… node` script. */
const SHEBANG_BYTES = 128;

export const PI_INSTALL_HINT =
  "Install the pinned Pi (and the Node 22 it needs) with packages/pi-workflows/scripts/install-pi.sh, or set PI_WORKFLOWS_PI_BIN to the path of a `pi` binary.";
const PI_NODE_HINT = `Pi needs Node >= ${PI_MIN_NODE.join(".")}: run packages/pi-workflows/scripts/install-pi.sh (it installs Node 22 into packages/pi-workflows/.tools/node22) or set ${PI_NODE_ENV} to a newer node.`;

/** `<package>/.tools`, seen from `src/agent` or `dist/agent` (layout written by scripts/install-pi.sh). */
function toolsDir(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", ".tools");
}

/** `<package>/.tools/pi/node_modules/.bin/pi`: a link to Pi's JavaScript entry. */
export function localPiBinary(): string {
  return path.join(toolsDir(), "pi", "node_modules", ".bin", "pi");
}

/** `<package>/.tools/node22/bin/node`: the Node 22 that install-pi.sh installs for Pi. */
export function localPiNode(): string {
  return path.join(toolsDir(), "node22", "bin", "node");
}

function isExecutableFile(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function searchPath(name: string, pathVar: string | undefined): string | undefined {
  for (const dir of (pathVar ?? "").split(path.delimiter)) {
    if (dir && isExecutableFile(path.join(dir, name))) return path.join(dir, name);
  }
  return undefined;
}

/** A JavaScript entry: named `*.js`/`*.mjs`/`*.cjs`, or a script whose `#!` line runs node (npm bins). */
function isNodeScript(file: string): boolean {
  if (/\.(?:c|m)?js$/.test(file)) return true;
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, "r");
    const head = Buffer.alloc(SHEBANG_BYTES);
    const read = fs.readSync(fd, head, 0, SHEBANG_BYTES, 0);
    const firstLine = head.subarray(0, read).toString("latin1").split("\n")[0] ?? "";
    return /^#!.*\bnode(?:\s|$)/.test(firstLine);
  } catch {
    return false;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** True when `version` ("22.23.5") is at least PI_MIN_NODE. */
export function nodeVersionSupportsPi(version: string): boolean {
  const [major = 0, minor = 0] = version.split(".").map(Number);
  return major > PI_MIN_NODE[0] || (major === PI_MIN_NODE[0] && minor >= PI_MIN_NODE[1]);
}

/**
 * The Node for a JavaScript `pi` entry, never simply the runner's own: the runner runs on the server's Node
 * (20 is supported), Pi 1.6 does not. Order: $PI_WORKFLOWS_PI_NODE (no fallback when set), the project-local
 * Node 22 of install-pi.sh, this process's Node when it is new enough.
 */
function piNode(env: NodeJS.ProcessEnv): { node: string } | { error: string } {
  const explicit = env[PI_NODE_ENV];
  if (explicit) {
    return path.isAbsolute(explicit) && isExecutableFile(explicit)
      ? { node: explicit }
      : { error: `${PI_NODE_ENV} does not name an executable file by absolute path. ${PI_NODE_HINT}` };
  }
  const local = localPiNode();
  if (isExecutableFile(local)) return { node: local };
  if (nodeVersionSupportsPi(process.versions.node)) return { node: process.execPath };
  return { error: `This runner runs on Node ${process.versions.node}. ${PI_NODE_HINT}` };
}

/**
 * The Node hint when Pi's stderr shows the start-up failure of too old a Node: on Node 20, Pi 1.6 dies with
 * "SyntaxError: The requested module 'node:module' does not provide an export named 'enableCompileCache'".
 */
export function piStartupHint(stderrTail: string): string | undefined {
  return /does not provide an export named/.test(stderrTail) ? PI_NODE_HINT : undefined;
}

export interface PiCommand {
  file: string;
  args: string[];
}

export type PiCommandResolution = { ok: true; command: PiCommand } | { ok: false; code: "piNotFound"; message: string };

/**
 * Resolve the command that starts Pi: `explicit` (option or $PI_WORKFLOWS_PI_BIN; no fallback when set),
 * else the project-local install, else `pi` on PATH. A JavaScript entry (npm's bin is a link to
 * `dist/bundle/cli.js`, a `#!/usr/bin/env node` script) runs with a Node >= 22.19 chosen by `piNode`, so a
 * Node 20 first on PATH does not matter. Anything else (the `.tools/bin/pi` launcher of install-pi.sh, a
 * compiled binary) is started as it is. The child's PATH is left alone: Pi starts its helpers with its own
 * `process.execPath`, and the agent's shell commands should see the user's `node`, as a shell step does.
 */
export function resolvePiCommand(explicit: string | undefined, env: NodeJS.ProcessEnv, args: string[]): PiCommandResolution {
  const notFound = { ok: false, code: "piNotFound", message: `The Pi coding agent was not found. ${PI_INSTALL_HINT}` } as const;
  let binary: string | undefined;
  if (explicit) {
    binary = explicit.includes("/") || explicit.includes(path.sep) ? path.resolve(explicit) : searchPath(explicit, env["PATH"]);
    if (binary && !fs.existsSync(binary)) binary = undefined;
  } else {
    const local = localPiBinary();
    binary = fs.existsSync(local) ? local : searchPath("pi", env["PATH"]);
  }
  if (!binary) return notFound;
  let real: string;
  try {
    real = fs.realpathSync(binary);
  } catch {
    return notFound;
  }
  if (!isNodeScript(real)) return { ok: true, command: { file: real, args } };
  const node = piNode(env);
  if ("error" in node) return { ok: false, code: "piNotFound", message: node.error };
  return { ok: true, command: { file: node.node, args: [real, ...args] } };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // group already gone
  }
}

interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
  pgrp: number;
}

function readProcStats(): ProcStat[] | undefined {
  if (process.platform !== "linux") return undefined;
  let names: string[];
  try {
    names = fs.readdirSync("/proc");
  } catch {
    return undefined;
  }
  const stats: ProcStat[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const text = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
      stats.push({ pid: Number(name), state: fields[0] ?? "", ppid: Number(fields[1]), pgrp: Number(fields[2]) });
    } catch {
      // process went away while scanning
    }
  }
  return stats;
}

/**
 * True while any process of the group exists. On Linux, members that are only zombies count as gone:
 * an orphaned zombie is waiting for init to reap it (some container inits never do) and runs no code.
 */
export function processGroupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
  const stats = readProcStats();
  if (!stats) return true;
  return stats.some((s) => s.pgrp === pgid && s.state !== "Z" && s.state !== "X");
}

/** Process groups of descendants of `pid` that left its group (Pi runs its bash tool with `detached: true`). */
function detachedDescendantGroups(pid: number): number[] {
  const stats = readProcStats();
  if (!stats) return [];
  const children = new Map<number, ProcStat[]>();
  for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s]);
  const groups = new Set<number>();
  const queue = [pid];
  for (let seen = 0; queue.length > 0 && seen < 10_000; seen++) {
    const current = queue.shift() as number;
    for (const child of children.get(current) ?? []) {
      if (child.pgrp !== pid && child.pgrp > 1 && child.pgrp !== process.pid) groups.add(child.pgrp);
      queue.push(child.pid);
    }
  }
  return [...groups];
}

async function waitUntil(done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() >= deadline) return false;
    await sleep(25);
  }
  return true;
}

const hasExited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

/**
 * Stop the process group led by `child` (spawned with `detached: true`): SIGTERM, SIGKILL after `graceMs`,
 * then wait until the child has exited and no live member of the group is left. Descendants that Pi moved
 * into their own groups are killed as well (best effort, Linux). Resolves only after the child's `exit`.
 */
export async function stopProcessGroup(child: ChildProcess, graceMs = 2000): Promise<void> {
  const pid = child.pid;
  if (pid === undefined) return;
  const exited = new Promise<void>((resolve) => (hasExited(child) ? resolve() : child.once("exit", () => resolve())));
  const stray = new Set(detachedDescendantGroups(pid));
  const gone = () => hasExited(child) && !processGroupAlive(pid);
  if (!gone()) {
    signalGroup(pid, "SIGTERM");
    if (!(await waitUntil(gone, graceMs))) {
      for (const group of detachedDescendantGroups(pid)) stray.add(group);
      signalGroup(pid, "SIGKILL");
      await waitUntil(gone, 5000);
    }
  }
  await exited;
  for (const group of stray) {
    if (processGroupAlive(group)) signalGroup(group, "SIGKILL");
  }
  await waitUntil(() => [...stray].every((group) => !processGroupAlive(group)), 1000);
}
