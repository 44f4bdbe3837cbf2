// Compiled paths, the topology snapshot and its digest; the canonical JSON it is hashed from.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { canonicalJson, compileWorkflow, compute, defineWorkflow, idempotentEffect, includeWorkflow, shell } from "../dist/index.js";

const child = () =>
  defineWorkflow({
    name: "child",
    startAt: "work",
    nodes: { work: compute({ run: () => 1 }), done: compute({ run: () => 2 }) },
    exits: { finished: "done" },
    edges: [{ from: "work", to: "done" }],
  });

function parent(title = "Begin") {
  return defineWorkflow({
    name: "parent",
    startAt: "begin",
    nodes: {
      begin: compute({ run: () => 0, title }),
      run: shell({ effect: idempotentEffect("cmd"), exec: () => ({ command: "true" }) }),
      end: compute({ run: () => 3 }),
    },
    includes: { left: includeWorkflow(child()), right: includeWorkflow(child()) },
    edges: [
      { from: "begin", to: "left" },
      { from: "left.finished", to: "right" },
      { from: "right.finished", to: "run" },
      { from: "run", to: "end" },
    ],
  });
}

test("canonical JSON sorts keys by code unit and drops whitespace", () => {
  assert.equal(canonicalJson({ b: 1, a: [true, null, "x"], "\u00e9": 2, A: { z: 0.5, y: -0 } }), '{"A":{"y":0,"z":0.5},"a":[true,null,"x"],"b":1,"é":2}');
  assert.equal(canonicalJson({ skip: undefined, n: 1e21 }), '{"n":1e+21}');
  assert.throws(() => canonicalJson(Number.NaN));
});

test("included nodes get full paths and the snapshot lists them", () => {
  const compiled = compileWorkflow(parent());
  assert.deepEqual([...compiled.nodesByPath.keys()].sort(), ["begin", "end", "left/done", "left/work", "right/done", "right/work", "run"]);
  assert.equal(compiled.snapshot.startAt, "begin");
  assert.deepEqual(compiled.snapshot.includes.map((i) => i.path), ["left", "right"]);
  assert.ok(compiled.snapshot.edges.some((e) => e.from === "left/work" && e.to === "left/done"));
  assert.ok(compiled.snapshot.edges.some((e) => e.from === "left.finished" && e.to === "right"));
  assert.deepEqual(compiled.snapshot.nodes.find((n) => n.path === "run").effect, { type: "cmd", recovery: "idempotent" });
});

test("the definition digest is the SHA-256 of the canonical snapshot and is stable", () => {
  const first = compileWorkflow(parent());
  const second = compileWorkflow(parent());
  assert.equal(first.definitionDigest, second.definitionDigest);
  const expected = "sha256:" + createHash("sha256").update(canonicalJson(first.snapshot)).digest("hex");
  assert.equal(first.definitionDigest, expected);
  assert.notEqual(compileWorkflow(parent("Start here")).definitionDigest, first.definitionDigest);
});
