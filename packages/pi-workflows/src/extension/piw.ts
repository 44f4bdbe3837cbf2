// `/piw [right|below|left|above|tab]` and Ctrl+Shift+R: the session's run in `piw`, the
// terminal run view (docs/PIW.md, "Herdr").
//
// Inside Herdr (HERDR_ENV=1 and a `herdr` executable on PATH) it opens, or focuses, a Herdr
// pane running `piw <runId>` for the run the session view names: the `piw` pane entrypoint of
// the plugin `pi-workflows herdr setup` registers (`herdr plugin pane open`), because plugin
// panes are the ones Herdr's CLI can focus by ID. The pane is labelled `piw · <runId>`; its ID
// is kept in a small user-only file (`<state dir>/clients/herdr-panes.json`), so after a Pi
// reload `/piw` focuses the same pane instead of opening another (checked by ID and label;
// found by label when the file is gone). Outside Herdr it says exactly what to run in another
// terminal. It only places and focuses a pane: what piw shows comes from the server's view.
import { execFile } from "node:child_process";
import { accessSync, constants, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { PiApi, PiAutocompleteItem, PiContext } from "./pi-types.js";
import { binaryCandidates, stateDir } from "./server-process.js";
import type { SessionView } from "./session-view.js";

export const PIW_SHORTCUT = "ctrl+shift+r";
/** What the widget shows when Herdr is available (spec, "Renderers and controls"). */
export const PIW_WIDGET_HINT = "Ctrl+Shift+R piw";
export const PIW_PLACEMENTS = ["right", "below", "left", "above", "tab"] as const;
export type PiwPlacement = (typeof PIW_PLACEMENTS)[number];
/** The plugin and pane entrypoint `pi-workflows herdr setup` writes (src/cli/herdr.rs). */
export const HERDR_PLUGIN_ID = "pi-workflows.piw";
export const HERDR_PANE_ENTRYPOINT = "piw";
/** How long one `herdr` call may take (it talks to the running Herdr over its socket). */
export const HERDR_TIMEOUT_MS = 10_000;
/** Bytes of one `herdr` answer read, at most (`pane list` of a large session included). */
const HERDR_OUTPUT_BYTES_MAX = 1024 * 1024;
/** Characters of Herdr's error output quoted in a message. */
const HERDR_ERROR_CHARS_MAX = 300;
/** Runs whose pane IDs are kept (the newest ones). */
export const PANES_KEPT_MAX = 32;
export const PANES_FILE_BYTES_MAX = 64 * 1024;
export const PANES_SCHEMA = "pi-workflows.herdr-panes.v1";
/** How long `/piw` waits for the session view right after Pi started (or reloaded). */
export const VIEW_WAIT_MS = 5_000;
const VIEW_POLL_MS = 100;
const PRIVATE_DIR_MODE = 0o700;
const PRIVATE_FILE_MODE = 0o600;

/** What `/piw` needs from the extension. */
export interface PiwHost {
  /** The session view the widget draws (undefined until it is loaded). */
  view(): SessionView | undefined;
  /** Resolves once the server connection is up (or fails). */
  ready(): Promise<unknown>;
  notify(message: string, type: "info" | "warning" | "error"): void;
  /** The ctx of the command or shortcut (the newest one the extension has). */
  setContext(ctx: PiContext): void;
}

export class PiwUsageError extends Error {}

/** `/piw` and Ctrl+Shift+R; the widget hint to show (only when Herdr is available). */
export function registerPiw(pi: PiApi, host: PiwHost, env: NodeJS.ProcessEnv = process.env): { widgetHint?: string } {
  const piw = new Piw(host, env);
  pi.registerCommand("piw", {
    description: "show this session's workflow run in piw: a Herdr pane (right, below, left, above, tab), else how to run it",
    getArgumentCompletions: (prefix) => placementCompletions(prefix),
    handler: async (args, ctx) => {
      host.setContext(ctx);
      await piw.show(args);
    },
  });
  pi.registerShortcut(PIW_SHORTCUT, {
    description: "Show this session's workflow run in piw (a Herdr pane)",
    handler: async (ctx) => {
      host.setContext(ctx);
      await piw.show("");
    },
  });
  return { widgetHint: findHerdr(env) ? PIW_WIDGET_HINT : undefined };
}

export function placementCompletions(prefix: string): PiAutocompleteItem[] | null {
  const items = PIW_PLACEMENTS.filter((p) => p.startsWith(prefix.trim())).map((p) => ({ value: p, label: p, description: p === "tab" ? "a new Herdr tab" : `a split ${p}` }));
  return items.length > 0 ? items : null;
}

export function parsePlacement(args: string): PiwPlacement {
  const word = args.trim();
  if (word === "") return "right";
  const found = PIW_PLACEMENTS.find((p) => p === word);
  if (!found) throw new PiwUsageError(`usage: /piw [${PIW_PLACEMENTS.join("|")}] (got ${JSON.stringify(word.slice(0, 40))})`);
  return found;
}

/** The `herdr` executable when Pi runs inside Herdr (HERDR_ENV=1 and `herdr` on PATH). */
export function findHerdr(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.HERDR_ENV !== "1") return undefined;
  return onPath("herdr", env);
}

