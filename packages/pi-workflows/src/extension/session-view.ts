// The origin-session view (`pi-workflows.session-view.v1`, docs/SESSIONS.md) as the extension
// reads it. Parsing is defensive: a field of the wrong type is treated as absent, so a server
// that is newer or older than this package never breaks the Pi session; it only shows less.
import type { JsonObject } from "../client/protocol.js";

export const SESSION_VIEW_SCHEMA = "pi-workflows.session-view.v1";

export type MessageKind = "step" | "decision" | "notification" | "terminal" | "followUp";
const MESSAGE_KINDS: readonly MessageKind[] = ["step", "decision", "notification", "terminal", "followUp"];

export interface ViewMessage {
  workflowMessageId: string;
  runId: string;
  kind: MessageKind;
  reason?: string;
  sourceId?: string;
  order: number;
  status: "pending" | "sent" | "cancelled" | string;
  piEntryId?: string;
  content: unknown;
}

export interface ViewRun {
  runId: string;
  workflowName?: string;
  revision?: number;
  display: JsonObject;
}

export interface SessionView {
  activeRun?: ViewRun;
  retainedTerminal?: ViewRun;
  messages: ViewMessage[];
  messageCount: number;
  truncated: boolean;
  coordinator?: { epoch: number; active: boolean };
  nextEligible?: string;
  openTurn?: { turnId: string; workflowMessageId?: string; runId?: string };
}

const isObject = (value: unknown): value is JsonObject => value !== null && typeof value === "object" && !Array.isArray(value);
const text = (value: unknown): string | undefined => (typeof value === "string" && value.length > 0 ? value : undefined);

function run(value: unknown): ViewRun | undefined {
  if (!isObject(value) || !text(value.runId)) return undefined;
  return {
    runId: value.runId as string,
    workflowName: text(value.workflowName),
    revision: typeof value.revision === "number" ? value.revision : undefined,
    display: isObject(value.display) ? value.display : {},
  };
}

function message(value: unknown): ViewMessage | undefined {
  if (!isObject(value)) return undefined;
  const id = text(value.workflowMessageId);
  const kind = MESSAGE_KINDS.find((k) => k === value.kind);
  if (!id || !kind) return undefined;
  return {
    workflowMessageId: id,
    runId: text(value.runId) ?? "",
    kind,
    reason: text(value.reason),
    sourceId: text(value.sourceId),
    order: typeof value.order === "number" ? value.order : 0,
    status: text(value.status) ?? "pending",
    piEntryId: text(value.piEntryId),
    content: value.content,
  };
}

/** Read a session view; `undefined` when it is not one. */
export function parseSessionView(value: unknown): SessionView | undefined {
  if (!isObject(value) || value.schema !== SESSION_VIEW_SCHEMA) return undefined;
  const messages = Array.isArray(value.messages) ? value.messages.map(message).filter((m): m is ViewMessage => m !== undefined) : [];
  const coordinator = isObject(value.coordinator) && typeof value.coordinator.epoch === "number"
    ? { epoch: value.coordinator.epoch, active: value.coordinator.active === true }
    : undefined;
  const openTurn = isObject(value.openTurn) && text(value.openTurn.turnId)
    ? { turnId: value.openTurn.turnId as string, workflowMessageId: text(value.openTurn.workflowMessageId), runId: text(value.openTurn.runId) }
    : undefined;
  return {
    activeRun: run(value.activeRun),
    retainedTerminal: run(value.retainedTerminal),
    messages,
    messageCount: typeof value.messageCount === "number" ? value.messageCount : messages.length,
    truncated: value.truncated === true,
    coordinator,
    nextEligible: text(value.nextEligible),
    openTurn,
  };
}
