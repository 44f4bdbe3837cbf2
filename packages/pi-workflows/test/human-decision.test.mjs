// Protected human decisions at definition time (`humanDecision`, `humanDecisionEdge`,
// `defineHumanChoices`, `choice`, `textInput`) and the check of one attempt's request before it
// is proposed (`proposedDecision`): every refusal says what to fix, and nothing invalid reaches
// the server (which checks the same limits again, src/decision/mod.rs).
import assert from "node:assert/strict";
import { test } from "node:test";
import { choice, compute, defineHumanChoices, defineWorkflow, humanDecision, humanDecisionEdge, textInput } from "../dist/index.js";
import { DECISION_DEADLINE_MS_MAX, PRESENTATION_SCHEMA, proposedDecision } from "../dist/human-decision.js";

/** The server's bound on one whole presentation (src/decision/mod.rs `PRESENTATION_BYTES_MAX`). */
const PRESENTATION_BYTES_MAX = 32 * 1024;
/** The server's bound on one code block (`CODE_TEXT_CHARS_MAX`). */
const CODE_TEXT_CHARS_MAX = 8000;

function throwsNaming(fn, ...fragments) {
  assert.throws(fn, (error) => {
    for (const fragment of fragments) assert.ok(error.message.includes(fragment), `"${error.message}" should mention ${fragment}`);
    return true;
  });
}

function shipOrFix() {
  return defineHumanChoices({
    ship: choice({ label: "Ship" }),
    fix: choice({ label: "Fix first", input: textInput({ label: "What to fix", maxLength: 40 }) }),
  });
}

function request() {
  return { title: "Ship it?", subject: { commit: "abc123" }, presentation: { schema: PRESENTATION_SCHEMA, summary: "All checks pass." } };
}

function decisionNode(options = {}) {
  return humanDecision({ audience: "operator", choices: shipOrFix(), request, ...options });
}

function workflow(node, edge) {
  const next = () => compute({ run: () => null });
  return defineWorkflow({ name: "deciding", startAt: "pick", nodes: { pick: node, ship: next(), fix: next() }, edges: [edge] });
}

test("a valid decision with a default, a text input and an exhaustive edge is defined", () => {
  const choices = shipOrFix();
  const pick = humanDecision({ audience: "operator", choices, request, onTimeout: { afterMs: 60_000, response: { choice: "ship" } } });
  const defined = workflow(pick, humanDecisionEdge({ from: "pick", choices, cases: { ship: "ship", fix: "fix" } }));
  assert.equal(defined.nodes.pick.kind, "humanDecision");
  assert.deepEqual(defined.nodes.pick.onTimeout, { afterMs: 60_000, response: { choice: "ship" } });
  assert.deepEqual(Object.keys(choices), ["ship", "fix"]);
  assert.deepEqual(choices.fix.input, { kind: "textInput", label: "What to fix", maxLength: 40, required: true });
  const proposed = proposedDecision(pick, request(), 1_000);
  assert.deepEqual(proposed.decision.choices, [
    { id: "ship", label: "Ship" },
    { id: "fix", label: "Fix first", input: { label: "What to fix", maxLength: 40, required: true } },
  ]);
  assert.deepEqual(proposed.decision.onTimeout, { choice: "ship" });
  assert.equal(proposed.decision.deadlineAt, 1_000);
  assert.deepEqual(proposed.subject, { commit: "abc123" }, "the subject stays apart from what is shown");
});

test("onTimeout must name a valid response of the choices", () => {
  const afterMs = 60_000;
  throwsNaming(() => decisionNode({ onTimeout: { afterMs, response: { choice: "maybe" } } }), "onTimeout.response", '"maybe"', "ship, fix");
  throwsNaming(() => decisionNode({ onTimeout: { afterMs, response: { choice: "fix" } } }), "onTimeout.response", "needs text");
  throwsNaming(() => decisionNode({ onTimeout: { afterMs, response: { choice: "ship", text: "now" } } }), "onTimeout.response", "takes no text");
  throwsNaming(() => decisionNode({ onTimeout: { afterMs, response: { choice: "ship" } }, timeoutMs: afterMs }), "not both");
});

test("a deadline must be positive and at most 30 days", () => {
  const response = { choice: "ship" };
  for (const afterMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, DECISION_DEADLINE_MS_MAX + 1, "60000"]) {
    throwsNaming(() => decisionNode({ onTimeout: { afterMs, response } }), "onTimeout.afterMs", "30 days");
    throwsNaming(() => decisionNode({ timeoutMs: afterMs }), "timeoutMs", "30 days");
  }
  assert.equal(decisionNode({ onTimeout: { afterMs: DECISION_DEADLINE_MS_MAX, response } }).onTimeout.afterMs, DECISION_DEADLINE_MS_MAX);
});

