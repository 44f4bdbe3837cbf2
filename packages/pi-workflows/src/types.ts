// Public types of the authoring API.

/** How a node attempt ended; `$result.outcome` routes on it. */
export type Outcome = "ok" | "failed" | "timed_out" | "cancelled";
export const OUTCOMES: readonly Outcome[] = ["ok", "failed", "timed_out", "cancelled"];

export interface NodeError {
  code: string;
  message: string;
}

/** The latest result of one node in the current invocation. */
export interface NodeResult {
  outcome: Outcome;
  output?: unknown;
  error?: NodeError;
  visit: number;
}

/** What every node callback receives. */
export interface NodeContext<I = any> {
  input: I;
  /** Latest `ok` output per local node id (a failure removes the earlier output). */
  outputs: Record<string, any>;
  results: Record<string, NodeResult>;
  /**
   * The run's settings as this node attempt saw them when it started: a frozen copy (a change
   * made meanwhile applies from the next node). Absent when the workflow declares no settings.
   */
  settings?: Readonly<Record<string, any>>;
  /** Which version `settings` is: 0 is the declared initial value, each change adds one. */
  settingsChangeNumber?: number;
  signal: AbortSignal;
}

/** Function actions can also publish progress (`node.update`). */
/** The managed effect a node performs, as the engine identifies it. */
export interface EffectIdentity {
  readonly type: string;
  /**
   * Stable across repeats of this node visit (derived from run ID, effect type, node path and
   * visit): pass it to the external system as its idempotency key, so a repeat after a crash
   * deduplicates there.
   */
  readonly key: string;
  /** 1 for the first try; higher when an interrupted or reviewed effect is applied again. */
  readonly attempt: number;
}

export interface ActionContext<I = any> extends NodeContext<I> {
  update(progress: { message: string; completed?: number; total?: number }): Promise<void>;
  effect: EffectIdentity;
  /** The action's declared request (`action({request})`), or its input when it declares none. */
  request: unknown;
}

/** What a read-back check found in the external system. */
export type Observation = { applied: true; result?: unknown } | { applied: false };

/** The context a read-back check sees: the node context, its effect and its request. */
export interface ObserveContext<I = any> extends NodeContext<I> {
  effect: EffectIdentity;
  request: unknown;
}

/** A value given directly or computed from the node context. */
export type Dynamic<T, I = any> = T | ((ctx: NodeContext<I>) => T | Promise<T>);

/** How a side effect recovers when a runner dies mid-way (type and recovery are recorded in the snapshot). */
export interface EffectContract {
  readonly type: string;
  readonly recovery: "idempotent" | "readBack" | "manual";
  /** Read-back only: decides after an uncertain crash whether the effect applied. */
  readonly observe?: (ctx: ObserveContext) => Observation | Promise<Observation>;
}

interface NodeCommon {
  readonly title?: string;
}

export interface ComputeNode<I = any> extends NodeCommon {
  readonly kind: "compute";
  readonly run: (ctx: NodeContext<I>) => unknown;
}

export interface ActionNode<I = any> extends NodeCommon {
  readonly kind: "action";
  readonly effect: EffectContract;
  /** What the effect asks of the external system; its fingerprint guards the effect key. */
  readonly request?: (ctx: NodeContext<I>) => unknown;
  readonly run: (ctx: ActionContext<I>) => unknown;
}

export interface ShellSpec {
  command: string;
  args?: string[];
  cwd?: string;
  timeoutMs?: number;
  allowNonZeroExit?: boolean;
  maxOutputBytes?: number;
}

