// Unit tests of the bounded LF-only JSONL framing used for `pi --mode rpc`.
import assert from "node:assert/strict";
import { test } from "node:test";
import { JsonlReader, encodeCommand, oversizedType } from "../../dist/agent/rpc.js";

function collect(maxLineBytes, chunks) {
  const lines = [];
  const reader = new JsonlReader(maxLineBytes, (line) => lines.push(line));
  for (const chunk of chunks) reader.push(Buffer.from(chunk));
  reader.end();
  return lines;
}

test("splits on LF only, keeps U+2028/U+2029 inside strings, strips CR", () => {
  const text = `{"type":"a","text":"x\u2028y\u2029z"}\r\n{"type":"b"}\n`;
  const lines = collect(1024, [text]);
  assert.deepEqual(lines, [
    { kind: "json", value: { type: "a", text: "x\u2028y\u2029z" } },
    { kind: "json", value: { type: "b" } },
  ]);
});

test("reassembles records split across chunks, including inside a multi-byte character", () => {
  const bytes = Buffer.from(`{"type":"message_end","text":"h\u00e9llo \u{1F600}"}\n{"type":"x"}`);
  const chunks = [];
  for (let i = 0; i < bytes.length; i += 3) chunks.push(bytes.subarray(i, i + 3));
  const lines = [];
  const reader = new JsonlReader(1024, (line) => lines.push(line));
  for (const chunk of chunks) reader.push(chunk);
  reader.end();
  assert.deepEqual(lines, [
    { kind: "json", value: { type: "message_end", text: "h\u00e9llo \u{1F600}" } },
    { kind: "json", value: { type: "x" } },
  ]);
});

test("drops an oversized record but reports its head, then continues", () => {
  const big = `{"type":"agent_end","messages":["${"a".repeat(5000)}"]}\n`;
  const lines = collect(1000, [big.slice(0, 700), big.slice(700), '{"id":"s","type":"response"}\n', "not json\n"]);
  assert.equal(lines.length, 3);
  assert.equal(lines[0].kind, "oversized");
  assert.equal(oversizedType(lines[0].head), "agent_end");
  assert.deepEqual(lines[1], { kind: "json", value: { id: "s", type: "response" } });
  assert.deepEqual(lines[2], { kind: "invalid" });
  assert.equal(oversizedType('{"id":"prompt","type":"response","command":"prompt"'), "response");
});

test("encodes one command per line", () => {
  const line = encodeCommand({ type: "prompt", message: "a\nb\u2028c" });
  assert.equal(line.split("\n").length, 2);
  assert.deepEqual(JSON.parse(line), { type: "prompt", message: "a\nb\u2028c" });
});
