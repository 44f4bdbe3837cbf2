// The widget and the status line: drawn from the server's `display` of the session's run and
// nothing else (renderers never derive a status). After a disconnect the last picture stays,
// marked stale; it grants nothing (commands and the tool go to the server, which decides).
import type { JsonObject } from "../client/protocol.js";
import type { SessionView, ViewRun } from "./session-view.js";

/** Lines the widget draws, at most (the spec's bound), the scroll hint included. */
export const WIDGET_LINES_MAX = 10;
/** Characters of one widget line, at most (Pi wraps nothing in a string widget). */
export const WIDGET_LINE_CHARS_MAX = 160;
/** Request updates listed, at most (the view carries the newest 20). */
export const WIDGET_UPDATES_MAX = 20;

export const WIDGET_KEY = "pi-workflows";
export const STATUS_KEY = "pi-workflows";

const GLYPHS: Record<string, string> = {
  queued: "◌",
  running: "▶",
  waiting: "⏳",
  paused: "⏸",
  completed: "✔",
  failed: "✘",
  timed_out: "⌛",
  cancelled: "■",
  ambiguous: "⚠",
};

const isObject = (value: unknown): value is JsonObject => value !== null && typeof value === "object" && !Array.isArray(value);
const str = (value: unknown): string | undefined => (typeof value === "string" && value.length > 0 ? value : undefined);

function clip(line: string): string {
  const flat = line.replace(/[\u0000-\u001f\u007f]/g, " ");
  return flat.length <= WIDGET_LINE_CHARS_MAX ? flat : `${flat.slice(0, WIDGET_LINE_CHARS_MAX - 1)}…`;
}

function nodeOf(display: JsonObject): string | undefined {
  const node = isObject(display.currentNode) ? display.currentNode : isObject(display.waitingOn) ? display.waitingOn : undefined;
  return node ? (str(node.nodePath) ?? str(node.nodeId)) : undefined;
}

export interface WidgetState {
  view?: SessionView;
  stale: boolean;
  /** The first content line shown (Shift+Up / Shift+Down move it). */
  scroll: number;
  /** A problem the user must fix (shown instead of a run). */
  problem?: string;
  scrollHint?: string;
  /** `Ctrl+Shift+R piw`, only when Herdr is available (piw.ts). */
  piwHint?: string;
}

function runOf(view: SessionView | undefined): { run: ViewRun; retained: boolean } | undefined {
  if (view?.activeRun) return { run: view.activeRun, retained: false };
  if (view?.retainedTerminal) return { run: view.retainedTerminal, retained: true };
  return undefined;
}

/** Every line the widget could show, before the window. */
export function widgetContent(state: WidgetState): string[] {
  if (state.problem && !state.view) return [state.problem];
  const shown = runOf(state.view);
  if (!shown) return [];
  const { run, retained } = shown;
  const display = run.display;
  const status = str(display.status) ?? "unknown";
  const node = nodeOf(display);
  const lines = [
    `${GLYPHS[status] ?? "?"} wf ${run.workflowName ?? "workflow"} · ${status}${node ? ` · ${node}` : ""}${retained ? " (ended; /workflow clear)" : ""}${state.stale ? " · stale: reconnecting" : ""}`,
  ];
  const activity = isObject(display.activity) ? display.activity : undefined;
  const activityKind = str(activity?.kind);
  if (activityKind && activityKind !== "none") lines.push(`  activity: ${activityKind}${str(activity?.state) ? ` (${activity?.state as string})` : ""}`);
  const reason = isObject(display.reason) ? display.reason : undefined;
  if (reason) lines.push(`  ${str(reason.code) ?? "reason"}: ${str(reason.message) ?? ""}`);
  const request = isObject(display.request) ? display.request : undefined;
  if (request) {
    lines.push(`  waiting for: ${str(request.kind) ?? "input"} ${str(request.requestId) ?? ""}`.trimEnd());
    const updates = Array.isArray(request.updates) ? request.updates.filter(isObject).slice(-WIDGET_UPDATES_MAX) : [];
    for (const update of updates) lines.push(`  · ${str(update.type) ?? "?"}/${str(update.key) ?? "?"}${str(update.dataJson) ? ` ${update.dataJson as string}` : ""}`);
  }
  const controls = Array.isArray(display.controls) ? display.controls.filter((c): c is string => typeof c === "string") : [];
  if (controls.length > 0) lines.push(`  controls: ${controls.join(", ")}`);
  if (state.piwHint) lines.push(`  ${state.piwHint}`);
  const pending = state.view?.messages.filter((m) => m.status === "pending").length ?? 0;
  if (pending > 0) lines.push(`  ${pending} workflow message${pending === 1 ? "" : "s"} to deliver`);
  if (state.problem) lines.push(`  ${state.problem}`);
  return lines.map(clip);
}

/** The lines to draw (≤ WIDGET_LINES_MAX), or undefined to remove the widget. */
export function widgetLines(state: WidgetState): string[] | undefined {
  const content = widgetContent(state);
  if (content.length === 0) return undefined;
  if (content.length <= WIDGET_LINES_MAX) return content;
  const room = WIDGET_LINES_MAX - 1; // one line for the scroll hint
  const maxScroll = content.length - room;
  const scroll = Math.max(0, Math.min(state.scroll, maxScroll));
  const window = content.slice(scroll, scroll + room);
  window.push(clip(`  lines ${scroll + 1}-${scroll + room} of ${content.length}${state.scrollHint ? ` · ${state.scrollHint}` : ""}`));
  return window;
}

/** Clamp a scroll position to the content. */
export function clampScroll(state: WidgetState, scroll: number): number {
  const length = widgetContent(state).length;
  return Math.max(0, Math.min(scroll, Math.max(0, length - (WIDGET_LINES_MAX - 1))));
}

/** The status line: `wf <name> <status> <node>`, or undefined to clear it. */
export function statusLine(state: WidgetState): string | undefined {
  const shown = runOf(state.view);
  if (!shown) return state.problem ? "wf unavailable" : undefined;
  const display = shown.run.display;
  const node = nodeOf(display);
  return clip(`wf ${shown.run.workflowName ?? "workflow"} ${str(display.status) ?? "unknown"}${node ? ` ${node}` : ""}${state.stale ? " (stale)" : ""}`);
}
