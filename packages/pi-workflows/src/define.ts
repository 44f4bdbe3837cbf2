// defineWorkflow: shape and graph validation at definition time; every error names its node.
import { resolveInclude } from "./include.js";
import { isOutcomeCase, parseSwitchOn } from "./edges.js";
import { checkSettings } from "./settings.js";
import type { IncludeSpec, WorkflowDefinition, WorkflowEdge, WorkflowLimits, WorkflowNode, WorkflowOptions } from "./types.js";

export const NODE_NAME = /^[A-Za-z_][A-Za-z0-9_-]*$/;
const WORKFLOW_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;
const NODE_KINDS = new Set(["compute", "action", "shell", "agent", "checkpoint", "decision", "humanDecision", "notify"]);
export const DEFAULT_MAX_STEPS = 100;

export function defineWorkflow<I = unknown>(options: WorkflowOptions<I>): WorkflowDefinition<I> {
  const name = options?.name;
  if (typeof name !== "string" || !WORKFLOW_NAME.test(name)) {
    throw new Error(`invalid workflow name ${JSON.stringify(name)}`);
  }
  const fail = (what: string): never => {
    throw new Error(`workflow "${name}": ${what}`);
  };
  if (options.input !== undefined && typeof options.input !== "function") fail("input must be a normalizer function");
  const title = options.title === undefined ? undefined : checkTitle(options.title, fail);
  const maxSteps = options.maxSteps ?? DEFAULT_MAX_STEPS;
  if (!Number.isInteger(maxSteps) || maxSteps <= 0) fail("maxSteps must be a positive integer");

  const nodes = checkNodes(options.nodes, Object.keys(options.includes ?? {}).length > 0, fail);
  const includes = checkIncludes(options.includes ?? {}, nodes, fail);
  const edges = checkEdges(options.edges, nodes, includes, fail);
  const startAt = options.startAt;
  if (typeof startAt !== "string" || !(startAt in nodes || startAt in includes)) {
    fail(`startAt names unknown node "${String(startAt)}"`);
  }
  const exits = checkExits(options.exits, nodes, edges, fail);
  checkDecisionEdges(nodes, edges, fail);
  checkReachable(startAt, nodes, includes, edges, fail);
  const settings = options.settings === undefined ? undefined : checkSettings(options.settings, fail);
  const limits = options.limits === undefined ? undefined : checkLimits(options.limits, fail);

  const definition: WorkflowDefinition<I> = Object.freeze({
    kind: "workflow",
    name,
    ...(title !== undefined ? { title } : {}),
    input: options.input,
    startAt,
    nodes: Object.freeze({ ...nodes }),
    includes: Object.freeze({ ...includes }),
    exits: Object.freeze(exits),
    edges: Object.freeze([...edges]),
    maxSteps,
    ...(settings ? { settings } : {}),
    ...(limits ? { limits } : {}),
  });
  assertNoIncludeCycle(definition, [], true);
  return definition;
}

type Fail = (what: string) => never;

/** The longest workflow title, in characters (code points): a title is one line of a table. */
export const WORKFLOW_TITLE_CHARS_MAX = 200;
/** Characters a title must not hold: control characters and line or paragraph separators
 * would break the line it is shown on (or move a terminal's cursor). */
const TITLE_FORBIDDEN = /[\p{Cc}\u2028\u2029]/u;

/** Why `title` is not a usable workflow title, or undefined when it is. */
export function titleProblem(title: unknown): string | undefined {
  if (typeof title !== "string") return "title must be a string";
  if (title.trim() === "") return "title must not be empty";
  const chars = [...title].length;
  if (chars > WORKFLOW_TITLE_CHARS_MAX) return `title must be at most ${WORKFLOW_TITLE_CHARS_MAX} characters (it has ${chars}); shorten it`;
  if (TITLE_FORBIDDEN.test(title)) return "title must be one line of printable text (no control characters or line breaks)";
  return undefined;
}

function checkTitle(title: unknown, fail: Fail): string {
  const problem = titleProblem(title);
  if (problem !== undefined) fail(problem);
  return title as string;
}

/** The runner memory bound a workflow may ask for, in MiB (the server's own bounds). */
export const RUNNER_MEMORY_MB_MIN = 64;
export const RUNNER_MEMORY_MB_MAX = 65_536;

