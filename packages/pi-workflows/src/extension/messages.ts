// What a workflow message becomes in the Pi conversation: one custom message per workflow
// message, its kind in `customType`, the hidden workflow message ID in `details` (never shown
// to the model: Pi keeps `details` out of model requests), and a text that tells the model
// exactly what to do. The coordinator finds a sent message again by that hidden ID.
import { boundedPromptText, EXPECTED_OUTPUT_BYTES_MAX, EXPECTED_OUTPUT_EXCERPT_BYTES, PROMPT_EXCERPT_BYTES } from "../engine/agent-output.js";
import { truncateUtf8 } from "../engine/limits.js";
import type { PiSessionEntry } from "./pi-types.js";
import type { MessageKind, ViewMessage } from "./session-view.js";

export const CUSTOM_TYPES: Readonly<Record<MessageKind, string>> = Object.freeze({
  step: "pi-workflows-step",
  decision: "pi-workflows-decision",
  notification: "pi-workflows-notification",
  terminal: "pi-workflows-terminal",
  followUp: "pi-workflows-follow-up",
});
const OUR_TYPES = new Set(Object.values(CUSTOM_TYPES));

/**
 * The longest prompt text put into one message. The server bounds what it stores; this bounds
 * what one message adds to the model's context (an earlier implementation overflowed a context
 * with an 815 KB prompt).
 */
export const MESSAGE_TEXT_CHARS_MAX = 64 * 1024;

/** Stored in the custom message's `details`: Pi keeps it, the model never sees it. */
export interface HiddenDetails {
  schema: "pi-workflows.message-details.v1";
  workflowMessageId: string;
  runId: string;
  kind: MessageKind;
  reason?: string;
  requestId?: string;
  /** What the renderer shows: the content as the server stored it. */
  content: unknown;
}

export interface OutgoingMessage {
  customType: string;
  content: string;
  display: boolean;
  details: HiddenDetails;
}

/**
 * Whether sending a message starts a model turn. Decisions and notifications never do. Neither
 * does a checkpoint step: it waits for an answer (a person's `/workflow answer`, or the model's
 * `answer` action in a later turn), and a model turn started for it could only end without one.
 * Nor does a cancelled run's terminal message: a person cancelled it, so it is passive.
 */
export function triggersTurn(message: Pick<ViewMessage, "kind" | "content">): boolean {
  if (message.kind === "step") return stepForm(message.content) !== "checkpoint";
  if (message.kind === "terminal") return !(isObject(message.content) && message.content.outcome === "cancelled");
  return message.kind === "followUp";
}

const isObject = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === "object" && !Array.isArray(value);
const str = (value: unknown): string | undefined => (typeof value === "string" && value.length > 0 ? value : undefined);

function bounded(text: string): string {
  if (text.length <= MESSAGE_TEXT_CHARS_MAX) return text;
  return `${text.slice(0, MESSAGE_TEXT_CHARS_MAX)}\n[… ${text.length - MESSAGE_TEXT_CHARS_MAX} more characters cut by pi-workflows]`;
}

