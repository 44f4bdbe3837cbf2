// Edge helpers: the exhaustive decision edge and the parser for switch paths.
import { OUTCOMES, type SwitchEdge } from "./types.js";

/** What a switch reads: the node output at `path`, or the result outcome. */
export type SwitchSource = { kind: "output"; path: string[] } | { kind: "outcome" };

const SEGMENT = /^[A-Za-z0-9_-]+$/;

/** Parse `$output.a.b`, `$.a.b` or `$result.outcome`; undefined when malformed. */
export function parseSwitchOn(on: unknown): SwitchSource | undefined {
  if (on === "$result.outcome") return { kind: "outcome" };
  if (typeof on !== "string") return undefined;
  const rest = on.startsWith("$output.") ? on.slice(8) : on.startsWith("$.") ? on.slice(2) : undefined;
  if (rest === undefined) return undefined;
  const path = rest.split(".");
  return path.every((segment) => SEGMENT.test(segment)) ? { kind: "output", path } : undefined;
}

export function isOutcomeCase(value: string): boolean {
  return (OUTCOMES as readonly string[]).includes(value);
}

/** A switch edge on a decision's field whose cases must cover every choice exactly. */
export function decisionEdge<C extends string>(options: {
  from: string;
  choices: readonly C[];
  cases: Record<C, string>;
  field?: string;
}): SwitchEdge {
  const { from, choices, cases } = options ?? ({} as typeof options);
  if (typeof from !== "string") throw new Error("decisionEdge.from must be a node name");
  if (!Array.isArray(choices) || choices.length === 0) {
    throw new Error(`decision edge from node "${from}": choices must be a non-empty list`);
  }
  const given = Object.keys(cases ?? {});
  const missing = choices.filter((choice) => !given.includes(choice));
  if (missing.length > 0) {
    throw new Error(`decision edge from node "${from}" misses cases for: ${missing.join(", ")}`);
  }
  const extra = given.filter((key) => !(choices as readonly string[]).includes(key));
  if (extra.length > 0) {
    throw new Error(`decision edge from node "${from}" has cases that are not choices: ${extra.join(", ")}`);
  }
  return { from, switch: { on: `$output.${options.field ?? "route"}`, cases: { ...cases } } };
}
