// Compile a definition into scopes with full node paths, plus its topology snapshot and digest.
import { canonicalDigest } from "./canonical.js";
import { assertNoIncludeCycle, edgeTargets } from "./define.js";
import { resolveInclude } from "./include.js";
import { type SettingsSnapshot, settingsSnapshot } from "./settings.js";
import type { IncludeSpec, WorkflowDefinition, WorkflowEdge, WorkflowNode } from "./types.js";

export const SNAPSHOT_SCHEMA = "pi-workflows.definition-snapshot.v1";

export interface CompiledNode {
  id: string;
  path: string;
  type: WorkflowNode["kind"];
  title: string;
  node: WorkflowNode;
  scope: CompiledScope;
}

export interface CompiledMount {
  name: string;
  path: string;
  include: IncludeSpec;
  scope: CompiledScope;
}

/** One workflow's graph at one mount path ("" for the root). */
export interface CompiledScope {
  path: string;
  definition: WorkflowDefinition;
  nodes: Map<string, CompiledNode>;
  mounts: Map<string, CompiledMount>;
  /** Outgoing edge per local source (node id or `<mount>.<exit>`). */
  edges: Map<string, WorkflowEdge>;
  /** Terminal node id → exit name. */
  exitByNode: Map<string, string>;
}

export interface SnapshotNode {
  path: string;
  type: string;
  title: string;
  effect?: { type: string; recovery: string };
  /** An agent step answered by the visible assistant reply (only an interactive run can run it). */
  form?: "assistantMessage";
}

export interface DefinitionSnapshot {
  schema: typeof SNAPSHOT_SCHEMA;
  name: string;
  /** Present when the root workflow declares a title (absent keeps older digests unchanged). */
  title?: string;
  startAt: string;
  maxSteps: number;
  nodes: SnapshotNode[];
  includes: { path: string; workflow: string; maxSteps: number; startAt: string; exits: Record<string, string> }[];
  edges: ({ from: string; to: string } | { from: string; switch: { on: string; cases: Record<string, string> } })[];
  /** Present when the root workflow declares settings (the server enforces it). */
  settings?: SettingsSnapshot;
  /** Present when the root workflow declares limits (the server enforces them). */
  limits?: { runnerMemoryMb?: number };
}

export interface CompiledWorkflow {
  name: string;
  definition: WorkflowDefinition;
  root: CompiledScope;
  nodesByPath: Map<string, CompiledNode>;
  snapshot: DefinitionSnapshot;
  definitionDigest: string;
}

export function joinPath(scopePath: string, local: string): string {
  return scopePath === "" ? local : `${scopePath}/${local}`;
}

export function compileWorkflow(definition: WorkflowDefinition): CompiledWorkflow {
  if (definition?.kind !== "workflow") throw new Error("compileWorkflow needs a workflow from defineWorkflow");
  assertNoIncludeCycle(definition, [], false);
  const nodesByPath = new Map<string, CompiledNode>();
  const root = compileScope(definition, "", nodesByPath);
  const snapshot = buildSnapshot(root);
  return { name: definition.name, definition, root, nodesByPath, snapshot, definitionDigest: canonicalDigest(snapshot) };
}

function compileScope(definition: WorkflowDefinition, path: string, nodesByPath: Map<string, CompiledNode>): CompiledScope {
  const scope: CompiledScope = {
    path,
    definition,
    nodes: new Map(),
    mounts: new Map(),
    edges: new Map(definition.edges.map((edge) => [edge.from, edge])),
    exitByNode: new Map(Object.entries(definition.exits).map(([exit, node]) => [node, exit])),
  };
  for (const [id, node] of Object.entries(definition.nodes)) {
    const compiled: CompiledNode = { id, path: joinPath(path, id), type: node.kind, title: node.title ?? id, node, scope };
    scope.nodes.set(id, compiled);
    nodesByPath.set(compiled.path, compiled);
  }
  for (const [name, include] of Object.entries(definition.includes)) {
    const child = resolveInclude(include, false)!;
    const mountPath = joinPath(path, name);
    for (const from of scope.edges.keys()) {
      const exit = from.startsWith(`${name}.`) ? from.slice(name.length + 1) : undefined;
      if (exit !== undefined && !(exit in child.exits)) {
        throw new Error(`workflow "${definition.name}": edge from "${from}" names an unknown exit of include "${name}"`);
      }
    }
    scope.mounts.set(name, { name, path: mountPath, include, scope: compileScope(child, mountPath, nodesByPath) });
  }
  return scope;
}

/** Full path of what a local target starts: a node, or (through mounts) the child's first node. */
export function entryPath(scope: CompiledScope, local: string): string {
  const mount = scope.mounts.get(local);
  return mount ? entryPath(mount.scope, mount.scope.definition.startAt) : joinPath(scope.path, local);
}

function buildSnapshot(root: CompiledScope): DefinitionSnapshot {
  const snapshot: DefinitionSnapshot = {
    schema: SNAPSHOT_SCHEMA,
    name: root.definition.name,
    startAt: entryPath(root, root.definition.startAt),
    maxSteps: root.definition.maxSteps,
    nodes: [],
    includes: [],
    edges: [],
  };
  const visit = (scope: CompiledScope) => {
    for (const node of scope.nodes.values()) {
      const entry: SnapshotNode = { path: node.path, type: node.type, title: node.title };
      if (node.node.kind === "action" || node.node.kind === "shell") {
        entry.effect = { type: node.node.effect.type, recovery: node.node.effect.recovery };
      }
      if (node.node.kind === "agent" && typeof node.node.expectedOutput === "object") entry.form = "assistantMessage";
      snapshot.nodes.push(entry);
    }
    for (const [from, edge] of scope.edges) {
      // Targets keep their local meaning (a node or a mount) under the scope's path.
      const full = joinPath(scope.path, from);
      if ("switch" in edge) {
        const cases = Object.fromEntries(Object.entries(edge.switch.cases).map(([k, v]) => [k, joinPath(scope.path, v)]));
        snapshot.edges.push({ from: full, switch: { on: edge.switch.on, cases } });
      } else {
        snapshot.edges.push({ from: full, to: joinPath(scope.path, edgeTargets(edge)[0]!) });
      }
    }
    for (const mount of scope.mounts.values()) {
      const def = mount.scope.definition;
      if (def.limits) {
        throw new Error(
          `workflow "${def.name}" (included at "${mount.path}") declares limits: only the root workflow declares them; move them to "${root.definition.name}"`,
        );
      }
      if (def.settings) {
        throw new Error(
          `workflow "${def.name}" (included at "${mount.path}") declares settings: only the root workflow declares them; move them to "${root.definition.name}"`,
        );
      }
      snapshot.includes.push({ path: mount.path, workflow: def.name, maxSteps: def.maxSteps, startAt: def.startAt, exits: { ...def.exits } });
      visit(mount.scope);
    }
  };
  visit(root);
  // Only when declared: a workflow without a title keeps the digest it always had.
  if (root.definition.title !== undefined) snapshot.title = root.definition.title;
  if (root.definition.settings) snapshot.settings = settingsSnapshot(root.definition.settings);
  if (root.definition.limits) snapshot.limits = { ...root.definition.limits };
  return snapshot;
}
