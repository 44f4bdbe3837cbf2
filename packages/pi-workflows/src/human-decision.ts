// Protected human decisions: the builders a workflow uses (`humanDecision`, `defineHumanChoices`,
// `choice`, `textInput`, `humanDecisionEdge`) and the check of one attempt's request before it
// is proposed. The server checks the same limits again (src/decision/mod.rs) and is the
// authority; checking here first fails the attempt with a clear message instead of a refusal.
import type {
  DecisionPresentation,
  DecisionRequestSpec,
  DecisionResponse,
  HumanChoice,
  HumanChoices,
  HumanDecisionNode,
  NodeContext,
  SwitchEdge,
  TextInputSpec,
} from "./types.js";

export const PRESENTATION_SCHEMA = "pi-workflows.decision-presentation.v1";
const NAME = /^[a-z0-9_-]{1,64}$/;
const CHOICE_ID = /^[a-z0-9_-]{1,32}$/;
const CHOICES_MAX = 16;
const CHOICE_LABEL_CHARS_MAX = 64;
const INPUT_LABEL_CHARS_MAX = 200;
const INPUT_TEXT_CHARS_MAX = 4000;
const INPUT_TEXT_CHARS_DEFAULT = 1000;
const TITLE_CHARS_MAX = 200;
const SUMMARY_CHARS_MAX = 4000;
const BLOCKS_MAX = 32;
const BLOCK_TEXT_CHARS_MAX = 4000;
const CODE_TEXT_CHARS_MAX = 8000;
const FIELDS_MAX = 32;
const FIELD_LABEL_CHARS_MAX = 100;
const FIELD_VALUE_CHARS_MAX = 1000;
const PRESENTATION_BYTES_MAX = 32 * 1024;
const SUBJECT_BYTES_MAX = 64 * 1024;
/** The longest wall-clock deadline a decision may set: 30 days. */
export const DECISION_DEADLINE_MS_MAX = 30 * 24 * 3600_000;

function chars(text: string): number {
  return [...text].length;
}

function requireText(value: unknown, what: string, min: number, max: number): asserts value is string {
  if (typeof value !== "string" || chars(value) < min || chars(value) > max) {
    throw new Error(`${what} must be a string of ${min} to ${max} characters`);
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b-\u001f\u007f]/.test(value)) throw new Error(`${what} has control characters`);
}

/** A text field for a choice: the person's text becomes the output's `text`. */
export function textInput(options: { label: string; placeholder?: string; maxLength?: number; required?: boolean }): TextInputSpec {
  requireText(options?.label, "textInput.label", 1, INPUT_LABEL_CHARS_MAX);
  if (options.placeholder !== undefined) requireText(options.placeholder, "textInput.placeholder", 0, INPUT_LABEL_CHARS_MAX);
  const maxLength = options.maxLength ?? INPUT_TEXT_CHARS_DEFAULT;
  if (!Number.isInteger(maxLength) || maxLength < 1 || maxLength > INPUT_TEXT_CHARS_MAX) {
    throw new Error(`textInput.maxLength must be an integer from 1 to ${INPUT_TEXT_CHARS_MAX}`);
  }
  if (options.required !== undefined && typeof options.required !== "boolean") throw new Error("textInput.required must be a boolean");
  return Object.freeze({
    kind: "textInput",
    label: options.label,
    ...(options.placeholder !== undefined ? { placeholder: options.placeholder } : {}),
    maxLength,
    required: options.required ?? true,
  });
}

/** One answer a person may give; with `input`, it also takes their text. */
export function choice(options: { label: string; input?: TextInputSpec }): HumanChoice {
  requireText(options?.label, "choice.label", 1, CHOICE_LABEL_CHARS_MAX);
  if (options.input !== undefined && options.input?.kind !== "textInput") throw new Error("choice.input must be textInput({...})");
  return Object.freeze({ kind: "humanChoice", label: options.label, ...(options.input ? { input: options.input } : {}) });
}

