// Custom message renderers: a compact card per workflow message (expandable to the full text
// the model read), drawn from the message's own details. Why a component of our own instead
// of pi-tui's Text: the extension imports nothing from Pi at run time, so it also loads (and is
// tested) outside Pi.
import { CUSTOM_TYPES, type HiddenDetails } from "./messages.js";
import type { PiComponent, PiCustomMessage, PiMessageRenderOptions, PiTheme } from "./pi-types.js";

/** Lines a collapsed card shows, at most. */
export const CARD_LINES_MAX = 3;
/** Lines an expanded card shows, at most (the rest is counted). */
export const EXPANDED_LINES_MAX = 200;

const isObject = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === "object" && !Array.isArray(value);
const str = (value: unknown): string | undefined => (typeof value === "string" && value.length > 0 ? value : undefined);

/** Wrap plain text (no escape sequences) to `width` columns. */
export function wrap(text: string, width: number): string[] {
  const columns = Math.max(8, width);
  const out: string[] = [];
  for (const raw of text.replace(/\t/g, "  ").replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "").split("\n")) {
    let line = raw;
    while (line.length > columns) {
      let cut = line.lastIndexOf(" ", columns);
      if (cut <= 0) cut = columns;
      out.push(line.slice(0, cut));
      line = line.slice(cut).replace(/^ /, "");
    }
    out.push(line);
  }
  return out;
}

/** A card: a styled title line, then body lines, wrapped to the width Pi gives. */
class Card implements PiComponent {
  private cache?: { width: number; lines: string[] };
  constructor(
    private readonly title: string,
    private readonly body: string,
    private readonly maxBodyLines: number,
    private readonly hint: string | undefined,
    private readonly theme: PiTheme,
    private readonly pad: number,
  ) {}

  render(width: number): readonly string[] {
    if (this.cache?.width === width) return this.cache.lines;
    const inner = Math.max(8, width - this.pad * 2);
    const indent = " ".repeat(this.pad);
    const lines = wrap(this.title, inner).map((line) => indent + this.theme.fg("accent", this.theme.bold(line)));
    const body = this.body === "" ? [] : wrap(this.body, inner);
    for (const line of body.slice(0, this.maxBodyLines)) lines.push(indent + this.theme.fg("text", line));
    if (body.length > this.maxBodyLines) lines.push(indent + this.theme.fg("dim", `… ${body.length - this.maxBodyLines} more lines`));
    if (this.hint) lines.push(indent + this.theme.fg("dim", this.hint));
    this.cache = { width, lines };
    return lines;
  }

  invalidate(): void {
    this.cache = undefined;
  }
}

function contentText(message: PiCustomMessage): string {
  if (typeof message.content === "string") return message.content;
  return message.content
    .map((part) => (isObject(part) && part.type === "text" && typeof part.text === "string" ? part.text : ""))
    .join("");
}

function detailsOf(message: PiCustomMessage): Partial<HiddenDetails> {
  return isObject(message.details) ? (message.details as Partial<HiddenDetails>) : {};
}

function title(message: PiCustomMessage): string {
  const details = detailsOf(message);
  const content = isObject(details.content) ? details.content : {};
  const where = [str(content.workflow), str(content.nodePath)].filter(Boolean).join(" › ");
  switch (details.kind) {
    case "step":
      return `${details.reason === "resumed" ? "↻" : details.reason === "reminder" ? "⟳" : "▶"} wf › ${where || "step"}${details.reason && details.reason !== "initial" ? ` · ${details.reason}` : ""}`;
    case "decision":
      return `◆ wf decision › ${where || "decision"} · answer with /workflow answer`;
    case "notification":
      return `• wf ${str(content.kind) ?? "notification"}`;
    case "terminal":
      return `■ wf run ${str(content.outcome) ?? str(content.status) ?? "ended"}`;
    case "followUp":
      return "↪ wf follow-up";
    default:
      return "wf message";
  }
}

/** The renderer for one of our custom types. */
export function renderMessage(message: PiCustomMessage, options: PiMessageRenderOptions, theme: PiTheme): PiComponent {
  const text = contentText(message);
  const kind = detailsOf(message).kind;
  // Notifications and terminal results are short: show them whole.
  const compactBody = kind === "notification" || kind === "terminal" ? text : text.split("\n").filter((line) => line.trim() !== "").slice(1, 1 + CARD_LINES_MAX).join("\n");
  const body = options.expanded ? text : compactBody;
  const hint = options.expanded ? undefined : safeHint(options);
  return new Card(title(message), body, options.expanded ? EXPANDED_LINES_MAX : CARD_LINES_MAX, hint, theme, options.outputPad);
}

function safeHint(options: PiMessageRenderOptions): string | undefined {
  try {
    return options.keyHint("app.tools.expand", "to expand");
  } catch {
    return undefined;
  }
}

export const RENDERED_TYPES: readonly string[] = Object.values(CUSTOM_TYPES);
