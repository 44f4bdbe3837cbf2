// pi-workflows.client.v1 in TypeScript: the closed vocabularies, frame decoding and envelope
// validation with the same rules, order and error codes as the Rust side
// (src/protocol/frame.rs, validate.rs); both pass protocol/fixtures/client.v1.json.
import { canonicalJson } from "../canonical.js";

export const CLIENT_SCHEMA_V1 = "pi-workflows.client.v1";
export const FRAME_BYTES_MAX = 1024 * 1024;
export const OPAQUE_ID_BYTES_MIN = 1;
export const OPAQUE_ID_BYTES_MAX = 256;
/** The characters of an opaque ID (the Rust side's `is_opaque_id_char`): no spaces, control
 * characters, quotes or slashes, so an ID never breaks a line or names another path. */
export const OPAQUE_ID_PATTERN = /^[A-Za-z0-9._:@|+=~-]+$/;
export const REVISION_MAX = Number.MAX_SAFE_INTEGER;
export const PACKAGE_VERSION_BYTES_MAX = 128;
export const ERROR_CODE_BYTES_MAX = 128;
export const ERROR_MESSAGE_BYTES_MAX = 4096;
/** serde_json's nesting limit: deeper values are not JSON to the Rust side either. */
export const JSON_DEPTH_MAX = 128;

// The operation list is compared with Rust's and the schema's by tests/protocol_vocabulary.rs.
// operations:begin
export const OPERATIONS = [
  "run.start",
  "run.pause",
  "run.resume",
  "run.cancel",
  "run.restart",
  "run.changeSettings",
  "run.status",
  "run.list",
  "workflow.list",
  "effect.list",
  "effect.recover",
  "checkpoint.answer",
  "decision.answer",
  "interaction.submit",
  "interaction.assistant",
  "interaction.update",
  "followUp.queue",
  "followUp.remove",
  "workflowMessage.reportBranch",
  "workflowTurn.report",
  "sessionView.clearTerminal",
  "session.record",
  "channel.status",
  "channel.reload",
  "channel.recover",
  "resourceManager.list",
  "resourceManager.get",
  "resourceManager.apply",
  "resourceManager.reconcile",
  "resourceManager.delete",
  "server.status",
  "server.stop",
  "view.runs.watch",
  "view.runs.page",
  "view.run.get",
  "view.run.watch",
  "view.run.unwatch",
  "view.page",
  "view.content",
  "view.session.watch",
  "view.session.window",
  "view.unwatch",
  "state.status",
  "state.verify",
  "state.backup",
  "state.prune",
] as const;
// operations:end

export const OUTCOMES = ["accepted", "adopted", "rejected", "conflict", "notFound", "claimLost", "unavailable"] as const;
export const EVENT_KINDS = ["runs", "run_snapshot", "run_patch", "run_page", "session_snapshot", "unavailable"] as const;

export type Operation = (typeof OPERATIONS)[number];
export type Outcome = (typeof OUTCOMES)[number];
export type EventKind = (typeof EVENT_KINDS)[number];
export type JsonObject = Record<string, unknown>;

export interface Hello {
  schema: typeof CLIENT_SCHEMA_V1;
  type: "hello";
  connectionId: string;
  packageVersion: string;
}
export interface Request {
  schema: typeof CLIENT_SCHEMA_V1;
  type: "request";
  requestId: string;
  clientId: string;
  operation: Operation;
  idempotencyKey?: string;
  runId?: string;
  expectedRevision?: number;
  payload: JsonObject;
}
export interface ResponseError {
  code: string;
  message: string;
}
export interface Response {
  schema: typeof CLIENT_SCHEMA_V1;
  type: "response";
  requestId: string;
  outcome: Outcome;
  revision?: number;
  receipt?: JsonObject;
  error?: ResponseError;
}
export interface Event {
  schema: typeof CLIENT_SCHEMA_V1;
  type: "event";
  subscriptionId: string;
  event: EventKind;
  revision?: number;
  runId?: string;
  payload: JsonObject;
}
export type ClientMessage = Hello | Request | Response | Event;