export function paneLabel(runId: string): string {
  return `piw · ${runId}`;
}

/** What to type in another terminal (piw beside the pi-workflows binary, else on PATH). */
export function terminalCommand(runId: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const words = [piwBinary(env)];
  const state = stateDir(env).dir;
  if (state !== defaultStateDir(env)) words.push("--state-dir", state);
  if (runId) words.push(runId);
  return words.map(shellWord).join(" ");
}

/** The message when no Herdr pane can be opened. */
export function terminalHint(runId: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const why = env.HERDR_ENV === "1" ? " (HERDR_ENV=1, but no herdr executable is on PATH)" : " (inside Herdr, /piw and Ctrl+Shift+R open it in a pane)";
  if (!runId) {
    return `/piw: this session has no workflow run yet; start one with /workflow start <name>. To browse every run, run \`${terminalCommand(undefined, env)}\` in another terminal.`;
  }
  return `/piw: to watch run ${runId} live, run \`${terminalCommand(runId, env)}\` in another terminal${why}.`;
}

class Piw {
  /** One `/piw` at a time: two quick presses must not open two panes. */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly host: PiwHost,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  show(args: string): Promise<void> {
    const next = this.queue.then(() => this.showNow(args));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async showNow(args: string): Promise<void> {
    let placement: PiwPlacement;
    try {
      placement = parsePlacement(args);
    } catch (error) {
      this.host.notify(`/piw: ${(error as Error).message}`, "warning");
      return;
    }
    const runId = await sessionRun(this.host);
    const herdr = findHerdr(this.env);
    if (!herdr || !runId) {
      this.host.notify(terminalHint(runId, this.env), "info");
      return;
    }
    try {
      this.host.notify(await new HerdrPanes(herdr, this.env).show(runId, placement), "info");
    } catch (error) {
      this.host.notify((error as Error).message, "warning");
    }
  }
}

/** The run the session view names (active, else the retained ended one), once it is loaded. */
async function sessionRun(host: PiwHost): Promise<string | undefined> {
  const deadline = Date.now() + VIEW_WAIT_MS;
  await Promise.race([host.ready().catch(() => undefined), sleep(VIEW_WAIT_MS)]);
  while (!host.view() && Date.now() < deadline) await sleep(VIEW_POLL_MS);
  const view = host.view();
  return view?.activeRun?.runId ?? view?.retainedTerminal?.runId;
}

interface HerdrAnswer {
  ok: boolean;
  stdout: string;
  stderr: string;
}

/** Herdr's panes for runs: find the run's pane again, or open one; then focus it. */
export class HerdrPanes {
  constructor(
    private readonly herdr: string,
    private readonly env: NodeJS.ProcessEnv = process.env,
    private readonly file: string = panesFile(env),
  ) {}

