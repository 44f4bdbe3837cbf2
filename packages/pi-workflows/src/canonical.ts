// RFC 8785 (JCS) canonical JSON, the one encoding every frame, digest and fingerprint uses.
import { createHash } from "node:crypto";

/** Canonical JSON text of `value`: sorted keys (UTF-16 code-unit order), no whitespace. */
export function canonicalJson(value: unknown): string {
  const text = encode(value, true);
  if (text === undefined) throw new TypeError("value has no JSON form (undefined or a function)");
  return text;
}

function encode(value: unknown, top: boolean): string | undefined {
  if (value === null) return "null";
  if (typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(): unknown }).toJSON();
  }
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "string":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) {
        if (top) throw new TypeError("a non-finite number has no canonical JSON form");
        return "null"; // as JSON.stringify does inside containers
      }
      return JSON.stringify(value); // ECMAScript Number::toString, as RFC 8785 requires; -0 becomes 0
    case "bigint":
      throw new TypeError("a bigint has no canonical JSON form");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
    case "object":
      break;
  }
  if (Array.isArray(value)) {
    return "[" + value.map((item) => encode(item, false) ?? "null").join(",") + "]";
  }
  const record = value as Record<string, unknown>;
  const parts: string[] = [];
  // Default sort compares UTF-16 code units, which is exactly the RFC 8785 key order.
  for (const key of Object.keys(record).sort()) {
    const encoded = encode(record[key], false);
    if (encoded !== undefined) parts.push(JSON.stringify(key) + ":" + encoded);
  }
  return "{" + parts.join(",") + "}";
}

/** Lowercase hex SHA-256 of a string (UTF-8) or bytes. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** `sha256:<hex>` of the canonical JSON of `value` (definition digests, input hashes). */
export function canonicalDigest(value: unknown): string {
  return "sha256:" + sha256Hex(canonicalJson(value));
}

/** The JSON value `value` stands for (Dates become strings, undefined keys vanish). */
export function toJsonValue(value: unknown): unknown {
  if (value === undefined) return null;
  return JSON.parse(canonicalJson(value));
}

/** Byte length of the canonical JSON encoding. */
export function canonicalByteLength(value: unknown): number {
  return Buffer.byteLength(canonicalJson(value), "utf8");
}