/** A line that is not one canonical JSON object of at most 1 MiB. */
export class FrameError extends Error {
  constructor(
    readonly code: "too_large" | "missing_newline" | "not_utf8" | "not_json" | "trailing_data" | "not_object" | "not_canonical",
    message: string,
  ) {
    super(message);
    this.name = "FrameError";
  }
}

/** A canonical object that is not a valid client.v1 message. */
export class ProtocolError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ProtocolError";
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

/** Decode one frame (its bytes including the trailing newline) into a JSON object. */
export function decodeFrame(line: Uint8Array): JsonObject {
  if (line.length > FRAME_BYTES_MAX) throw new FrameError("too_large", `frame of ${line.length} bytes exceeds the ${FRAME_BYTES_MAX}-byte limit`);
  if (line.length === 0 || line[line.length - 1] !== 0x0a) throw new FrameError("missing_newline", "frame has no trailing newline");
  const body = line.subarray(0, line.length - 1);
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new FrameError("not_utf8", "frame is not valid UTF-8");
  }
  const value = parseSingleValue(text);
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new FrameError("not_object", `frame holds a JSON ${value === null ? "null" : Array.isArray(value) ? "array" : typeof value}, not an object`);
  }
  const canonical = encoder.encode(canonicalJson(value));
  if (!sameBytes(canonical, body)) {
    // A duplicate key hides its earlier value from the checks above; serde_json reads it.
    checkRustReadableText(text);
    throw new FrameError("not_canonical", "frame is not RFC 8785 canonical JSON");
  }
  return value as JsonObject;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** One JSON value and nothing but whitespace after it, as serde_json reads it. */
function parseSingleValue(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    // Not JSON as a whole: trailing data when a complete value is followed by more.
    const end = valueEnd(text, skipWhitespace(text, 0));
    if (end !== undefined && skipWhitespace(text, end) < text.length && parses(text.slice(0, end))) {
      throw new FrameError("trailing_data", `frame has data after its JSON value at offset ${end}`);
    }
    throw new FrameError("not_json", `frame is not valid JSON (${(error as Error).message})`);
  }
  checkRustReadable(value, 0);
  return value;
}

function parses(text: string): boolean {
  try {
    checkRustReadable(JSON.parse(text), 0);
    checkRustReadableText(text);
    return true;
  } catch {
    return false;
  }
}

/** What JSON.parse accepts but serde_json refuses: numbers out of range, lone surrogates, depth. */
function checkRustReadable(value: unknown, depth: number): void {
  if (typeof value === "number" && !Number.isFinite(value)) throw new FrameError("not_json", "number out of range");
  if (typeof value === "string" && !wellFormed(value)) throw new FrameError("not_json", "lone surrogate in a string");
  if (value === null || typeof value !== "object") return;
  if (depth + 1 >= JSON_DEPTH_MAX) throw new FrameError("not_json", "recursion limit exceeded"); // serde_json refuses the 128th nested container
  for (const [key, item] of Array.isArray(value) ? value.entries() : Object.entries(value)) {
    if (typeof key === "string" && !wellFormed(key)) throw new FrameError("not_json", "lone surrogate in a key");
    checkRustReadable(item, depth + 1);
  }
}

/**
 * `checkRustReadable` over the text of a value JSON.parse accepted, so that also the earlier
 * value of a duplicate key counts (JSON.parse keeps only the last, serde_json reads every one):
 * each string and key, each number, and the nesting depth. Used only off the canonical path
 * (a canonical text has no duplicate keys), so a valid frame never pays for the scan.
 */