  /** Focus the run's pane (opening it first when there is none); the message to show. */
  async show(runId: string, placement: PiwPlacement): Promise<string> {
    const label = paneLabel(runId);
    const known = await this.find(runId, label);
    if (known && (await this.call(["plugin", "pane", "focus", known])).ok) {
      this.remember(runId, known);
      return `/piw: focused the Herdr pane ${known} (${label})`;
    }
    const paneId = await this.open(runId, placement);
    const notes: string[] = [];
    const renamed = await this.call(["pane", "rename", paneId, label]);
    if (!renamed.ok) notes.push(`it could not be labelled: ${said(renamed)}`);
    if (placement === "left" || placement === "above") notes.push(...(await this.moveBeforeCaller(paneId, placement)));
    this.remember(runId, paneId);
    const where = placement === "tab" ? "in a new tab" : placement;
    return `/piw: opened piw for run ${runId} in Herdr pane ${paneId} (${where})${notes.length > 0 ? `; ${notes.join("; ")}` : ""}`;
  }

  /** The pane kept for the run if it is still there with its label, else one with the label. */
  private async find(runId: string, label: string): Promise<string | undefined> {
    const kept = readPanes(this.file)[runId];
    if (kept) {
      const got = await this.call(["pane", "get", kept]);
      if (got.ok && labelOf(dig(parse(got.stdout), "result", "pane")) === label) return kept;
    }
    const listed = await this.call(["pane", "list"]);
    if (!listed.ok) return undefined;
    const panes = dig(parse(listed.stdout), "result", "panes");
    const match = Array.isArray(panes) ? panes.find((pane) => labelOf(pane) === label) : undefined;
    return paneIdOf(match);
  }

  private async open(runId: string, placement: PiwPlacement): Promise<string> {
    const opened = await this.call(openArgs(runId, placement, this.env));
    const answer = parse(opened.stdout);
    const paneId = opened.ok ? (paneIdOf(dig(answer, "result", "pane")) ?? paneIdOf(dig(answer, "result"))) : undefined;
    if (paneId) return paneId;
    const why = opened.ok ? `it answered no pane ID: ${opened.stdout.trim().slice(0, HERDR_ERROR_CHARS_MAX)}` : said(opened);
    throw new Error(
      `/piw: Herdr did not open the piw pane (${why}). If the pi-workflows plugin is not registered with Herdr yet, run ` +
        `\`${setupCommand(this.env)}\` once, then /piw again. Meanwhile: \`${terminalCommand(runId, this.env)}\` in another terminal.`,
    );
  }

  /** Herdr splits right or down only: for left / above, swap the new pane with Pi's. */
  private async moveBeforeCaller(paneId: string, placement: "left" | "above"): Promise<string[]> {
    const caller = this.env.HERDR_PANE_ID;
    if (!caller) return [`it stays ${placement === "left" ? "right" : "below"}: HERDR_PANE_ID is not set, so Pi's own pane is unknown`];
    const swapped = await this.call(["pane", "swap", "--source-pane", paneId, "--target-pane", caller]);
    return swapped.ok ? [] : [`it could not be moved ${placement}: ${said(swapped)}`];
  }

  private remember(runId: string, paneId: string): void {
    const panes = readPanes(this.file);
    delete panes[runId];
    panes[runId] = paneId;
    const kept = Object.entries(panes).slice(-PANES_KEPT_MAX);
    writePanes(this.file, Object.fromEntries(kept));
  }

