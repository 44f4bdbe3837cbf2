// The engine against an in-memory host: routing, failures, includes, replay, effects, limits.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import {
  action,
  compileWorkflow,
  compute,
  defineWorkflow,
  idempotentEffect,
  includeWorkflow,
  manualEffect,
  notify,
  readBackEffect,
  runWorkflow,
  shell,
} from "../dist/index.js";
import { FakeHost } from "./support/fake-host.mjs";

function run(definition, host, command = "start", extra = {}) {
  return runWorkflow({
    workflow: compileWorkflow(definition),
    host,
    runState: host.runState(),
    command,
    projectPath: process.cwd(),
    attemptIdPrefix: `g${command}${host.messages.length}`,
    ...extra,
  });
}

test("pure compute nodes commit once each: node.finished carries the start fields", async () => {
  const wf = defineWorkflow({
    name: "chain",
    startAt: "one",
    nodes: { one: compute({ run: ({ input }) => ({ n: input.n + 1 }) }), two: compute({ run: ({ outputs }) => ({ n: outputs.one.n * 10 }) }) },
    edges: [{ from: "one", to: "two" }],
  });
  const host = new FakeHost({ input: { n: 1 } });
  const outcome = await run(wf, host);
  assert.deepEqual(outcome, { kind: "completed", output: { n: 20 } });
  assert.deepEqual(host.kinds(), ["node.finished", "node.finished", "run.finished"]);
  assert.deepEqual(host.messages[0].payload, { output: { n: 2 }, nodeId: "one", nodePath: "one", visit: 1, nodeType: "compute" });
  assert.deepEqual(host.run, { outcome: "completed", output: { n: 20 } });
});

test("a switch on an output field picks the case", async () => {
  const wf = defineWorkflow({
    name: "route",
    startAt: "judge",
    nodes: {
      judge: compute({ run: ({ input }) => ({ verdict: { kind: input.kind } }) }),
      left: compute({ run: () => "L" }),
      right: compute({ run: () => "R" }),
    },
    edges: [{ from: "judge", switch: { on: "$output.verdict.kind", cases: { l: "left", r: "right" } } }],
  });
  assert.deepEqual(await run(wf, new FakeHost({ input: { kind: "r" } })), { kind: "completed", output: "R" });
  const missing = await run(wf, new FakeHost({ input: { kind: "x" } }));
  assert.equal(missing.kind, "failed");
  assert.equal(missing.error.code, "routingFailed");
});

test("a failing node is recorded and routes through $result.outcome; without that edge the run fails", async () => {
  const boom = compute({ run: () => { throw new Error("disk on fire"); } });
  const routed = defineWorkflow({
    name: "recover",
    startAt: "risky",
    nodes: { risky: boom, fix: compute({ run: ({ results }) => ({ saw: results.risky.error.message, outcome: results.risky.outcome }) }), fine: compute({ run: () => "fine" }) },
    edges: [{ from: "risky", switch: { on: "$result.outcome", cases: { ok: "fine", failed: "fix" } } }],
  });
  const host = new FakeHost();
  assert.deepEqual(await run(routed, host), { kind: "completed", output: { saw: "disk on fire", outcome: "failed" } });
  assert.equal(host.messages[0].kind, "node.failed");
  assert.deepEqual(host.messages[0].payload.error, { code: "nodeFailed", message: "disk on fire" });

  const plain = defineWorkflow({ name: "plain", startAt: "risky", nodes: { risky: boom, next: compute({ run: () => 1 }) }, edges: [{ from: "risky", to: "next" }] });
  const failedHost = new FakeHost();
  const outcome = await run(plain, failedHost);
  assert.equal(outcome.kind, "failed");
  assert.match(failedHost.run.error.message, /node "risky" failed: disk on fire/);
  assert.deepEqual(failedHost.kinds(), ["node.failed", "run.finished"]);
});

function stampChild(counter) {
  return defineWorkflow({
    name: "stamp",
    input: (raw) => ({ label: String(raw.label) }),
    startAt: "apply",
    nodes: {
      apply: action({ effect: idempotentEffect("stamp.write"), run: ({ input }) => { counter.count += 1; return { stamped: input.label }; } }),
    },
    exits: { done: "apply" },
    edges: [],
  });
}

