// Turning an agent's reply text into a node output, and the prompt of a headless agent step.
import { sha256Hex } from "../canonical.js";
import { truncateUtf8 } from "./limits.js";

/** Parse a JSON submission, tolerating a fenced block or prose around one object/array. */
export function parseAgentJson(text: string): unknown {
  const trimmed = text.trim();
  const attempts = [trimmed];
  const fenced = /```(?:json)?\s*\n([\s\S]*?)```/.exec(trimmed);
  if (fenced?.[1]) attempts.push(fenced[1].trim());
  const firstObject = trimmed.search(/[[{]/);
  if (firstObject >= 0) {
    const close = trimmed[firstObject] === "{" ? "}" : "]";
    const last = trimmed.lastIndexOf(close);
    if (last > firstObject) attempts.push(trimmed.slice(firstObject, last + 1));
  }
  for (const candidate of attempts) {
    try {
      return JSON.parse(candidate);
    } catch {
      // try the next reading
    }
  }
  throw new Error("the agent reply is not JSON");
}

/** The prompt and contract of a decision node. */
export function decisionPrompt(question: string, choices: readonly string[], field: string): { prompt: string; expectedOutput: string } {
  const options = choices.map((choice) => JSON.stringify(choice)).join(" | ");
  return {
    prompt: `${question}\n\nAnswer with exactly one of: ${choices.join(", ")}.`,
    expectedOutput: `{ ${JSON.stringify(field)}: ${options} }`,
  };
}

export function checkDecision(output: unknown, choices: readonly string[], field: string): unknown {
  const value = (output as Record<string, unknown> | null)?.[field];
  if (typeof value !== "string" || !choices.includes(value)) {
    throw new Error(`the answer must set "${field}" to one of: ${choices.join(", ")}`);
  }
  return output;
}

// The prompt of a headless agent step (src/agent/executor.ts sends it; the bridge extension takes
// the submission). Its wording follows the interactive step message (src/extension/messages.ts)
// so a model meets one contract in both modes. Issue 16 item 7: the prompt stays bounded; a text
// over its bound becomes its size, digest and an excerpt.

/** A prompt text (the step's prompt, or its expected output) longer than this is cut (UTF-8 bytes). */
export const PROMPT_TEXT_BYTES_MAX = 64 * 1024;
/** What is kept of a cut prompt text: its first bytes, then its size and digest. */
export const PROMPT_EXCERPT_BYTES = 16 * 1024;
/** An expected-output description longer than this is cut the same way. */
export const EXPECTED_OUTPUT_BYTES_MAX = 8 * 1024;
/** Its excerpt. */
export const EXPECTED_OUTPUT_EXCERPT_BYTES = 2 * 1024;

/** `text` unchanged when it fits `maxBytes`, else its first `excerptBytes`, its size and its SHA-256. */
export function boundedPromptText(text: string, maxBytes = PROMPT_TEXT_BYTES_MAX, excerptBytes = PROMPT_EXCERPT_BYTES): string {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes <= maxBytes) return text;
  const excerpt = truncateUtf8(text, excerptBytes);
  return `${excerpt}\n[pi-workflows cut this text: ${bytes} bytes in all, sha256 ${sha256Hex(text)}; only its first ${excerptBytes} bytes are shown]`;
}

export interface HeadlessStep {
  requestId: string;
  prompt: string;
  /** The JSON contract (agent `expectedOutput` text, or a decision's); absent: the answer is text. */
  expectedOutput?: string;
  workflow?: string;
  nodePath?: string;
  /** A text answer's limit (assistantMessage({maxChars})). */
  maxChars?: number;
}

function stepHeader(step: HeadlessStep, reason = ""): string {
  const where = [step.workflow, step.nodePath].filter((part) => typeof part === "string" && part.length > 0).join(" › ") || "workflow step";
  return `Workflow step: ${where}${reason}`;
}

function expectedLine(step: HeadlessStep): string {
  if (step.expectedOutput !== undefined && step.expectedOutput.trim() !== "") {
    return `Expected output: ${boundedPromptText(step.expectedOutput, EXPECTED_OUTPUT_BYTES_MAX, EXPECTED_OUTPUT_EXCERPT_BYTES)}`;
  }
  const limit = step.maxChars !== undefined ? ` of at most ${step.maxChars} characters` : "";
  return `Expected output: your answer as one JSON string${limit}.`;
}

function submitLine(step: HeadlessStep): string {
  return `When you are done, call the \`workflow\` tool with {"action": "submit", "requestId": "${step.requestId}", "output": <the expected output as JSON>}.`;
}

/** The first prompt of a headless step. */
export function headlessStepPrompt(step: HeadlessStep): string {
  return [
    stepHeader(step),
    "",
    boundedPromptText(step.prompt),
    "",
    expectedLine(step),
    "",
    submitLine(step),
    "If the submission is rejected, read the message, fix the output and submit again with the same requestId.",
    "Once it is accepted, end your turn. Your final reply text is not the step's output: only an accepted submission is.",
  ].join("\n");
}

/** The prompt after a turn that ended without an accepted submission (`reminder` counts from 1). */
export function headlessReminder(step: HeadlessStep, reminder: number, remindersMax: number, lastRejection?: string): string {
  const lines = [
    stepHeader(step, " (reminder: this step is still open)"),
    "",
    `Your turn ended without an accepted submission (reminder ${reminder} of ${remindersMax}; after the last one the step fails).`,
  ];
  if (lastRejection) lines.push(`The last submission was rejected: ${boundedPromptText(lastRejection, EXPECTED_OUTPUT_BYTES_MAX, EXPECTED_OUTPUT_EXCERPT_BYTES)}`);
  lines.push("", expectedLine(step), "", submitLine(step));
  return lines.join("\n");
}
