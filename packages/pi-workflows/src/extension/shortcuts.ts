// Widget scrolling keys: Shift+Up / Shift+Down by default, remappable or removable in
// `<config dir>/shortcuts.json` (`PI_WORKFLOWS_CONFIG_DIR`, default ~/.config/pi-workflows),
// because these keys clashed with another extension before:
//   {"schema": "pi-workflows.shortcuts.v1", "scrollUp": "alt+k", "scrollDown": null}
// A missing file means the defaults. A malformed one gives one bounded warning and the
// defaults; a single bad key drops only that direction (with the same one warning).
import { readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export const SHORTCUTS_SCHEMA = "pi-workflows.shortcuts.v1";
export const SHORTCUTS_FILE_BYTES_MAX = 16 * 1024;
export const DEFAULT_SHORTCUTS = Object.freeze({ scrollUp: "shift+up", scrollDown: "shift+down" });
/** Keys Pi uses itself (pi-api.md §3.3) and the one the Herdr action keeps. */
export const RESERVED_KEYS: ReadonlySet<string> = new Set([
  "escape",
  "ctrl+c",
  "ctrl+d",
  "ctrl+p",
  "ctrl+l",
  "ctrl+o",
  "ctrl+t",
  "ctrl+x",
  "ctrl+g",
  "ctrl+z",
  "alt+enter",
  "alt+up",
  "shift+tab",
  "ctrl+shift+r",
]);
const KEY = /^(?:(?:ctrl|shift|alt|super)\+){0,3}(?:[a-z0-9]|up|down|left|right|pageup|pagedown|home|end|f[1-9]|f1[0-2]|[`\-=[\]\\;',./])$/;

export interface Shortcuts {
  scrollUp?: string;
  scrollDown?: string;
  /** One message when the file was not usable as it is. */
  warning?: string;
}

export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.PI_WORKFLOWS_CONFIG_DIR ? path.resolve(env.PI_WORKFLOWS_CONFIG_DIR) : path.join(env.HOME || os.homedir(), ".config", "pi-workflows");
}

export function loadShortcuts(env: NodeJS.ProcessEnv = process.env): Shortcuts {
  const file = path.join(configDir(env), "shortcuts.json");
  let text: string;
  try {
    const size = statSync(file).size;
    if (size > SHORTCUTS_FILE_BYTES_MAX) return { ...DEFAULT_SHORTCUTS, warning: `${file} is ${size} bytes, above ${SHORTCUTS_FILE_BYTES_MAX}; using Shift+Up/Shift+Down` };
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { ...DEFAULT_SHORTCUTS };
    return { ...DEFAULT_SHORTCUTS, warning: `${file} could not be read (${(error as NodeJS.ErrnoException).code ?? "error"}); using Shift+Up/Shift+Down` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ...DEFAULT_SHORTCUTS, warning: `${file} is not JSON; using Shift+Up/Shift+Down. Expected {"schema":"${SHORTCUTS_SCHEMA}","scrollUp":"shift+up","scrollDown":"shift+down"} (a key, or null to remove it)` };
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed) || (parsed as Record<string, unknown>).schema !== SHORTCUTS_SCHEMA) {
    return { ...DEFAULT_SHORTCUTS, warning: `${file} must be an object with "schema": "${SHORTCUTS_SCHEMA}"; using Shift+Up/Shift+Down` };
  }
  const object = parsed as Record<string, unknown>;
  const problems: string[] = [];
  const unknown = Object.keys(object).filter((key) => !["schema", "scrollUp", "scrollDown"].includes(key));
  if (unknown.length > 0) problems.push(`unknown field ${JSON.stringify(unknown[0].slice(0, 40))}`);
  const result: Shortcuts = {};
  for (const direction of ["scrollUp", "scrollDown"] as const) {
    const value = object[direction];
    if (value === undefined) result[direction] = DEFAULT_SHORTCUTS[direction];
    else if (value === null) result[direction] = undefined;
    else if (typeof value !== "string" || !KEY.test(value.toLowerCase())) problems.push(`${direction} is not a key like "shift+up" (or null)`);
    else if (RESERVED_KEYS.has(value.toLowerCase())) problems.push(`${direction} "${value}" is a key Pi or pi-workflows uses`);
    else result[direction] = value.toLowerCase();
  }
  if (result.scrollUp !== undefined && result.scrollUp === result.scrollDown) {
    problems.push("scrollUp and scrollDown are the same key");
    result.scrollDown = undefined;
  }
  if (problems.length > 0) result.warning = `${file}: ${problems.slice(0, 3).join("; ")}; those shortcuts are not registered`;
  return result;
}