test("the same local node in two mounts gets distinct effect keys derived from its full path", async () => {
  const counter = { count: 0 };
  const wf = defineWorkflow({
    name: "twice",
    startAt: "first",
    nodes: { summary: compute({ run: ({ outputs }) => [outputs.first, outputs.second] }) },
    includes: {
      first: includeWorkflow(stampChild(counter), { input: () => ({ label: "a" }) }),
      second: includeWorkflow(stampChild(counter), { input: () => ({ label: "b" }) }),
    },
    edges: [
      { from: "first.done", to: "second" },
      { from: "second.done", to: "summary" },
    ],
  });
  const host = new FakeHost({ runId: "run-keys" });
  const outcome = await run(wf, host);
  assert.deepEqual(outcome.output, [{ exit: "done", output: { stamped: "a" } }, { exit: "done", output: { stamped: "b" } }]);
  const reserves = host.messages.filter((m) => m.kind === "effect.reserve").map((m) => m.payload.idempotencyKey);
  const key = (path) => createHash("sha256").update(`run-keys\0stamp.write\0${path}\0${1}`).digest("hex");
  assert.deepEqual(reserves, [key("first/apply"), key("second/apply")]);
  const started = host.messages.filter((m) => m.kind === "node.started").map((m) => m.payload.nodePath);
  assert.deepEqual(started, ["first/apply", "second/apply"]);
  assert.equal(counter.count, 2);
});

test("resume replays committed attempts without running them again", async () => {
  const calls = { one: 0, two: 0, three: 0 };
  const wf = defineWorkflow({
    name: "resume",
    startAt: "one",
    nodes: {
      one: compute({ run: () => { calls.one += 1; return { v: 1 }; } }),
      two: compute({ run: ({ outputs }) => { calls.two += 1; return { v: outputs.one.v + 1 }; } }),
      three: compute({ run: ({ outputs }) => { calls.three += 1; return { v: outputs.two.v + 1 }; } }),
    },
    edges: [{ from: "one", to: "two" }, { from: "two", to: "three" }],
  });
  const host = new FakeHost();
  host.crashAt = { kind: "node.finished", count: 3 }; // dies before committing "three"
  await assert.rejects(run(wf, host), /simulated crash/);
  assert.deepEqual(calls, { one: 1, two: 1, three: 1 });
  const before = host.messages.length;
  const outcome = await run(wf, host, "resume");
  assert.deepEqual(outcome, { kind: "completed", output: { v: 3 } });
  assert.deepEqual(calls, { one: 1, two: 1, three: 2 }, "only the uncommitted pure node ran again");
  assert.deepEqual(host.messages.slice(before).map((m) => m.kind), ["node.finished", "run.finished"]);
});

function effectWorkflow(counter, effect = idempotentEffect("deploy")) {
  return defineWorkflow({
    name: "deploy",
    startAt: "ship",
    nodes: { ship: action({ effect, run: () => { counter.count += 1; return { url: "https://example.test/1" }; } }), after: compute({ run: ({ outputs }) => outputs.ship }) },
    edges: [{ from: "ship", to: "after" }],
  });
}

test("an applied effect is adopted on resume, never run twice", async () => {
  const counter = { count: 0 };
  const host = new FakeHost();
  host.crashAt = { kind: "node.finished", count: 1 }; // settled, but the node never finished
  await assert.rejects(run(effectWorkflow(counter), host), /simulated crash/);
  assert.equal(counter.count, 1);
  const before = host.messages.length;
  const outcome = await run(effectWorkflow(counter), host, "resume");
  assert.deepEqual(outcome, { kind: "completed", output: { url: "https://example.test/1" } });
  assert.equal(counter.count, 1);
  assert.ok(!host.messages.slice(before).some((m) => m.kind === "effect.reserve" || m.kind === "node.started"), "adopted from RunState");
});

test("a reservation answered execute:false adopts the stored result", async () => {
  const counter = { count: 0 };
  const host = new FakeHost();
  host.crashAt = { kind: "node.finished", count: 1 };
  await assert.rejects(run(effectWorkflow(counter), host), /simulated crash/);
  const state = host.runState();
  state.effects = []; // the server knows the effect, the execution read did not carry it
  const outcome = await runWorkflow({ workflow: compileWorkflow(effectWorkflow(counter)), host, runState: state, command: "resume", projectPath: ".", attemptIdPrefix: "r" });
  assert.equal(outcome.kind, "completed");
  assert.equal(counter.count, 1);
  assert.ok(host.messages.some((m) => m.kind === "effect.reserve" && m.attemptId === state.attempts[0].attemptId));
});