test("humanDecisionEdge must cover every choice and name no other", () => {
  const choices = shipOrFix();
  throwsNaming(() => humanDecisionEdge({ from: "pick", choices, cases: { ship: "ship" } }), '"pick"', "misses cases for: fix");
  throwsNaming(
    () => humanDecisionEdge({ from: "pick", choices, cases: { ship: "ship", fix: "fix", drop: "fix" } }),
    '"pick"',
    "not choices: drop",
  );
  throwsNaming(() => humanDecisionEdge({ from: "pick", choices: {}, cases: {} }), '"pick"', "defineHumanChoices");
  // A switch written by hand is held to the same rule by defineWorkflow.
  const partial = { from: "pick", switch: { on: "$output.choice", cases: { ship: "ship" } } };
  throwsNaming(() => workflow(decisionNode(), partial), 'human decision node "pick"', "no case for: fix");
  const wrongField = { from: "pick", switch: { on: "$output.text", cases: { ship: "ship", fix: "fix" } } };
  throwsNaming(() => workflow(decisionNode(), wrongField), '"pick"', "humanDecisionEdge");
});

test("the choices set must be 1 to 16 well-named choices", () => {
  throwsNaming(() => defineHumanChoices({}), "1 to 16 choices");
  throwsNaming(() => defineHumanChoices(undefined), "1 to 16 choices");
  const many = Object.fromEntries(Array.from({ length: 17 }, (_, index) => [`c${index}`, choice({ label: `C${index}` })]));
  throwsNaming(() => defineHumanChoices(many), "1 to 16 choices");
  throwsNaming(() => defineHumanChoices({ "Ship It": choice({ label: "Ship" }) }), '"Ship It"', "a-z, 0-9");
  throwsNaming(() => defineHumanChoices({ ship: { label: "Ship" } }), "choice ship", "choice({label");
  throwsNaming(() => humanDecision({ audience: "operator", choices: {}, request }), "defineHumanChoices");
  throwsNaming(() => humanDecision({ audience: "Ops Team", choices: shipOrFix(), request }), "audience");
  throwsNaming(() => humanDecision({ audience: "operator", choices: shipOrFix(), request: "ask" }), "request must be a function");
});

test("choice and textInput refuse bad labels and limits", () => {
  throwsNaming(() => choice({ label: "" }), "choice.label", "1 to 64");
  throwsNaming(() => choice({ label: "x".repeat(65) }), "choice.label", "1 to 64");
  throwsNaming(() => choice({ label: "Ship", input: { label: "why" } }), "textInput({...})");
  throwsNaming(() => textInput({ label: "" }), "textInput.label");
  throwsNaming(() => textInput({ label: "Why", maxLength: 0 }), "textInput.maxLength", "4000");
  throwsNaming(() => textInput({ label: "Why", maxLength: 4001 }), "textInput.maxLength", "4000");
  throwsNaming(() => textInput({ label: "Why", maxLength: 1.5 }), "textInput.maxLength");
  throwsNaming(() => textInput({ label: "Why", required: "yes" }), "textInput.required");
  assert.equal(textInput({ label: "Why" }).maxLength, 1000, "the default limit");
});

test("a request with a wrong presentation schema or an oversized presentation is not proposed", () => {
  const node = decisionNode();
  const withPresentation = (presentation) => ({ ...request(), presentation });
  throwsNaming(() => proposedDecision(node, withPresentation({ schema: "other", summary: "s" }), undefined), "presentation.schema", PRESENTATION_SCHEMA);
  throwsNaming(() => proposedDecision(node, withPresentation({ summary: "s" }), undefined), "presentation.schema");
  // Every block within its own limit: only the whole-presentation bound refuses it.
  const block = { kind: "code", text: "y".repeat(CODE_TEXT_CHARS_MAX) };
  const blocks = Array.from({ length: Math.floor(PRESENTATION_BYTES_MAX / CODE_TEXT_CHARS_MAX) + 1 }, () => block);
  throwsNaming(
    () => proposedDecision(node, withPresentation({ schema: PRESENTATION_SCHEMA, summary: "s", blocks }), undefined),
    "bytes",
    `limit is ${PRESENTATION_BYTES_MAX}`,
  );
  throwsNaming(
    () => proposedDecision(node, withPresentation({ schema: PRESENTATION_SCHEMA, summary: "s", blocks: [{ kind: "image" }] }), undefined),
    '"image"',
  );
  throwsNaming(() => proposedDecision(node, { ...request(), title: "" }, undefined), "title");
});