/** What a finished shell command left behind: the effect result and default node output. */
export interface ShellReceipt {
  command: string;
  args: string[];
  cwd: string;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

export interface ShellNode<I = any> extends NodeCommon {
  readonly kind: "shell";
  readonly effect: EffectContract;
  readonly exec: (ctx: NodeContext<I>) => ShellSpec | Promise<ShellSpec>;
  readonly parse?: (receipt: ShellReceipt) => unknown;
}

/** The visible assistant reply is the node output (no submission contract). */
export interface AssistantMessageForm {
  readonly kind: "assistantMessage";
  readonly maxChars?: number;
}

export interface AgentNode<I = any> extends NodeCommon {
  readonly kind: "agent";
  readonly prompt: Dynamic<string, I>;
  readonly expectedOutput?: string | AssistantMessageForm;
  readonly validate?: (output: unknown) => unknown;
  /**
   * The step's time: interactive, the model time of its Pi turns; headless, wall-clock. Absent:
   * 15 min; `null`: no limit; a function of the context decides per attempt.
   */
  readonly timeoutMs?: Dynamic<number | null, I>;
  /** Headless runs: the only tools (besides `workflow`) the agent may call; absent: all of Pi's. */
  readonly allowedTools?: readonly string[];
}

export interface CheckpointNode<I = any> extends NodeCommon {
  readonly kind: "checkpoint";
  readonly summary: Dynamic<string, I>;
}

export interface DecisionNode<I = any> extends NodeCommon {
  readonly kind: "decision";
  readonly question: Dynamic<string, I>;
  readonly choices: readonly string[];
  readonly field: string;
  readonly timeoutMs?: number;
}

/** A text field a choice asks for (`textInput`): a Telegram ForceReply, the rest of `/workflow answer`. */
export interface TextInputSpec {
  readonly kind: "textInput";
  readonly label: string;
  readonly placeholder?: string;
  /** Characters, 1 to 4000 (default 1000). */
  readonly maxLength: number;
  /** An empty text is refused unless false (default true). */
  readonly required: boolean;
}

/** One answer a person may give (`choice`). */
export interface HumanChoice {
  readonly kind: "humanChoice";
  readonly label: string;
  readonly input?: TextInputSpec;
}

/** The choices of a protected decision, by choice ID (`defineHumanChoices`). */
export type HumanChoices<C extends string = string> = Readonly<Record<C, HumanChoice>>;

/** A response to a decision: a choice, with its text when the choice takes one. */
export interface DecisionResponse<C extends string = string> {
  choice: C;
  text?: string;
}

export type PresentationBlock =
  | { kind: "text"; text: string }
  | { kind: "fields"; fields: { label: string; value: string }[] }
  | { kind: "code"; text: string; language?: string };

/** What a person sees (`pi-workflows.decision-presentation.v1`): in Pi, the CLI and Telegram alike. */
export interface DecisionPresentation {
  schema: "pi-workflows.decision-presentation.v1";
  summary: string;
  blocks?: PresentationBlock[];
}

/** What one attempt of a protected decision asks. */
export interface DecisionRequestSpec {
  title: string;
  /** The canonical thing decided (e.g. a commit and a target): bound by the request digest, never shown. */
  subject: unknown;
  presentation: DecisionPresentation;
}

/** A protected decision's output: what was chosen and who settled it. */
export interface HumanDecisionOutput<C extends string = string> {
  choice: C;
  text?: string;
  provenance: "human" | "timeout_policy";
}

export interface HumanDecisionNode<I = any, C extends string = string> extends NodeCommon {
  readonly kind: "humanDecision";
  /** Who answers (a `channels.json` audience; Pi always shows it in the origin session). */
  readonly audience: string;
  readonly choices: HumanChoices<C>;
  /** After `afterMs` of wall-clock time, `response` wins. */
  readonly onTimeout?: { readonly afterMs: number; readonly response: DecisionResponse<C> };
  /** A deadline with no default: the step times out (`timed_out`). */
  readonly timeoutMs?: number;
  readonly request: (ctx: NodeContext<I>) => DecisionRequestSpec | Promise<DecisionRequestSpec>;
}

export interface NotifyNode<I = any> extends NodeCommon {
  readonly kind: "notify";
  readonly notifyKind: "progress" | "final";
  readonly message: Dynamic<string, I>;
}

export type WorkflowNode<I = any> =
  | ComputeNode<I>
  | ActionNode<I>
  | ShellNode<I>
  | AgentNode<I>
  | CheckpointNode<I>
  | DecisionNode<I>
  | HumanDecisionNode<I>
  | NotifyNode<I>;

export interface PlainEdge {
  from: string;
  to: string;
}

export interface SwitchEdge {
  from: string;
  switch: { on: string; cases: Record<string, string> };
}

export type WorkflowEdge = PlainEdge | SwitchEdge;

/** A child workflow mounted in a parent under a mount name. */
export interface IncludeSpec<I = any> {
  readonly kind: "include";
  /** The child, or a thunk returning it (lets two files refer to each other lazily). */
  readonly workflow: WorkflowDefinition | (() => WorkflowDefinition);
  readonly input?: (ctx: NodeContext<I>) => unknown;
}

/** An operation a client may apply at a settings path (RFC 6902; `test` is always allowed). */
export type SettingsOperation = "add" | "remove" | "replace";

/**
 * Settings a run carries and clients may change while it runs (`run.changeSettings`, a JSON
 * Patch). Only the listed JSON Pointers, at or below them, with the listed operations, may
 * change; everything else is denied.
 */
export interface WorkflowSettings {
  /** The starting value: a JSON object (at most 256 KiB as canonical JSON). */
  initial: Record<string, unknown>;
  /** JSON Pointer → the operations allowed at or below it, e.g. `{"/reviewers": ["add", "remove"]}`. */
  changeable?: Record<string, readonly SettingsOperation[]>;
}

export interface WorkflowOptions<I = unknown> {
  name: string;
  /** A one-line human title shown in listings (display only: 1 to 200 printable characters). */
  title?: string;
  input?: (raw: unknown) => I;
  startAt: string;
  nodes: Record<string, WorkflowNode<I>>;
  includes?: Record<string, IncludeSpec<I>>;
  /** Named exits for an including parent: exit name → terminal node (`"node"` or `{ from }`). */
  exits?: Record<string, string | { from: string }>;
  edges: WorkflowEdge[];
  maxSteps?: number;
  /** Run settings clients may change while the run is active (declared by a root workflow). */
  settings?: WorkflowSettings;
  /** Bounds the server enforces on this workflow's runner (declared by a root workflow). */
  limits?: WorkflowLimits;
}

/** Bounds on a workflow's runner; each replaces the server's default for this workflow. */
export interface WorkflowLimits {
  /** Resident memory of the runner process, in MiB (64 to 65536): above it the runner is
   * stopped and the run parks as `runnerOutOfMemory`. */
  runnerMemoryMb?: number;
}

/** A validated workflow, as `defineWorkflow` returns it. */
export interface WorkflowDefinition<I = any> {
  readonly kind: "workflow";
  readonly name: string;
  readonly title?: string;
  readonly input?: (raw: unknown) => I;
  readonly startAt: string;
  readonly nodes: Readonly<Record<string, WorkflowNode<I>>>;
  readonly includes: Readonly<Record<string, IncludeSpec<I>>>;
  /** Exit name → terminal node id (defaults to every terminal node under its own id). */
  readonly exits: Readonly<Record<string, string>>;
  readonly edges: readonly WorkflowEdge[];
  readonly maxSteps: number;
  readonly settings?: WorkflowSettings;
  readonly limits?: WorkflowLimits;
}