test("an ambiguous effect is never executed again: the node fails clearly", async () => {
  const counter = { count: 0 };
  const host = new FakeHost();
  host.crashAt = { kind: "effect.settle", count: 1 }; // applied externally, never settled
  await assert.rejects(run(effectWorkflow(counter, manualEffect("deploy")), host), /simulated crash/);
  host.runnerDied();
  const outcome = await run(effectWorkflow(counter, manualEffect("deploy")), host, "resume");
  assert.equal(outcome.kind, "failed");
  assert.equal(outcome.error.code, "effectAmbiguous");
  assert.equal(counter.count, 1);
  assert.equal(host.messages.at(-2).kind, "node.failed");
});

test("an interrupted idempotent action runs again with the same engine key and a new attempt number", async () => {
  const seen = [];
  const wf = defineWorkflow({
    name: "ticket",
    startAt: "open",
    nodes: { open: action({ effect: idempotentEffect("ticket.open"), run: ({ effect }) => { seen.push({ ...effect }); return { ticket: effect.key }; } }) },
    edges: [],
  });
  const host = new FakeHost();
  host.crashAt = { kind: "effect.settle", count: 1 };
  await assert.rejects(run(wf, host), /simulated crash/);
  host.runnerDied();
  const outcome = await run(wf, host, "resume");
  assert.equal(outcome.kind, "completed");
  const key = host.messages.find((m) => m.kind === "effect.reserve").payload.idempotencyKey;
  assert.deepEqual(seen, [{ type: "ticket.open", key, attempt: 1 }, { type: "ticket.open", key, attempt: 2 }]);
  assert.deepEqual(outcome.output, { ticket: key });
  assert.equal(host.messages.find((m) => m.kind === "effect.reserve").payload.recovery, "idempotent");
});

function readBackWorkflow(system, calls) {
  return defineWorkflow({
    name: "publish",
    startAt: "publish",
    nodes: {
      publish: action({
        effect: readBackEffect("system.publish", ({ effect }) => {
          calls.observe += 1;
          return system.has(effect.key) ? { applied: true, result: { observed: true } } : { applied: false };
        }),
        run: ({ effect }) => { calls.run += 1; system.add(effect.key); return { observed: false }; },
      }),
    },
    edges: [],
  });
}

test("an interrupted read-back action is observed first: applied adopts, not applied runs again", async () => {
  for (const appliedBeforeCrash of [true, false]) {
    const system = new Set();
    const calls = { observe: 0, run: 0 };
    const host = new FakeHost();
    host.crashAt = appliedBeforeCrash ? { kind: "effect.settle", count: 1 } : null;
    if (!appliedBeforeCrash) {
      // Crash inside the effect before it touched the system.
      host.effectReserve = ((reserve) => async (...args) => { const r = await reserve.apply(host, args); throw Object.assign(new Error("simulated crash"), { r }); })(host.effectReserve);
    }
    await assert.rejects(run(readBackWorkflow(system, calls), host), /simulated crash/);
    if (!appliedBeforeCrash) delete host.effectReserve;
    host.runnerDied();
    const outcome = await run(readBackWorkflow(system, calls), host, "resume");
    assert.equal(outcome.kind, "completed");
    assert.deepEqual(outcome.output, { observed: appliedBeforeCrash });
    assert.equal(calls.observe, 1, "observed once, after the interruption");
    assert.equal(calls.run, 1, "the effect ran exactly once in all");
    assert.equal(system.size, 1);
  }
});

test("a read-back check that fails proves nothing: the effect is settled ambiguous and the node fails", async () => {
  const host = new FakeHost();
  const wf = defineWorkflow({
    name: "publish",
    startAt: "publish",
    nodes: {
      publish: action({ effect: readBackEffect("system.publish", () => { throw new Error("the system is down"); }), run: () => ({}) }),
    },
    edges: [],
  });
  host.crashAt = { kind: "effect.settle", count: 1 };
  await assert.rejects(run(wf, host), /simulated crash/);
  host.runnerDied();
  const outcome = await run(wf, host, "resume");
  assert.equal(outcome.kind, "failed");
  assert.equal(outcome.error.code, "effectAmbiguous");
  assert.match(outcome.error.message, /the system is down/);
  const settle = host.messages.filter((m) => m.kind === "effect.settle").at(-1);
  assert.equal(settle.payload.outcome, "ambiguous");
});