function checkRustReadableText(text: string): void {
  let depth = 0;
  for (let at = 0; at < text.length; ) {
    const c = text[at]!;
    if (c === '"') {
      const end = stringEnd(text, at) ?? text.length;
      if (!wellFormed(JSON.parse(text.slice(at, end)) as string)) throw new FrameError("not_json", "lone surrogate in a string");
      at = end;
    } else if (c === "{" || c === "[") {
      if (++depth >= JSON_DEPTH_MAX) throw new FrameError("not_json", "recursion limit exceeded");
      at++;
    } else if (c === "}" || c === "]") {
      depth--;
      at++;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      NUMBER.lastIndex = at;
      const number = NUMBER.exec(text)?.[0] ?? c;
      if (!Number.isFinite(Number(number))) throw new FrameError("not_json", "number out of range");
      at += number.length;
    } else {
      at++;
    }
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const wellFormed = (text: string) => !LONE_SURROGATE.test(text);

function skipWhitespace(text: string, at: number): number {
  while (at < text.length && (text[at] === " " || text[at] === "\t" || text[at] === "\n" || text[at] === "\r")) at++;
  return at;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?!\d)(?:\.\d+(?!\d)|(?!\.))(?:[eE][+-]?\d+(?!\d)|(?![eE]))/y;

/** Where the JSON value starting at `at` ends (a scan; `parses` confirms it). */
function valueEnd(text: string, at: number): number | undefined {
  const first = text[at];
  if (first === '"') return stringEnd(text, at);
  if (first === "{" || first === "[") {
    let depth = 0;
    for (let i = at; i < text.length; i++) {
      const c = text[i];
      if (c === '"') {
        const end = stringEnd(text, i);
        if (end === undefined) return undefined;
        i = end - 1;
      } else if (c === "{" || c === "[") {
        depth++;
      } else if ((c === "}" || c === "]") && --depth === 0) {
        return i + 1;
      }
    }
    return undefined;
  }
  for (const literal of ["true", "false", "null"]) if (text.startsWith(literal, at)) return at + literal.length;
  NUMBER.lastIndex = at;
  const number = NUMBER.exec(text);
  return number ? at + number[0].length : undefined;
}

function stringEnd(text: string, at: number): number | undefined {
  for (let i = at + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i + 1;
  }
  return undefined;
}

type Rule = "id" | "revision" | "operation" | "outcome" | "event" | "object" | "error" | { min: number; max: number };
interface Field {
  name: string;
  rule: Rule;
  required: boolean;
}
const required = (name: string, rule: Rule): Field => ({ name, rule, required: true });
const optional = (name: string, rule: Rule): Field => ({ name, rule, required: false });

const FIELDS: Record<ClientMessage["type"], Field[]> = {
  hello: [required("connectionId", "id"), required("packageVersion", { min: 1, max: PACKAGE_VERSION_BYTES_MAX })],
  request: [
    required("requestId", "id"),
    required("clientId", "id"),
    required("operation", "operation"),
    optional("idempotencyKey", "id"),
    optional("runId", "id"),
    optional("expectedRevision", "revision"),
    required("payload", "object"),
  ],
  response: [
    required("requestId", "id"),
    required("outcome", "outcome"),
    optional("revision", "revision"),
    optional("receipt", "object"),
    optional("error", "error"),
  ],
  event: [
    required("subscriptionId", "id"),
    required("event", "event"),
    optional("revision", "revision"),
    optional("runId", "id"),
    required("payload", "object"),
  ],
};
const ERROR_FIELDS: Field[] = [
  required("error.code", { min: 1, max: ERROR_CODE_BYTES_MAX }),
  required("error.message", { min: 0, max: ERROR_MESSAGE_BYTES_MAX }),
];

/** Validate a decoded frame as a client.v1 message (schema, type, unknown fields, then fields in order). */
export function validateMessage(object: JsonObject): ClientMessage {
  if (!("schema" in object)) throw new ProtocolError("missing_field", "message lacks schema");
  if (object.schema !== CLIENT_SCHEMA_V1) throw new ProtocolError("wrong_schema", `schema must be ${CLIENT_SCHEMA_V1}`);
  if (!("type" in object)) throw new ProtocolError("missing_field", "message lacks type");
  const type = object.type;
  if (typeof type !== "string" || !Object.hasOwn(FIELDS, type)) throw new ProtocolError("unknown_type", "unknown message type");
  const fields = FIELDS[type as ClientMessage["type"]];
  rejectUnknown(object, type, ["schema", "type"], fields, "");
  checkFields(object, fields, "");
  return object as unknown as ClientMessage;
}

function rejectUnknown(object: JsonObject, where: string, header: string[], fields: Field[], prefix: string): void {
  const known = new Set([...header, ...fields.map((field) => field.name.slice(prefix.length))]);
  const unknown = Object.keys(object).sort().find((key) => !known.has(key));
  if (unknown !== undefined) throw new ProtocolError("unknown_field", `${where} has an unknown field ${JSON.stringify(unknown.slice(0, 48))}`);
}

function checkFields(object: JsonObject, fields: Field[], prefix: string): void {
  for (const field of fields) {
    const key = field.name.slice(prefix.length);
    if (!Object.hasOwn(object, key)) {
      if (field.required) throw new ProtocolError("missing_field", `message lacks ${field.name}`);
      continue;
    }
    checkRule(field.name, field.rule, object[key]);
  }
}

const byteLength = (text: string) => encoder.encode(text).length;

function checkRule(name: string, rule: Rule, value: unknown): void {
  if (typeof rule === "object") {
    const bytes = byteLength(asString(name, value));
    if (bytes < rule.min || bytes > rule.max) throw new ProtocolError("text_length", `${name} must be ${rule.min} to ${rule.max} bytes`);
    return;
  }
  switch (rule) {
    case "id": {
      const bytes = byteLength(asString(name, value));
      if (bytes < OPAQUE_ID_BYTES_MIN || bytes > OPAQUE_ID_BYTES_MAX) throw new ProtocolError("id_length", `${name} must be 1 to 256 bytes`);
      if (!OPAQUE_ID_PATTERN.test(value as string)) {
        throw new ProtocolError("id_characters", `${name} may hold only ASCII letters, digits and ._:@|+=~-`);
      }
      return;
    }
    case "revision":
      if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > REVISION_MAX) {
        throw new ProtocolError("invalid_revision", `${name} must be an integer from 0 to 2^53 - 1`);
      }
      return;
    case "operation":
      return checkName(name, value, OPERATIONS, "unknown_operation");
    case "outcome":
      return checkName(name, value, OUTCOMES, "unknown_outcome");
    case "event":
      return checkName(name, value, EVENT_KINDS, "unknown_event");
    case "object":
      asObject(name, value);
      return;
    case "error": {
      const error = asObject(name, value);
      rejectUnknown(error, "error", [], ERROR_FIELDS, "error.");
      checkFields(error, ERROR_FIELDS, "error.");
      return;
    }
  }
}

function checkName(name: string, value: unknown, names: readonly string[], code: string): void {
  const text = asString(name, value);
  if (!names.includes(text)) throw new ProtocolError(code, `${name} ${JSON.stringify(text.slice(0, 48))} is not known`);
}

function asString(name: string, value: unknown): string {
  if (typeof value !== "string") throw new ProtocolError("wrong_type", `${name} must be a string`);
  return value;
}

function asObject(name: string, value: unknown): JsonObject {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new ProtocolError("wrong_type", `${name} must be an object`);
  return value as JsonObject;
}

/** Decode and validate one line (with its newline). */
export function decodeMessage(line: Uint8Array): ClientMessage {
  return validateMessage(decodeFrame(line));
}

/** Encode a message as one canonical line; a frame above 1 MiB is refused. */
export function encodeMessage(message: ClientMessage): Buffer {
  validateMessage(message as unknown as JsonObject);
  const line = Buffer.from(canonicalJson(message) + "\n", "utf8");
  if (line.length > FRAME_BYTES_MAX) throw new FrameError("too_large", `a frame of ${line.length} bytes is above the 1 MiB limit`);
  return line;
}