/** The choices of a decision by ID (`[a-z0-9_-]`, 1 to 16 of them), in the order shown. */
export function defineHumanChoices<C extends string>(choices: Record<C, HumanChoice>): HumanChoices<C> {
  const entries = Object.entries(choices ?? {}) as [string, HumanChoice][];
  if (entries.length === 0 || entries.length > CHOICES_MAX) throw new Error(`defineHumanChoices needs 1 to ${CHOICES_MAX} choices`);
  for (const [id, value] of entries) {
    if (!CHOICE_ID.test(id)) throw new Error(`choice id ${JSON.stringify(id)} must be 1 to 32 characters of a-z, 0-9, _ and -`);
    if (value?.kind !== "humanChoice") throw new Error(`choice ${id} must be choice({label, input?})`);
  }
  return Object.freeze({ ...choices });
}

/** Check a response against the choices: a known choice, with text exactly when it takes one. */
export function checkResponse(choices: HumanChoices, response: DecisionResponse, what: string): void {
  const declared = choices[response?.choice];
  if (!declared) throw new Error(`${what}: ${JSON.stringify(response?.choice)} is not one of the choices: ${Object.keys(choices).join(", ")}`);
  const text = response.text;
  if (!declared.input) {
    if (text !== undefined) throw new Error(`${what}: choice ${response.choice} takes no text`);
    return;
  }
  if (text !== undefined && typeof text !== "string") throw new Error(`${what}: text must be a string`);
  if (declared.input.required && (text ?? "").trim() === "") throw new Error(`${what}: choice ${response.choice} needs text`);
  if (chars(text ?? "") > declared.input.maxLength) throw new Error(`${what}: the text is above ${declared.input.maxLength} characters`);
}

/**
 * A protected decision: only a person answers it (in the origin Pi session with `/workflow
 * answer`, the CLI, or a channel of its audience), never the model. `request` makes what this
 * attempt asks; `onTimeout` names the response that wins after `afterMs` (wall clock), or
 * `timeoutMs` a deadline with no default (the step times out). The output is
 * `{choice, text?, provenance}`; route it with `humanDecisionEdge`.
 */
export function humanDecision<I = any, C extends string = string>(options: {
  audience: string;
  choices: HumanChoices<C>;
  request: (ctx: NodeContext<I>) => DecisionRequestSpec | Promise<DecisionRequestSpec>;
  onTimeout?: { afterMs: number; response: DecisionResponse<C> };
  timeoutMs?: number;
  title?: string;
}): HumanDecisionNode<I, C> {
  if (typeof options?.audience !== "string" || !NAME.test(options.audience)) {
    throw new Error("humanDecision.audience must be 1 to 64 characters of a-z, 0-9, _ and -");
  }
  const ids = Object.keys(options.choices ?? {});
  if (ids.length === 0 || ids.some((id) => options.choices[id as C]?.kind !== "humanChoice")) {
    throw new Error("humanDecision.choices must come from defineHumanChoices({...})");
  }
  if (typeof options.request !== "function") throw new Error("humanDecision.request must be a function of the node context");
  if (options.onTimeout !== undefined && options.timeoutMs !== undefined) {
    throw new Error("humanDecision takes onTimeout (a default) or timeoutMs (no default), not both");
  }
  if (options.onTimeout !== undefined) {
    requireDeadline(options.onTimeout?.afterMs, "humanDecision.onTimeout.afterMs");
    checkResponse(options.choices, options.onTimeout.response, "humanDecision.onTimeout.response");
  }
  if (options.timeoutMs !== undefined) requireDeadline(options.timeoutMs, "humanDecision.timeoutMs");
  return Object.freeze({
    kind: "humanDecision",
    audience: options.audience,
    choices: options.choices,
    request: options.request,
    ...(options.onTimeout ? { onTimeout: Object.freeze({ afterMs: options.onTimeout.afterMs, response: { ...options.onTimeout.response } }) } : {}),
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    title: options.title,
  });
}

function requireDeadline(value: unknown, what: string): void {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > DECISION_DEADLINE_MS_MAX) {
    throw new Error(`${what} must be a positive number of milliseconds, at most 30 days`);
  }
}

