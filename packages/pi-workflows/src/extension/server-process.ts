// Finding the `pi-workflows` binary, checking its version against this package, and starting
// the server on demand. The extension never opens SQLite and never runs workflow code: the
// server (a separate process, started with `pi-workflows server start`) does both.
import { execFile, execFileSync } from "node:child_process";
import { accessSync, constants, readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** How long `pi-workflows --version` may take. */
export const VERSION_CHECK_TIMEOUT_MS = 5_000;
/** How long `pi-workflows server start` may take (it waits for the server's ready handshake). */
export const SERVER_START_TIMEOUT_MS = 30_000;
/** Bytes of a child's error output kept for a message. */
const CHILD_OUTPUT_BYTES_MAX = 2_000;

/** This package's directory (`dist/extension/` or `src/extension/` under it). */
export function packageDir(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
}

export function packageVersion(dir = packageDir()): string {
  const parsed = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as { version?: unknown };
  if (typeof parsed.version !== "string") throw new Error(`${dir}/package.json has no version`);
  return parsed.version;
}

/**
 * The state directory the CLI uses (src/paths.rs): `$PI_CODING_AGENT_DIR/workflows`, else
 * `~/.pi/agent/workflows`. `PI_WORKFLOWS_STATE_DIR` (the extension's own variable) picks
 * another one, passed to the CLI as `--state-dir`.
 */
export function stateDir(env: NodeJS.ProcessEnv = process.env): { dir: string; explicit: boolean } {
  if (env.PI_WORKFLOWS_STATE_DIR) return { dir: path.resolve(env.PI_WORKFLOWS_STATE_DIR), explicit: true };
  if (env.PI_CODING_AGENT_DIR) return { dir: path.join(path.resolve(env.PI_CODING_AGENT_DIR), "workflows"), explicit: false };
  return { dir: path.join(env.HOME || os.homedir(), ".pi", "agent", "workflows"), explicit: false };
}

export function socketPath(state: string): string {
  return path.join(state, "server", "server.sock");
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** Where the binary was looked for, in order (for the message when it is missing). */
export function binaryCandidates(env: NodeJS.ProcessEnv = process.env, dir = packageDir()): string[] {
  if (env.PI_WORKFLOWS_BIN) return [env.PI_WORKFLOWS_BIN];
  const repo = path.resolve(dir, "..", "..");
  // In a checkout, the newer of the release and debug builds: a stale release binary would
  // lack operations the package expects.
  const builds = ["release", "debug"]
    .map((profile) => path.join(repo, "target", profile, "pi-workflows"))
    .filter(executable)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const beside = [path.join(dir, "bin", "pi-workflows"), ...builds];
  const onPath = (env.PATH ?? "").split(path.delimiter).filter(Boolean).map((d) => path.join(d, "pi-workflows"));
  return [...beside, ...onPath];
}

export class SetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SetupError";
  }
}

export interface Binary {
  path: string;
  version: string;
}

/** The binary to use, checked against this package's version; a SetupError says what to run. */
export function findBinary(env: NodeJS.ProcessEnv = process.env, dir = packageDir()): Binary {
  const expected = packageVersion(dir);
  const candidates = binaryCandidates(env, dir);
  const found = candidates.find(executable);
  if (!found) {
    const where = env.PI_WORKFLOWS_BIN ? `PI_WORKFLOWS_BIN (${env.PI_WORKFLOWS_BIN})` : `${path.join(dir, "bin")}, ${path.resolve(dir, "../../target")}/{release,debug} and PATH`;
    throw new SetupError(
      `pi-workflows: the pi-workflows ${expected} binary was not found (looked in ${where}). ` +
        `Build it with \`cargo build --release --locked\` in the pi-workflows checkout, or set PI_WORKFLOWS_BIN=/path/to/pi-workflows, then run /reload.`,
    );
  }
  let output: string;
  try {
    output = execFileSync(found, ["--version"], { encoding: "utf8", timeout: VERSION_CHECK_TIMEOUT_MS, stdio: ["ignore", "pipe", "pipe"] });
  } catch (error) {
    throw new SetupError(`pi-workflows: \`${found} --version\` failed (${(error as Error).message.slice(0, 200)}); rebuild it with \`cargo build --release --locked\` or set PI_WORKFLOWS_BIN`);
  }
  const version = output.trim().split(/\s+/).pop() ?? "";
  if (version !== expected) {
    throw new SetupError(
      `pi-workflows: ${found} is version ${version || "unknown"}, but this extension is ${expected}. ` +
        `Install the matching binary (\`cargo build --release --locked\` in the checkout of ${expected}), or point PI_WORKFLOWS_BIN at it, then run /reload.`,
    );
  }
  return { path: found, version };
}

/** `pi-workflows server start` (a no-op when a server already answers); rejects with what it said. */
export function startServer(binary: Binary, state: { dir: string; explicit: boolean }, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const args = [...(state.explicit ? ["--state-dir", state.dir] : []), "server", "start"];
  return new Promise((resolve, reject) => {
    execFile(binary.path, args, { env, timeout: SERVER_START_TIMEOUT_MS, maxBuffer: 64 * 1024, encoding: "utf8" }, (error, _stdout, stderr) => {
      if (!error) return resolve();
      const said = String(stderr ?? "").trim().slice(0, CHILD_OUTPUT_BYTES_MAX);
      reject(new SetupError(`pi-workflows: \`pi-workflows server start\` failed: ${said || error.message}; see \`pi-workflows server status\``));
    });
  });
}
