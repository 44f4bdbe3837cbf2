// Graph validation at definition time: every error names the offending node.
import assert from "node:assert/strict";
import { test } from "node:test";
import { compileWorkflow, compute, decision, decisionEdge, defineWorkflow, includeWorkflow } from "../dist/index.js";

const noop = () => compute({ run: () => null });

function throwsNaming(fn, ...fragments) {
  assert.throws(fn, (error) => {
    for (const fragment of fragments) assert.ok(error.message.includes(fragment), `"${error.message}" should mention ${fragment}`);
    return true;
  });
}

test("an edge to an unknown node names both ends", () => {
  throwsNaming(
    () => defineWorkflow({ name: "w", startAt: "a", nodes: { a: noop() }, edges: [{ from: "a", to: "ghost" }] }),
    '"a"',
    '"ghost"',
  );
});

test("an unreachable node is named", () => {
  throwsNaming(() => defineWorkflow({ name: "w", startAt: "a", nodes: { a: noop(), island: noop() }, edges: [] }), '"island"', "unreachable");
});

test("two outgoing edges from one node are refused", () => {
  throwsNaming(
    () =>
      defineWorkflow({
        name: "w",
        startAt: "a",
        nodes: { a: noop(), b: noop(), c: noop() },
        edges: [
          { from: "a", to: "b" },
          { from: "a", to: "c" },
        ],
      }),
    '"a"',
    "two outgoing edges",
  );
});

test("bad node names are refused", () => {
  throwsNaming(() => defineWorkflow({ name: "w", startAt: "9lives", nodes: { "9lives": noop() }, edges: [] }), '"9lives"', "invalid name");
  throwsNaming(() => defineWorkflow({ name: "w", startAt: "a.b", nodes: { "a.b": noop() }, edges: [] }), '"a.b"');
});

test("an unknown startAt and an edge from an unknown node are named", () => {
  throwsNaming(() => defineWorkflow({ name: "w", startAt: "nope", nodes: { a: noop() }, edges: [] }), '"nope"');
  throwsNaming(() => defineWorkflow({ name: "w", startAt: "a", nodes: { a: noop() }, edges: [{ from: "zz", to: "a" }] }), '"zz"');
});

test("decision edges must be exhaustive", () => {
  const choices = ["ship", "fix", "drop"];
  throwsNaming(() => decisionEdge({ from: "judge", choices, cases: { ship: "a", fix: "b" } }), '"judge"', "drop");
  throwsNaming(
    () =>
      defineWorkflow({
        name: "w",
        startAt: "judge",
        nodes: { judge: decision({ question: "?", choices }), a: noop(), b: noop() },
        edges: [{ from: "judge", switch: { on: "$output.route", cases: { ship: "a", fix: "b" } } }],
      }),
    'decision node "judge"',
    "drop",
  );
  const ok = defineWorkflow({
    name: "w",
    startAt: "judge",
    nodes: { judge: decision({ question: "?", choices }), a: noop(), b: noop(), c: noop() },
    edges: [decisionEdge({ from: "judge", choices, cases: { ship: "a", fix: "b", drop: "c" } })],
  });
  assert.equal(ok.edges[0].switch.on, "$output.route");
});

test("a malformed switch and a bad outcome case are named", () => {
  throwsNaming(
    () => defineWorkflow({ name: "w", startAt: "a", nodes: { a: noop(), b: noop() }, edges: [{ from: "a", switch: { on: "route", cases: { x: "b" } } }] }),
    '"a"',
    "switches on",
  );
  throwsNaming(
    () =>
      defineWorkflow({ name: "w", startAt: "a", nodes: { a: noop(), b: noop() }, edges: [{ from: "a", switch: { on: "$result.outcome", cases: { boom: "b" } } }] }),
    '"a"',
    "boom",
  );
});

test("an include exit must exist, and include cycles are refused", () => {
  const child = defineWorkflow({ name: "child", startAt: "x", nodes: { x: noop() }, edges: [] });
  throwsNaming(
    () =>
      defineWorkflow({
        name: "parent",
        startAt: "sub",
        nodes: { after: noop() },
        includes: { sub: includeWorkflow(child) },
        edges: [{ from: "sub.nothere", to: "after" }],
      }),
    "sub.nothere",
  );
  // A cycle can only be built lazily; it is refused as soon as the thunk can be resolved.
  let loop;
  loop = defineWorkflow({
    name: "loop",
    startAt: "self",
    nodes: {},
    includes: { self: includeWorkflow(() => loop) },
    edges: [],
  });
  throwsNaming(() => compileWorkflow(loop), "include cycle", '"self"');
  throwsNaming(
    () => defineWorkflow({ name: "outer", startAt: "l", nodes: {}, includes: { l: includeWorkflow(loop) }, edges: [] }),
    "include cycle",
  );
});

test("node builders check their options", () => {
  assert.throws(() => compute({}), /compute.run/);
  assert.throws(() => decision({ question: "?", choices: [] }), /choices/);
});

test("runner limits are checked when defined and recorded in the snapshot", () => {
  const one = { a: compute({ run: () => 1 }) };
  const limited = defineWorkflow({ name: "limited", startAt: "a", nodes: one, edges: [], limits: { runnerMemoryMb: 8192 } });
  assert.deepEqual(compileWorkflow(limited).snapshot.limits, { runnerMemoryMb: 8192 });
  assert.equal(compileWorkflow(defineWorkflow({ name: "plain", startAt: "a", nodes: one, edges: [] })).snapshot.limits, undefined);
  for (const bad of [{ runnerMemoryMb: 10 }, { runnerMemoryMb: 1.5 }, { runnerMemoryMb: 70_000 }, { memory: 100 }]) {
    assert.throws(
      () => defineWorkflow({ name: "bad", startAt: "a", nodes: one, edges: [], limits: bad }),
      /workflow "bad": limits/,
      JSON.stringify(bad),
    );
  }
});