function checkLimits(limits: WorkflowLimits, fail: Fail): WorkflowLimits {
  if (!limits || typeof limits !== "object" || Array.isArray(limits)) fail("limits must be an object");
  const unknown = Object.keys(limits).filter((key) => key !== "runnerMemoryMb");
  if (unknown.length > 0) fail(`limits has unknown field(s) ${unknown.join(", ")}; the known one is runnerMemoryMb`);
  const memory = limits.runnerMemoryMb;
  if (memory !== undefined && (!Number.isInteger(memory) || memory < RUNNER_MEMORY_MB_MIN || memory > RUNNER_MEMORY_MB_MAX)) {
    fail(`limits.runnerMemoryMb must be a whole number of MiB from ${RUNNER_MEMORY_MB_MIN} to ${RUNNER_MEMORY_MB_MAX}`);
  }
  return Object.freeze({ ...limits });
}

function checkNodes<I>(nodes: Record<string, WorkflowNode<I>> | undefined, hasIncludes: boolean, fail: Fail): Record<string, WorkflowNode<I>> {
  if (!nodes || typeof nodes !== "object") fail("nodes must be an object");
  if (Object.keys(nodes!).length === 0 && !hasIncludes) fail("nodes must not be empty (or the workflow must include another)");
  for (const [id, node] of Object.entries(nodes!)) {
    if (!NODE_NAME.test(id)) fail(`node "${id}" has an invalid name (use [A-Za-z_][A-Za-z0-9_-]*)`);
    if (!node || !NODE_KINDS.has((node as { kind?: string }).kind ?? "")) {
      fail(`node "${id}" is not a node (build it with compute, action, shell, agent, checkpoint, decision or notify)`);
    }
  }
  return nodes!;
}

function checkIncludes<I>(
  includes: Record<string, IncludeSpec<I>>,
  nodes: Record<string, unknown>,
  fail: Fail,
): Record<string, IncludeSpec<I>> {
  for (const [mount, spec] of Object.entries(includes)) {
    if (!NODE_NAME.test(mount)) fail(`include "${mount}" has an invalid name (use [A-Za-z_][A-Za-z0-9_-]*)`);
    if (mount in nodes) fail(`include "${mount}" has the same name as a node`);
    if ((spec as { kind?: string })?.kind !== "include") fail(`include "${mount}" must be built with includeWorkflow()`);
  }
  return includes;
}

/** The exit names of a mounted child, or undefined while its thunk cannot run yet. */
export function childExitNames(spec: IncludeSpec): string[] | undefined {
  const child = resolveInclude(spec, true);
  return child ? Object.keys(child.exits) : undefined;
}

function checkEdges(
  edges: WorkflowEdge[] | undefined,
  nodes: Record<string, unknown>,
  includes: Record<string, IncludeSpec>,
  fail: Fail,
): WorkflowEdge[] {
  if (!Array.isArray(edges)) fail("edges must be a list");
  const seen = new Set<string>();
  for (const edge of edges!) {
    const from = (edge as { from?: unknown })?.from;
    if (typeof from !== "string") fail(`an edge has no "from" node`);
    checkSource(from as string, nodes, includes, fail);
    if (seen.has(from as string)) fail(`node "${from}" has two outgoing edges`);
    seen.add(from as string);
    for (const target of edgeTargets(edge)) {
      if (typeof target !== "string" || !(target in nodes || target in includes)) {
        fail(`edge from node "${from}" goes to unknown node "${String(target)}"`);
      }
    }
    if ("switch" in edge) checkSwitch(edge, fail);
    else if (typeof (edge as { to?: unknown }).to !== "string") fail(`edge from node "${from}" needs "to" or "switch"`);
  }
  return edges!;
}

function checkSource(from: string, nodes: Record<string, unknown>, includes: Record<string, IncludeSpec>, fail: Fail) {
  if (from in nodes) return;
  const dot = from.indexOf(".");
  const mount = dot < 0 ? from : from.slice(0, dot);
  if (!(mount in includes)) fail(`edge from unknown node "${from}"`);
  if (dot < 0) fail(`edge from include "${from}" must name an exit: "${from}.<exit>"`);
  const exits = childExitNames(includes[mount]!);
  if (exits && !exits.includes(from.slice(dot + 1))) {
    fail(`edge from "${from}" names an unknown exit of include "${mount}" (exits: ${exits.join(", ") || "none"})`);
  }
}

export function edgeTargets(edge: WorkflowEdge): string[] {
  if ("switch" in edge) return Object.values(edge.switch?.cases ?? {});
  return [edge.to];
}

