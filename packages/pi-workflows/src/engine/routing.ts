// Where execution goes after a node: edges, switches, mount entry and exit.
import type { CompiledNode } from "../compile.js";
import { parseSwitchOn } from "../edges.js";
import type { NodeError, NodeResult, WorkflowEdge } from "../types.js";
import { contextOf, type Frame, record } from "./frames.js";
import { nodeError } from "./limits.js";

export type Next =
  | { kind: "node"; frame: Frame; node: CompiledNode }
  /** No outgoing edge: the run ends with this result. */
  | { kind: "end"; result: NodeResult; nodePath: string }
  | { kind: "fail"; error: NodeError };

/** Start `local` in `frame`: a node, or (through a mount) a fresh child invocation's first node. */
export async function enter(frame: Frame, local: string, signal: AbortSignal): Promise<Next> {
  const node = frame.scope.nodes.get(local);
  if (node) return { kind: "node", frame, node };
  const mount = frame.scope.mounts.get(local);
  if (!mount) return { kind: "fail", error: nodeError("routingFailed", `unknown target "${local}" in "${frame.scope.path || frame.scope.definition.name}"`) };
  const child = mount.scope.definition;
  let input: unknown;
  try {
    const raw = mount.include.input ? await mount.include.input(contextOf(frame, signal)) : frame.input;
    input = child.input ? child.input(raw) : raw;
  } catch (error) {
    return { kind: "fail", error: nodeError("includeInputFailed", `include "${mount.path}": ${(error as Error)?.message ?? error}`) };
  }
  const childFrame: Frame = { scope: mount.scope, input, outputs: {}, results: {}, steps: 0, parent: frame, mount };
  return enter(childFrame, child.startAt, signal);
}

/** Follow the outgoing edge of `node`, leaving included workflows through their named exits. */
export async function route(frame: Frame, node: CompiledNode, result: NodeResult, signal: AbortSignal): Promise<Next> {
  let current = frame;
  let source = node.id;
  let fromNode = true;
  for (;;) {
    const edge = current.scope.edges.get(source);
    if (edge) {
      const picked = pickTarget(edge, result, node.path);
      return picked.kind === "fail" ? picked : enter(current, picked.target, signal);
    }
    const exit = fromNode ? current.scope.exitByNode.get(source) : undefined;
    if (!current.parent || !current.mount || exit === undefined) return { kind: "end", result, nodePath: node.path };
    const mountResult = result.outcome === "ok" ? { ...result, output: { exit, output: result.output } } : result;
    record(current.parent, current.mount.name, mountResult);
    source = `${current.mount.name}.${exit}`;
    current = current.parent;
    fromNode = false;
  }
}

/** The run-failing error for a node failure that no `$result.outcome` edge handles. */
export function unhandledFailure(nodePath: string, result: NodeResult): NodeError {
  const error = result.error ?? { code: "nodeFailed", message: result.outcome };
  return nodeError(error.code, `node "${nodePath}" ${result.outcome === "timed_out" ? "timed out" : result.outcome}: ${error.message}`);
}

function pickTarget(edge: WorkflowEdge, result: NodeResult, nodePath: string): { kind: "to"; target: string } | Extract<Next, { kind: "fail" }> {
  if (!("switch" in edge)) {
    return result.outcome === "ok" ? { kind: "to", target: edge.to } : { kind: "fail", error: unhandledFailure(nodePath, result) };
  }
  const source = parseSwitchOn(edge.switch.on)!;
  let key: string;
  if (source.kind === "outcome") {
    key = result.outcome;
  } else {
    if (result.outcome !== "ok") return { kind: "fail", error: unhandledFailure(nodePath, result) };
    let value: unknown = result.output;
    for (const segment of source.path) value = (value as Record<string, unknown> | null | undefined)?.[segment];
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      return { kind: "fail", error: nodeError("routingFailed", `node "${nodePath}": ${edge.switch.on} is ${JSON.stringify(value) ?? "undefined"}, not a case value`) };
    }
    key = String(value);
  }
  const target = Object.prototype.hasOwnProperty.call(edge.switch.cases, key) ? edge.switch.cases[key] : undefined;
  if (target !== undefined) return { kind: "to", target };
  if (result.outcome !== "ok") return { kind: "fail", error: unhandledFailure(nodePath, result) };
  return { kind: "fail", error: nodeError("routingFailed", `node "${nodePath}": no case for ${JSON.stringify(key)} in ${edge.switch.on}`) };
}