  private call(args: string[]): Promise<HerdrAnswer> {
    return new Promise((resolve) => {
      execFile(this.herdr, args, { env: this.env, timeout: HERDR_TIMEOUT_MS, maxBuffer: HERDR_OUTPUT_BYTES_MAX, encoding: "utf8" }, (error, stdout, stderr) => {
        resolve({ ok: !error, stdout: String(stdout ?? ""), stderr: String(stderr ?? "") || (error ? error.message : "") });
      });
    });
  }
}

/** `herdr plugin pane open` for the run: the split (or tab) asked for, next to Pi's pane. */
export function openArgs(runId: string, placement: PiwPlacement, env: NodeJS.ProcessEnv = process.env): string[] {
  const args = ["plugin", "pane", "open", "--plugin", HERDR_PLUGIN_ID, "--entrypoint", HERDR_PANE_ENTRYPOINT];
  if (placement === "tab") {
    args.push("--placement", "tab");
  } else {
    args.push("--placement", "split", "--direction", placement === "below" || placement === "above" ? "down" : "right");
    if (env.HERDR_PANE_ID) args.push("--target-pane", env.HERDR_PANE_ID);
  }
  // The pane's process gets Herdr's environment, not Pi's: name the binary and the state.
  args.push("--env", `PIW_RUN_ID=${runId}`, "--env", `PIW_STATE_DIR=${stateDir(env).dir}`);
  const piw = piwBinary(env);
  if (path.isAbsolute(piw)) args.push("--env", `PIW_BIN=${piw}`);
  args.push("--focus");
  return args;
}

/** `<state dir>/clients/herdr-panes.json`: run → Herdr pane ID, user-only. */
export function panesFile(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(stateDir(env).dir, "clients", "herdr-panes.json");
}

/** The kept panes (a missing, oversized or malformed file is none: panes are found by label). */
export function readPanes(file: string): Record<string, string> {
  try {
    if (statSync(file).size > PANES_FILE_BYTES_MAX) return {};
    const parsed = JSON.parse(readFileSync(file, "utf8")) as { schema?: unknown; panes?: unknown };
    if (parsed?.schema !== PANES_SCHEMA || !isRecord(parsed.panes)) return {};
    return Object.fromEntries(Object.entries(parsed.panes).filter((entry): entry is [string, string] => typeof entry[1] === "string"));
  } catch {
    return {};
  }
}

/** Best effort: a file that cannot be written only means the next `/piw` finds the pane by label. */
function writePanes(file: string, panes: Record<string, string>): void {
  try {
    mkdirSync(path.dirname(file), { recursive: true, mode: PRIVATE_DIR_MODE });
    const temporary = `${file}.${process.pid}.tmp`;
    writeFileSync(temporary, `${JSON.stringify({ schema: PANES_SCHEMA, panes })}\n`, { mode: PRIVATE_FILE_MODE });
    renameSync(temporary, file);
  } catch {
    // a read-only state directory
  }
}

function piwBinary(env: NodeJS.ProcessEnv): string {
  const server = binaryCandidates(env).find(executable);
  const beside = server ? path.join(path.dirname(server), "piw") : undefined;
  return beside && executable(beside) ? beside : "piw";
}

function setupCommand(env: NodeJS.ProcessEnv): string {
  const server = binaryCandidates(env).find(executable);
  return `${server ? shellWord(server) : "pi-workflows"} herdr setup`;
}

function defaultStateDir(env: NodeJS.ProcessEnv): string {
  return path.join(env.HOME || os.homedir(), ".pi", "agent", "workflows");
}

function onPath(name: string, env: NodeJS.ProcessEnv): string | undefined {
  return (env.PATH ?? "")
    .split(path.delimiter)
    .filter(Boolean)
    .map((dir) => path.join(dir, name))
    .find(executable);
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** Herdr's JSON answer (`{"id", "result": …}`), or undefined when it is not JSON. */
function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** `value[key0][key1]…`, undefined where a step is not an object. */
function dig(value: unknown, ...keys: string[]): unknown {
  let at = value;
  for (const key of keys) at = isRecord(at) ? at[key] : undefined;
  return at;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function paneIdOf(pane: unknown): string | undefined {
  if (!isRecord(pane)) return undefined;
  const id = pane.pane_id ?? pane.id;
  return typeof id === "string" && id.length > 0 ? id : undefined;
}

function labelOf(pane: unknown): string | undefined {
  return isRecord(pane) && typeof pane.label === "string" ? pane.label : undefined;
}

function said(answer: HerdrAnswer): string {
  const text = (answer.stderr || answer.stdout).replace(/[\u0000-\u001f\u007f]+/g, " ").trim();
  return text.slice(0, HERDR_ERROR_CHARS_MAX) || "no output";
}

/** A word for a POSIX shell command line (quoted only when it needs to be). */
function shellWord(word: string): string {
  return /^[A-Za-z0-9_./:@=+-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
