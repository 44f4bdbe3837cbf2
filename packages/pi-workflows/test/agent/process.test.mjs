// How the executor finds Pi and the Node >= 22.19 it needs, while the runner itself may run on Node 20.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { localPiBinary, localPiNode, nodeVersionSupportsPi, PI_NODE_ENV, piStartupHint, resolvePiCommand } from "../../dist/agent/process.js";
import { ensurePi, tempDir } from "./helpers.mjs";

const PINNED_PI = "1.6.0";
let launcher;
let dir;

before(() => {
  launcher = ensurePi();
  dir = tempDir("resolve");
});

after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

function writeFile(name, text, mode = 0o755) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text, { mode });
  return file;
}

test("the launcher of install-pi.sh prints the pinned version with this Node first on PATH", () => {
  const env = { ...process.env, PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ""}`, PI_OFFLINE: "1" };
  const version = execFileSync(launcher, ["--version"], { env, encoding: "utf8", timeout: 30_000 }).trim();
  assert.equal(version, PINNED_PI, `launcher run with Node ${process.version} first on PATH`);
  const node = execFileSync(localPiNode(), ["--version"], { encoding: "utf8" }).trim();
  assert.ok(nodeVersionSupportsPi(node.slice(1)), `the project-local Node is ${node}`);
});

test("the default lookup runs Pi's JavaScript entry with the project-local Node 22", () => {
  const resolved = resolvePiCommand(undefined, { PATH: process.env.PATH }, ["--mode", "rpc"]);
  assert.equal(resolved.ok, true, JSON.stringify(resolved));
  assert.equal(resolved.command.file, localPiNode());
  assert.equal(resolved.command.args[0], fs.realpathSync(localPiBinary()));
  assert.match(resolved.command.args[0], /@earendil-works\/pi-coding-agent\/dist\/bundle\/cli\.js$/);
  assert.deepEqual(resolved.command.args.slice(1), ["--mode", "rpc"]);
});

test("PI_WORKFLOWS_PI_NODE picks the Node for a JavaScript entry, also for a `#!… node` script without .js", () => {
  const js = writeFile("cli.js", "#!/usr/bin/env node\n");
  const bin = writeFile("pi-bin", "#!/usr/bin/env -S node --no-warnings\nconsole.log(1)\n");
  for (const file of [js, bin]) {
    const resolved = resolvePiCommand(file, { [PI_NODE_ENV]: process.execPath }, ["-x"]);
    assert.deepEqual(resolved, { ok: true, command: { file: process.execPath, args: [fs.realpathSync(file), "-x"] } });
  }
});

test("a launcher or native binary is started as it is", () => {
  const script = writeFile("pi-launcher", "#!/bin/sh\nexec true\n");
  assert.deepEqual(resolvePiCommand(script, {}, ["a"]), { ok: true, command: { file: fs.realpathSync(script), args: ["a"] } });
  const real = fs.realpathSync(launcher);
  assert.deepEqual(resolvePiCommand(launcher, {}, []), { ok: true, command: { file: real, args: [] } });
});

test("an unusable PI_WORKFLOWS_PI_NODE is refused with the Node 22 hint, with no fallback", () => {
  const js = writeFile("entry.mjs", "");
  for (const value of ["node", path.join(dir, "missing-node")]) {
    const resolved = resolvePiCommand(js, { [PI_NODE_ENV]: value }, []);
    assert.equal(resolved.ok, false);
    assert.equal(resolved.code, "piNotFound");
    assert.match(resolved.message, /Node >= 22\.19/);
    assert.match(resolved.message, /install-pi\.sh/);
  }
});

test("Node version bound and the start-up hint for a too old Node", () => {
  for (const ok of ["22.19.0", "22.23.5", "23.0.0", "24.1.2"]) assert.equal(nodeVersionSupportsPi(ok), true, ok);
  for (const old of ["20.20.2", "22.18.9", "21.9.0", "garbage"]) assert.equal(nodeVersionSupportsPi(old), false, old);
  const node20 = "SyntaxError: The requested module 'node:module' does not provide an export named 'enableCompileCache'";
  assert.match(piStartupHint(node20) ?? "", /Node >= 22\.19/);
  assert.equal(piStartupHint("Error: connect ECONNREFUSED"), undefined);
});