test("an action's fingerprint covers its request: another request under the same key fails the node", async () => {
  const wf = (label) => defineWorkflow({
    name: "stamp",
    startAt: "stamp",
    nodes: { stamp: action({ effect: manualEffect("stamp.write"), request: () => ({ label }), run: ({ request }) => request }) },
    edges: [],
  });
  // Applied and settled, the node unfinished; without the effect in RunState the engine
  // reserves again: the same request is adopted, another one under the same key is refused.
  const resumeWith = async (label) => {
    const host = new FakeHost();
    host.crashAt = { kind: "node.finished", count: 1 };
    await assert.rejects(run(wf("a"), host), /simulated crash/);
    const state = host.runState();
    state.effects = [];
    return runWorkflow({ workflow: compileWorkflow(wf(label)), host, runState: state, command: "resume", projectPath: ".", attemptIdPrefix: "r" });
  };
  const other = await resumeWith("b");
  assert.equal(other.kind, "failed");
  assert.equal(other.error.code, "effectRequestChanged");
  assert.deepEqual(await resumeWith("a"), { kind: "completed", output: { label: "a" } });
});

test("effect contracts are checked where they are declared", () => {
  assert.throws(() => readBackEffect("x"), /observe must be a function/);
  assert.throws(() => shell({ effect: readBackEffect("x", () => ({ applied: false })), exec: () => ({ command: "true" }) }), /cannot be a read-back effect/);
  assert.throws(() => action({ effect: { type: "x", recovery: "readBack" }, run: () => 1 }), /without an observe function/);
  assert.throws(() => action({ effect: manualEffect("x"), request: "not a function", run: () => 1 }), /action.request must be a function/);
});

test("maxSteps bounds a loop", async () => {
  const wf = defineWorkflow({
    name: "spin",
    maxSteps: 5,
    startAt: "tick",
    nodes: { tick: compute({ run: ({ outputs }) => ({ n: (outputs.tick?.n ?? 0) + 1 }) }) },
    edges: [{ from: "tick", switch: { on: "$output.n", cases: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [String(i + 1), "tick"])) } }],
  });
  const host = new FakeHost();
  const outcome = await run(wf, host);
  assert.equal(outcome.kind, "failed");
  assert.equal(outcome.error.code, "maxStepsExceeded");
  assert.match(outcome.error.message, /maxSteps \(5\)/);
  assert.equal(host.kinds().filter((k) => k === "node.finished").length, 5);
  assert.deepEqual(host.messages.map((m) => m.payload.visit).slice(0, 5), [1, 2, 3, 4, 5]);
});

test("notify commits its attempt with the notification", async () => {
  const wf = defineWorkflow({ name: "tell", startAt: "say", nodes: { say: notify({ kind: "final", message: ({ input }) => `done: ${input.x}` }) }, edges: [] });
  const host = new FakeHost({ input: { x: 7 } });
  const outcome = await run(wf, host);
  assert.deepEqual(outcome.output, { kind: "final", message: "done: 7" });
  assert.deepEqual(host.kinds(), ["node.started", "notification.requested", "run.finished"]);
  assert.deepEqual(host.messages[1].payload.notification, { kind: "final", message: "done: 7" });
});

test("node code sees outputs read-only: a write fails that node, not the run's record", async () => {
  const wf = defineWorkflow({
    name: "readonly",
    startAt: "a",
    nodes: {
      a: compute({ run: () => ({ n: 1 }) }),
      b: compute({
        run: ({ outputs }) => {
          outputs.a = { n: 99 };
          return "wrote";
        },
      }),
      c: compute({ run: ({ outputs, results }) => ({ a: outputs.a.n, b: results.b.outcome }) }),
    },
    edges: [
      { from: "a", to: "b" },
      { from: "b", switch: { on: "$result.outcome", cases: { ok: "c", failed: "c" } } },
    ],
  });
  const outcome = await run(wf, new FakeHost());
  assert.deepEqual(outcome, { kind: "completed", output: { a: 1, b: "failed" } });
});
