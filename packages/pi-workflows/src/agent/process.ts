// Locating the `pi` binary and stopping a Pi process group.
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const PI_INSTALL_HINT =
  "Install the pinned Pi with packages/pi-workflows/scripts/install-pi.sh, or set PI_WORKFLOWS_PI_BIN to the path of a `pi` binary.";

/** `<package>/.tools/pi/node_modules/.bin/pi`, seen from `src/agent` or `dist/agent`. */
export function localPiBinary(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, "..", "..", ".tools", "pi", "node_modules", ".bin", "pi");
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

export interface PiCommand {
  file: string;
  args: string[];
}

/**
 * Resolve the command that starts Pi: `explicit` (option or $PI_WORKFLOWS_PI_BIN; no fallback when set),
 * else the project-local install, else `pi` on PATH. A JavaScript entry point (the npm bin is a symlink to
 * `dist/cli.js`) runs with this Node, so a missing or different `node` on PATH does not matter.
 */
export function resolvePiCommand(explicit: string | undefined, env: NodeJS.ProcessEnv, args: string[]): PiCommand | undefined {
  let binary: string | undefined;
  if (explicit) {
    binary = explicit.includes("/") || explicit.includes(path.sep) ? path.resolve(explicit) : searchPath(explicit, env["PATH"]);
    if (binary && !fs.existsSync(binary)) binary = undefined;
  } else {
    const local = localPiBinary();
    binary = fs.existsSync(local) ? local : searchPath("pi", env["PATH"]);
  }
  if (!binary) return undefined;
  let real: string;
  try {
    real = fs.realpathSync(binary);
  } catch {
    return undefined;
  }
  if (/\.(?:c|m)?js$/.test(real)) return { file: process.execPath, args: [real, ...args] };
  return { file: real, args };
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
