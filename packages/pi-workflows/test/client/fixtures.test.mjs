// The shared client.v1 conformance fixtures (protocol/fixtures/client.v1.json), the same file
// the Rust tests run: every case is accepted or refused at the same layer with the same code.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";
import { canonicalJson } from "../../dist/index.js";
import { decodeFrame, FrameError, OPERATIONS, ProtocolError, validateMessage } from "../../dist/client/index.js";

const protocolDir = new URL("../../../../protocol/", import.meta.url);
const fixtures = JSON.parse(readFileSync(new URL("fixtures/client.v1.json", protocolDir), "utf8"));

function lineBytes(fixture) {
  let bytes = fixture.lineHex !== undefined ? Buffer.from(fixture.lineHex, "hex") : Buffer.from(fixture.line, "utf8");
  if (fixture.repeat) {
    // As the Rust test does: the line plus its newline is `toBytes` long.
    const text = bytes.toString("utf8");
    const fill = fixture.repeat.toBytes - 1 - bytes.length;
    const pad = fixture.repeat.pad.repeat(Math.floor(fill / Buffer.byteLength(fixture.repeat.pad, "utf8")));
    bytes = Buffer.from(text.replace('""', `"${pad}"`), "utf8");
  }
  return fixture.noNewline ? bytes : Buffer.concat([bytes, Buffer.from("\n")]);
}

function outcome(bytes) {
  let frame;
  try {
    frame = decodeFrame(bytes);
  } catch (error) {
    if (error instanceof FrameError) return { layer: "frame", code: error.code };
    throw error;
  }
  try {
    validateMessage(frame);
  } catch (error) {
    if (error instanceof ProtocolError) return { layer: "envelope", code: error.code };
    throw error;
  }
  return { layer: "envelope", code: undefined };
}

test("every shared fixture case gets the same verdict, layer and code", () => {
  assert.ok(fixtures.cases.length >= 100, "the fixture file has its cases");
  for (const fixture of fixtures.cases) {
    const got = outcome(lineBytes(fixture));
    const expected = { layer: fixture.layer, code: fixture.valid ? undefined : fixture.reason };
    assert.deepEqual(got, expected, fixture.name);
  }
});

test("the RFC 8785 vectors canonicalize exactly", () => {
  const dir = new URL("fixtures/rfc8785/", protocolDir);
  const names = readdirSync(new URL("input/", dir)).filter((name) => name.endsWith(".json"));
  assert.ok(names.length > 0);
  for (const name of names) {
    const input = JSON.parse(readFileSync(new URL(`input/${name}`, dir), "utf8"));
    const output = readFileSync(new URL(`output/${name}`, dir), "utf8");
    assert.equal(canonicalJson(input), output, name);
  }
});

test("the TypeScript operation list is the schema's", () => {
  const schema = JSON.parse(readFileSync(new URL("client.v1.schema.json", protocolDir), "utf8"));
  assert.deepEqual([...OPERATIONS], schema.$defs.operation.enum);
});
