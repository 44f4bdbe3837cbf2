// Protocol limits (docs/RUNNER-PROTOCOL.md) and the helpers that keep values inside them.
import { canonicalJson } from "../canonical.js";
import type { NodeError } from "../types.js";

export const VALUE_BYTES_MAX = 256 * 1024;
export const ERROR_MESSAGE_BYTES_MAX = 4 * 1024;
export const UPDATE_MESSAGE_BYTES_MAX = 1024;
export const NOTIFICATION_BYTES_MAX = 16 * 1024;

/** Cut `text` to at most `maxBytes` UTF-8 bytes without splitting a character. */
export function truncateUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, "utf8") <= maxBytes) return text;
  const bytes = Buffer.from(text, "utf8").subarray(0, Math.max(0, maxBytes - 3));
  // Drop a trailing partial character (the decoder would turn it into U+FFFD).
  return bytes.toString("utf8").replace(/\uFFFD+$/, "") + "…";
}

export function nodeError(code: string, message: string): NodeError {
  return { code, message: truncateUtf8(message, ERROR_MESSAGE_BYTES_MAX) };
}

export function errorFrom(error: unknown, code = "nodeFailed"): NodeError {
  const message = error instanceof Error ? error.message : String(error);
  return nodeError(code, message || "failed without a message");
}

export class OutputError extends Error {
  constructor(
    readonly code: "invalidOutput" | "outputTooLarge",
    message: string,
  ) {
    super(message);
  }
}

/** The JSON value of a node output, checked against the 256 KiB limit (one encoding). */
export function checkedOutput(value: unknown): unknown {
  return measuredOutput(value).value;
}

/**
 * `checkedOutput` with the size of its canonical JSON: a runner that gathers results into one
 * frame keeps the frame under its limit without encoding the value again.
 */
export function measuredOutput(value: unknown): { value: unknown; bytes: number } {
  let text: string;
  try {
    text = value === undefined ? "null" : canonicalJson(value);
  } catch (error) {
    throw new OutputError("invalidOutput", `output is not JSON: ${(error as Error).message}`);
  }
  const size = Buffer.byteLength(text, "utf8");
  if (size > VALUE_BYTES_MAX) {
    throw new OutputError("outputTooLarge", `output is ${size} bytes of JSON; the limit is ${VALUE_BYTES_MAX}`);
  }
  return { value: JSON.parse(text) as unknown, bytes: size };
}
