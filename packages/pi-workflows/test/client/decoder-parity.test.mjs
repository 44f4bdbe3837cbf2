// Lines on which the TypeScript decoder disagreed with the Rust one (decode_client_message),
// found by the differential fuzz driver (fuzz/examples/differential_ts.rs; the inputs are kept
// in fuzz/seeds/differential_ts/). Each must be refused at the same layer with the same code.
import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeMessage, FrameError, ProtocolError } from "../../dist/client/index.js";

function verdict(text) {
  try {
    decodeMessage(Buffer.from(text, "utf8"));
    return "accepted";
  } catch (error) {
    if (error instanceof FrameError) return `frame:${error.code}`;
    if (error instanceof ProtocolError) return `envelope:${error.code}`;
    throw error;
  }
}

test("a type named after an Object.prototype member is an unknown type, not a TypeError", () => {
  for (const type of ["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf"]) {
    assert.equal(verdict(`{"schema":"pi-workflows.client.v1","type":${JSON.stringify(type)}}\n`), "envelope:unknown_type", type);
  }
});

test("a first value serde_json cannot read is not_json even with data after it", () => {
  assert.equal(verdict('{"a":"\\ud800"} x\n'), "frame:not_json");
  assert.equal(verdict("1e400 x\n"), "frame:not_json");
  assert.equal(verdict(`${"[".repeat(128)}${"]".repeat(128)} x\n`), "frame:not_json");
  assert.equal(verdict(`${"[".repeat(127)}${"]".repeat(127)} x\n`), "frame:trailing_data");
});

test("a number serde_json's grammar cuts short is not_json, a complete one then data is trailing_data", () => {
  for (const text of ["1.e5", "01", "-01", "1e", "1.5e", "12.", "1.55e", "-"]) assert.equal(verdict(`${text}\n`), "frame:not_json", text);
  for (const text of ["1x", "1e5e", "1.5.", "1E+2x", "-0 x", "nullx"]) assert.equal(verdict(`${text}\n`), "frame:trailing_data", text);
});

test("nesting: 127 containers decode, the 128th is refused like serde_json's recursion limit", () => {
  const nested = (n) => `{"a":${"[".repeat(n - 1)}${"]".repeat(n - 1)}}\n`;
  assert.equal(verdict(nested(127)), "envelope:missing_field");
  assert.equal(verdict(nested(128)), "frame:not_json");
});

test("a duplicate key's earlier value counts: what serde_json cannot read there is not_json", () => {
  assert.equal(verdict('{"a":"\\udc00","a":1}\n'), "frame:not_json");
  assert.equal(verdict('{"a":"\\udc00","a":1} x\n'), "frame:not_json");
  assert.equal(verdict('{"a":1e400,"a":1}\n'), "frame:not_json");
  assert.equal(verdict(`{"a":${"[".repeat(127)}${"]".repeat(127)},"a":1}\n`), "frame:not_json");
  // Readable duplicates are still only not canonical (serde_json keeps the last value too).
  assert.equal(verdict('{"a":"x","a":1}\n'), "frame:not_canonical");
  assert.equal(verdict('{"a":"\\ud83d\\ude00","a":1}\n'), "frame:not_canonical");
  assert.equal(verdict('{"a":"x","a":1} x\n'), "frame:trailing_data");
});
