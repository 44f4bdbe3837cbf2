// Run settings: the declaration a workflow makes (checked at definition time, recorded in the
// definition snapshot the server enforces) and the frozen copies nodes see.
import { canonicalByteLength, toJsonValue } from "./canonical.js";
import type { SettingsOperation, WorkflowSettings } from "./types.js";

/** Limits shared with the server (src/settings/mod.rs). */
export const SETTINGS_BYTES_MAX = 256 * 1024;
export const POINTER_BYTES_MAX = 1024;
export const DECLARED_PATHS_MAX = 64;
export const SETTINGS_DEPTH_MAX = 32;
const OPERATIONS: readonly SettingsOperation[] = ["add", "remove", "replace"];

/** What the definition snapshot records: `{initial, paths: [{path, allow}]}`, paths sorted. */
export interface SettingsSnapshot {
  initial: Record<string, unknown>;
  paths: { path: string; allow: SettingsOperation[] }[];
}

/** One numbered version of a run's settings, as the server sends it. */
export interface SettingsVersion {
  changeNumber: number;
  value: Readonly<Record<string, unknown>>;
}

export function checkSettings(settings: WorkflowSettings, fail: (what: string) => never): WorkflowSettings {
  if (!settings || typeof settings !== "object") fail("settings must be {initial, changeable}");
  const initial = settings.initial;
  if (!initial || typeof initial !== "object" || Array.isArray(initial)) fail("settings.initial must be a JSON object");
  let json: unknown;
  try {
    json = toJsonValue(initial);
  } catch (error) {
    fail(`settings.initial is not JSON: ${(error as Error).message}`);
  }
  const bytes = canonicalByteLength(json);
  if (bytes > SETTINGS_BYTES_MAX) fail(`settings.initial is ${bytes} bytes, above the ${SETTINGS_BYTES_MAX}-byte limit`);
  if (depthOf(json) > SETTINGS_DEPTH_MAX) fail(`settings.initial nests deeper than ${SETTINGS_DEPTH_MAX} levels; flatten it`);
  const changeable = settings.changeable ?? {};
  if (typeof changeable !== "object" || Array.isArray(changeable)) fail("settings.changeable must map JSON Pointers to operations");
  const entries = Object.entries(changeable);
  if (entries.length > DECLARED_PATHS_MAX) fail(`settings.changeable lists at most ${DECLARED_PATHS_MAX} paths`);
  for (const [pointer, ops] of entries) {
    const why = pointerProblem(pointer);
    if (why) fail(`settings path ${JSON.stringify(pointer)}: ${why}`);
    if (!Array.isArray(ops) || ops.length === 0 || ops.some((op) => !OPERATIONS.includes(op))) {
      fail(`settings path ${JSON.stringify(pointer)} must allow a list of add, remove or replace`);
    }
  }
  return Object.freeze({ initial: deepFreeze(json as Record<string, unknown>), changeable: Object.freeze({ ...changeable }) });
}

/** Nesting depth of a JSON value (a scalar is 0), level by level without recursion. */
function depthOf(value: unknown): number {
  let level: unknown[] = [value];
  let depth = -1;
  while (level.length > 0) {
    depth += 1;
    level = level.flatMap((item) => (item && typeof item === "object" ? Object.values(item as Record<string, unknown>) : []));
  }
  return depth;
}

function pointerProblem(pointer: string): string | undefined {
  if (Buffer.byteLength(pointer, "utf8") > POINTER_BYTES_MAX) return `a JSON Pointer is at most ${POINTER_BYTES_MAX} bytes`;
  if (pointer !== "" && !pointer.startsWith("/")) return 'a JSON Pointer is empty or starts with "/"';
  if (/~(?![01])/.test(pointer)) return '"~" must be followed by 0 or 1';
  return undefined;
}

export function settingsSnapshot(settings: WorkflowSettings): SettingsSnapshot {
  const paths = Object.entries(settings.changeable ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([path, ops]) => ({ path, allow: OPERATIONS.filter((op) => ops.includes(op)) }));
  return { initial: settings.initial, paths };
}

/** Freeze a JSON value and everything in it: a node cannot change what later nodes see. */
export function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    for (const inner of Object.values(value as Record<string, unknown>)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/** A settings version from the server (run state or a response), checked and frozen. */
export function parseSettingsVersion(raw: unknown): SettingsVersion | null {
  if (raw === null || raw === undefined) return null;
  const version = raw as { changeNumber?: unknown; value?: unknown };
  if (!Number.isInteger(version.changeNumber) || (version.changeNumber as number) < 0) return null;
  if (!version.value || typeof version.value !== "object" || Array.isArray(version.value)) return null;
  return { changeNumber: version.changeNumber as number, value: deepFreeze(version.value as Record<string, unknown>) };
}

/**
 * The newest settings version a runner knows: from its run state, then from any server answer
 * that carries a newer one. Each new node attempt takes the version current at its start.
 */
export class LiveSettings {
  private version: SettingsVersion | null;

  constructor(initial: unknown) {
    this.version = parseSettingsVersion(initial);
  }

  current(): SettingsVersion | null {
    return this.version;
  }

  /** Adopt a newer version; older or malformed ones are ignored (answers may race). */
  offer(raw: unknown): void {
    const version = parseSettingsVersion(raw);
    if (version && this.version && version.changeNumber > this.version.changeNumber) this.version = version;
  }
}