function json(value: unknown): string {
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** The step's request: its source ID (`req:<attempt>`), else one the contract names. */
export function requestIdOf(message: Pick<ViewMessage, "sourceId" | "content">): string | undefined {
  if (message.sourceId) return message.sourceId;
  const content = message.content;
  if (isObject(content)) return str(content.requestId) ?? (str(content.attemptId) ? `req:${content.attemptId as string}` : undefined);
  return undefined;
}

export type StepForm = "submit" | "assistant" | "checkpoint";

/** How a step is answered, from its contract (packages/pi-workflows/src/engine/interactive-node.ts). */
export function stepForm(content: unknown): StepForm {
  if (isObject(content)) {
    if (content.form === "assistantMessage") return "assistant";
    if (typeof content.summary === "string" && content.prompt === undefined) return "checkpoint";
  }
  return "submit";
}

/** The text the model reads for a step: the prompt, the expected output and how to submit it. */
export function stepText(message: ViewMessage): string {
  const content = isObject(message.content) ? message.content : {};
  const requestId = requestIdOf(message) ?? "(unknown: run /workflow status)";
  const where = [str(content.workflow), str(content.nodePath)].filter(Boolean).join(" › ") || "workflow step";
  const reason = message.reason === "reminder" ? " (reminder: this step is still open)" : message.reason === "resumed" ? " (resumed)" : "";
  const lines = [`Workflow step: ${where}${reason}`, ""];
  const form = stepForm(content);
  if (form === "checkpoint") {
    lines.push(str(content.summary) ?? "(no summary)", "");
    lines.push(
      `This is a checkpoint; a person answers it with /workflow answer ${message.runId} <json|text>.`,
      `When the user asks you to answer it, call the \`workflow\` tool with {"action": "answer", "runId": "${message.runId}", "input": <the answer as JSON>}, then end your turn.`,
    );
    return bounded(lines.join("\n"));
  }
  // One bound for prompts in both modes (the headless bridge uses it too): a prompt over 64 KiB
  // becomes its first 16 KiB, its size and its digest; here the tool reads the rest.
  const prompt = str(content.prompt) ?? "(no prompt)";
  const shown = boundedPromptText(prompt);
  lines.push(shown, "");
  if (shown !== prompt) {
    // Where the excerpt stops: truncateUtf8 ends a cut text with one "…" of its own.
    const from = truncateUtf8(prompt, PROMPT_EXCERPT_BYTES).length - 1;
    lines.push(`To read the rest of the prompt, call the \`workflow\` tool with {"action": "read-step", "requestId": "${requestId}", "offset": ${from}}.`, "");
  }
  if (form === "assistant") {
    const limit = typeof content.maxChars === "number" ? ` of at most ${content.maxChars} characters` : "";
    lines.push(
      `Answer with your visible reply${limit}: your final message of this turn is the step's output.`,
      "Do not call the `workflow` tool to submit it; just reply and end your turn.",
    );
    return bounded(lines.join("\n"));
  }
  const expected = str(content.expectedOutput);
  if (expected) lines.push(`Expected output: ${boundedPromptText(expected, EXPECTED_OUTPUT_BYTES_MAX, EXPECTED_OUTPUT_EXCERPT_BYTES)}`, "");
  lines.push(
    `When you are done, call the \`workflow\` tool with {"action": "submit", "requestId": "${requestId}", "output": <the expected output as JSON>}.`,
    "If the submission is rejected, read the message, fix the output and submit again with the same requestId.",
    "Once it is accepted, end your turn: the next step arrives only after your turn ends. Do not wait, sleep or poll for it.",
  );
  return bounded(lines.join("\n"));
}

/** A protected decision's card: its presentation, choices (with what text each asks) and deadline. */
function decisionText(message: ViewMessage): string {
  const content = isObject(message.content) ? message.content : {};
  const decision = isObject(content.decision) ? content.decision : {};
  const presentation = isObject(decision.presentation) ? decision.presentation : {};
  const choices = Array.isArray(decision.choices) ? decision.choices.filter(isObject) : [];
  const lines = [
    `Workflow decision for a person: ${str(decision.title) ?? "(untitled)"}`,
    `(${[str(content.workflow), str(content.nodePath)].filter(Boolean).join(" › ")})`,
    "",
    str(presentation.summary) ?? "",
    ...presentationBlocks(presentation.blocks),
    "",
    "Choices:",
    ...choices.map((choice) => {
      const input = isObject(choice.input) ? choice.input : undefined;
      return `  ${str(choice.id) ?? "?"}: ${str(choice.label) ?? ""}${input ? ` (with text: ${str(input.label) ?? "text"})` : ""}`;
    }),
  ];
  const deadline = typeof decision.deadlineAt === "number" ? new Date(decision.deadlineAt).toISOString() : undefined;
  const fallback = isObject(decision.onTimeout) ? str(decision.onTimeout.choice) : undefined;
  if (deadline) lines.push("", fallback ? `If nobody answers by ${deadline}, ${fallback} applies.` : `Answer by ${deadline}; after that the step times out.`);
  lines.push(
    "",
    `A person answers this with /workflow answer ${message.runId} <choice> [text]. Do not answer it yourself: the workflow tool refuses decisions.`,
  );
  return bounded(lines.filter((line, index, all) => line !== "" || (index > 0 && all[index - 1] !== "")).join("\n"));
}

/** A presentation's blocks as plain lines: text, `label: value` fields, fenced code. */
function presentationBlocks(blocks: unknown): string[] {
  if (!Array.isArray(blocks)) return [];
  return blocks.filter(isObject).flatMap((block) => {
    if (block.kind === "text") return ["", str(block.text) ?? ""];
    if (block.kind === "code") return ["", "```" + (str(block.language) ?? ""), str(block.text) ?? "", "```"];
    if (block.kind === "fields" && Array.isArray(block.fields)) {
      return ["", ...block.fields.filter(isObject).map((field) => `${str(field.label) ?? ""}: ${typeof field.value === "string" ? field.value : ""}`)];
    }
    return [];
  });
}

function notificationText(message: ViewMessage): string {
  const content = isObject(message.content) ? message.content : {};
  const text = boundedPromptText(str(content.message) ?? str(content.text) ?? json(message.content));
  return bounded(`Workflow notification${str(content.kind) ? ` (${content.kind as string})` : ""}: ${text}`);
}

function terminalText(message: ViewMessage): string {
  const content = isObject(message.content) ? message.content : {};
  const outcome = str(content.outcome) ?? str(content.status) ?? "ended";
  const lines = [`Workflow run ${message.runId} ${outcome}.`];
  const error = isObject(content.error) ? str(content.error.message) : str(content.error);
  if (error) lines.push(`Reason: ${error}`);
  if (content.output !== undefined) lines.push("", `Result: ${json(content.output)}`);
  lines.push("", "Tell the user briefly how it ended; the workflow needs nothing more from you.");
  return bounded(lines.join("\n"));
}

function followUpText(message: ViewMessage): string {
  const content = message.content;
  return bounded((isObject(content) ? (str(content.prompt) ?? json(content)) : str(content)) ?? "(empty follow-up)");
}

/** The custom message that carries `message` into the conversation. */
export function outgoing(message: ViewMessage): OutgoingMessage {
  const text =
    message.kind === "step"
      ? stepText(message)
      : message.kind === "decision"
        ? decisionText(message)
        : message.kind === "notification"
          ? notificationText(message)
          : message.kind === "terminal"
            ? terminalText(message)
            : followUpText(message);
  const requestId = message.kind === "step" || message.kind === "decision" ? requestIdOf(message) : undefined;
  return {
    customType: CUSTOM_TYPES[message.kind],
    content: text,
    display: true,
    details: {
      schema: "pi-workflows.message-details.v1",
      workflowMessageId: message.workflowMessageId,
      runId: message.runId,
      kind: message.kind,
      ...(message.reason ? { reason: message.reason } : {}),
      ...(requestId ? { requestId } : {}),
      content: message.content,
    },
  };
}

/** The workflow message ID a session entry carries, if it is one of ours. */
export function hiddenIdOf(entry: PiSessionEntry): string | undefined {
  if (entry.type !== "custom_message" || entry.customType === undefined || !OUR_TYPES.has(entry.customType)) return undefined;
  const details = entry.details;
  return isObject(details) ? str(details.workflowMessageId) : undefined;
}

/**
 * The messages on `branch` that present a step's or decision's source (its run and request),
 * with the first entry that carries each.
 */
export function sourcesOnBranch(branch: readonly PiSessionEntry[]): { workflowMessageId: string; piEntryId: string; runId: string; requestId: string }[] {
  const found = new Map<string, { workflowMessageId: string; piEntryId: string; runId: string; requestId: string }>();
  for (const entry of branch) {
    const workflowMessageId = hiddenIdOf(entry);
    const details = entry.details as Record<string, unknown> | undefined;
    if (workflowMessageId === undefined || found.has(workflowMessageId) || !isObject(details)) continue;
    const runId = str(details.runId);
    const requestId = str(details.requestId);
    if (runId !== undefined && requestId !== undefined) found.set(workflowMessageId, { workflowMessageId, piEntryId: entry.id, runId, requestId });
  }
  return [...found.values()];
}

/** Every workflow message ID on `branch`, with the first entry that carries it. */
export function findOnBranch(branch: readonly PiSessionEntry[]): Map<string, string> {
  const found = new Map<string, string>();
  for (const entry of branch) {
    const id = hiddenIdOf(entry);
    if (id !== undefined && !found.has(id)) found.set(id, entry.id);
  }
  return found;
}