function checkSwitch(edge: Extract<WorkflowEdge, { switch: unknown }>, fail: Fail) {
  const source = parseSwitchOn(edge.switch?.on);
  if (!source) fail(`edge from node "${edge.from}" switches on ${JSON.stringify(edge.switch?.on)}: use $output.<field>, $.<field> or $result.outcome`);
  const cases = Object.keys(edge.switch.cases ?? {});
  if (cases.length === 0) fail(`edge from node "${edge.from}" has a switch with no cases`);
  if (source!.kind === "outcome") {
    const bad = cases.filter((c) => !isOutcomeCase(c));
    if (bad.length > 0) fail(`edge from node "${edge.from}" has outcome cases that are not ok|failed|timed_out|cancelled: ${bad.join(", ")}`);
  }
}

function checkExits(
  exits: WorkflowOptions["exits"],
  nodes: Record<string, unknown>,
  edges: WorkflowEdge[],
  fail: Fail,
): Record<string, string> {
  const hasEdge = new Set(edges.map((edge) => edge.from));
  if (exits === undefined) {
    return Object.fromEntries(Object.keys(nodes).filter((id) => !hasEdge.has(id)).map((id) => [id, id]));
  }
  const named: Record<string, string> = {};
  for (const [exit, target] of Object.entries(exits)) {
    const node = typeof target === "string" ? target : target?.from;
    if (!NODE_NAME.test(exit)) fail(`exit "${exit}" has an invalid name`);
    if (typeof node !== "string" || !(node in nodes)) fail(`exit "${exit}" names unknown node "${String(node)}"`);
    if (hasEdge.has(node!)) fail(`exit "${exit}" names node "${node}", which has an outgoing edge`);
    named[exit] = node!;
  }
  return named;
}

/** A decision routes on its answer: a switch on its field whose cases cover every choice. */
function checkDecisionEdges(nodes: Record<string, WorkflowNode>, edges: WorkflowEdge[], fail: Fail) {
  for (const [id, node] of Object.entries(nodes)) {
    const routed =
      node.kind === "decision"
        ? { field: node.field, choices: [...node.choices], helper: "decisionEdge", what: "decision" }
        : node.kind === "humanDecision"
          ? { field: "choice", choices: Object.keys(node.choices), helper: "humanDecisionEdge", what: "human decision" }
          : undefined;
    if (!routed) continue;
    const edge = edges.find((e) => e.from === id);
    if (!edge) continue;
    const source = "switch" in edge ? parseSwitchOn(edge.switch.on) : undefined;
    if (!source || source.kind !== "output" || source.path.join(".") !== routed.field) {
      fail(`${routed.what} node "${id}" must route with ${routed.helper} (a switch on $output.${routed.field})`);
    }
    const cases = Object.keys((edge as Extract<WorkflowEdge, { switch: unknown }>).switch.cases);
    const missing = routed.choices.filter((choice) => !cases.includes(choice));
    if (missing.length > 0) fail(`${routed.what} node "${id}" has no case for: ${missing.join(", ")}`);
  }
}

function checkReachable(
  startAt: string,
  nodes: Record<string, unknown>,
  includes: Record<string, IncludeSpec>,
  edges: WorkflowEdge[],
  fail: Fail,
) {
  const bySource = new Map(edges.map((edge) => [edge.from, edge] as const));
  const reached = new Set<string>();
  const queue = [startAt];
  while (queue.length > 0) {
    const name = queue.pop()!;
    if (reached.has(name)) continue;
    reached.add(name);
    const sources =
      name in includes
        ? (childExitNames(includes[name]!) ?? edges.map((e) => e.from).filter((f) => f.startsWith(`${name}.`))).map(
            (exit) => (exit.startsWith(`${name}.`) ? exit : `${name}.${exit}`),
          )
        : [name];
    for (const source of sources) {
      const edge = bySource.get(source);
      if (edge) queue.push(...edgeTargets(edge));
    }
  }
  for (const name of [...Object.keys(nodes), ...Object.keys(includes)]) {
    if (!reached.has(name)) fail(`node "${name}" is unreachable from "${startAt}"`);
  }
}

/** Throws when a workflow (transitively) includes itself; names the mount that closes the cycle. */
export function assertNoIncludeCycle(definition: WorkflowDefinition, stack: WorkflowDefinition[], lenient: boolean) {
  if (stack.includes(definition)) {
    const chain = [...stack, definition].map((d) => d.name).join(" -> ");
    throw new Error(`workflow "${definition.name}": include cycle ${chain}`);
  }
  for (const [mount, spec] of Object.entries(definition.includes)) {
    const child = resolveInclude(spec, lenient);
    if (!child) continue;
    try {
      assertNoIncludeCycle(child, [...stack, definition], lenient);
    } catch (error) {
      const message = (error as Error).message;
      if (message.includes("include cycle") && !message.includes("(at include")) {
        throw new Error(`${message} (at include "${mount}" of workflow "${definition.name}")`);
      }
      throw error;
    }
  }
}