/** A switch on a decision's `choice` whose cases cover every choice exactly. */
export function humanDecisionEdge<C extends string>(options: { from: string; choices: HumanChoices<C>; cases: Record<C, string> }): SwitchEdge {
  const { from, choices, cases } = options ?? ({} as typeof options);
  if (typeof from !== "string") throw new Error("humanDecisionEdge.from must be a node name");
  const ids = Object.keys(choices ?? {});
  if (ids.length === 0) throw new Error(`human decision edge from node "${from}": choices must come from defineHumanChoices`);
  const given = Object.keys(cases ?? {});
  const missing = ids.filter((id) => !given.includes(id));
  if (missing.length > 0) throw new Error(`human decision edge from node "${from}" misses cases for: ${missing.join(", ")}`);
  const extra = given.filter((key) => !ids.includes(key));
  if (extra.length > 0) throw new Error(`human decision edge from node "${from}" has cases that are not choices: ${extra.join(", ")}`);
  return { from, switch: { on: "$output.choice", cases: { ...cases } } };
}

/** The request as proposed: the contract's `decision` member, and the subject kept apart. */
export interface ProposedDecision {
  decision: Record<string, unknown>;
  subject: unknown;
}

/** Check one attempt's request (what `request(ctx)` returned) and shape what is proposed. */
export function proposedDecision(node: HumanDecisionNode, spec: DecisionRequestSpec, deadlineAt: number | undefined): ProposedDecision {
  if (spec === null || typeof spec !== "object") throw new Error("humanDecision.request must return {title, subject, presentation}");
  requireText(spec.title, "the decision's title", 1, TITLE_CHARS_MAX);
  checkPresentation(spec.presentation);
  const subjectBytes = Buffer.byteLength(JSON.stringify(spec.subject ?? null) ?? "null");
  if (subjectBytes > SUBJECT_BYTES_MAX) throw new Error(`the decision's subject is ${subjectBytes} bytes; the limit is ${SUBJECT_BYTES_MAX}`);
  const choices = Object.entries(node.choices as HumanChoices).map(([id, value]) => ({
    id,
    label: value.label,
    ...(value.input ? { input: { label: value.input.label, ...(value.input.placeholder !== undefined ? { placeholder: value.input.placeholder } : {}), maxLength: value.input.maxLength, required: value.input.required } } : {}),
  }));
  const decision: Record<string, unknown> = {
    audience: node.audience,
    title: spec.title,
    presentation: { schema: spec.presentation.schema, summary: spec.presentation.summary, blocks: spec.presentation.blocks ?? [] },
    choices,
  };
  if (deadlineAt !== undefined) decision.deadlineAt = deadlineAt;
  if (node.onTimeout) decision.onTimeout = node.onTimeout.response;
  return { decision, subject: spec.subject ?? null };
}

function checkPresentation(presentation: DecisionPresentation): void {
  if (presentation?.schema !== PRESENTATION_SCHEMA) throw new Error(`the decision's presentation.schema must be "${PRESENTATION_SCHEMA}"`);
  requireText(presentation.summary, "presentation.summary", 1, SUMMARY_CHARS_MAX);
  const blocks = presentation.blocks ?? [];
  if (!Array.isArray(blocks) || blocks.length > BLOCKS_MAX) throw new Error(`presentation.blocks must be a list of at most ${BLOCKS_MAX} blocks`);
  for (const block of blocks) {
    if (block?.kind === "text") requireText(block.text, "a text block", 1, BLOCK_TEXT_CHARS_MAX);
    else if (block?.kind === "code") {
      requireText(block.text, "a code block", 1, CODE_TEXT_CHARS_MAX);
      if (block.language !== undefined && !/^[a-z0-9_-]{1,32}$/.test(block.language)) throw new Error("a code block's language must be 1 to 32 characters of a-z, 0-9, _ and -");
    }
    else if (block?.kind === "fields") {
      if (!Array.isArray(block.fields) || block.fields.length === 0 || block.fields.length > FIELDS_MAX) throw new Error(`a fields block has 1 to ${FIELDS_MAX} fields`);
      for (const field of block.fields) {
        requireText(field?.label, "a field label", 1, FIELD_LABEL_CHARS_MAX);
        requireText(field?.value, "a field value", 0, FIELD_VALUE_CHARS_MAX);
      }
    } else throw new Error(`presentation block kind ${JSON.stringify((block as { kind?: unknown })?.kind)} is not text, fields or code`);
  }
  const bytes = Buffer.byteLength(JSON.stringify(presentation));
  if (bytes > PRESENTATION_BYTES_MAX) throw new Error(`the presentation is ${bytes} bytes; the limit is ${PRESENTATION_BYTES_MAX}: summarise, and link to details`);
}
