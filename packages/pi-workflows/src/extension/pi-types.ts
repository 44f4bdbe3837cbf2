// The part of Pi's extension API (@earendil-works/pi-coding-agent 1.6.x) this extension uses,
// as structural types. Why not import Pi's own: the package builds and its unit tests run on
// Node 20 without Pi installed (Pi needs Node 22 and lives in .tools/ only after
// scripts/install-pi.sh). test/extension/pi-types-conformance.test.mjs compiles a check that
// Pi's real `ExtensionAPI` is assignable to `PiApi` whenever the pinned Pi is installed, so a
// drift between these types and Pi's shows up as a test failure, not at run time.

export type PiMode = "tui" | "rpc" | "json" | "print";

export interface PiTextContent {
  type: "text";
  text: string;
}

/** A session entry, as far as this extension reads it (Pi's `SessionEntry` union). */
export interface PiSessionEntry {
  type: string;
  id: string;
  parentId?: string | null;
  customType?: string;
  details?: unknown;
  message?: unknown;
}

export interface PiAssistantMessage {
  role: "assistant";
  stopReason?: string;
  content?: unknown;
}

export interface PiSessionManager {
  getSessionId(): string;
  getBranch(fromId?: string): readonly PiSessionEntry[];
}

export interface PiUi {
  notify(message: string, type?: "info" | "warning" | "error"): void;
  setStatus(key: string, text: string | undefined): void;
  setWidget(key: string, content: string[] | undefined, options?: { placement?: "aboveEditor" | "belowEditor" }): void;
}

export interface PiContext {
  ui: PiUi;
  mode: PiMode;
  hasUI: boolean;
  cwd: string;
  sessionManager: PiSessionManager;
  isIdle(): boolean;
  hasPendingMessages(): boolean;
}

export interface PiCommandContext extends PiContext {
  waitForIdle(): Promise<void>;
}

export interface PiToolResult {
  content: PiTextContent[];
  details: unknown;
  isError?: boolean;
}

export interface PiToolDefinition {
  name: string;
  label: string;
  description: string;
  promptSnippet?: string;
  promptGuidelines?: string[];
  parameters: object;
  executionMode?: "sequential" | "parallel";
  execute(toolCallId: string, params: never, signal: AbortSignal | undefined, onUpdate: unknown, ctx: PiContext): Promise<PiToolResult>;
}

export interface PiAutocompleteItem {
  value: string;
  label: string;
  description?: string;
}

export interface PiCommand {
  description?: string;
  getArgumentCompletions?: (argumentPrefix: string) => PiAutocompleteItem[] | null | Promise<PiAutocompleteItem[] | null>;
  handler: (args: string, ctx: PiCommandContext) => Promise<void>;
}

/** pi-tui's Component: lines no wider than `width`. */
export interface PiComponent {
  render(width: number): readonly string[];
  invalidate(): void;
}

export interface PiTheme {
  fg(color: "accent" | "muted" | "dim" | "success" | "error" | "warning" | "text", text: string): string;
  bold(text: string): string;
}

export interface PiMessageRenderOptions {
  expanded: boolean;
  outputPad: number;
  keyHint(keybinding: "app.tools.expand", description: string): string;
}

export interface PiCustomMessage {
  customType: string;
  content: string | readonly unknown[];
  display: boolean;
  details?: unknown;
}

export interface PiSessionStartEvent {
  reason: "startup" | "reload" | "new" | "resume" | "fork";
}
export interface PiSessionShutdownEvent {
  reason: string;
}
export interface PiAgentSettledEvent {
  aborted: boolean;
}
export interface PiToolCallEvent {
  toolName: string;
  toolCallId: string;
}
export interface PiSessionTreeEvent {
  newLeafId: string | null;
  oldLeafId: string | null;
}

type Handler<E> = (event: E, ctx: PiContext) => unknown;

export interface PiApi {
  on(event: "session_start", handler: Handler<PiSessionStartEvent>): () => void;
  on(event: "session_shutdown", handler: Handler<PiSessionShutdownEvent>): () => void;
  on(event: "session_tree", handler: Handler<PiSessionTreeEvent>): () => void;
  on(event: "agent_start", handler: Handler<object>): () => void;
  on(event: "turn_end", handler: Handler<object>): () => void;
  on(event: "agent_settled", handler: Handler<PiAgentSettledEvent>): () => void;
  on(event: "tool_call", handler: (event: PiToolCallEvent, ctx: PiContext) => { block: true; reason: string } | undefined): () => void;
  registerTool(tool: PiToolDefinition): void;
  registerCommand(name: string, options: PiCommand): void;
  registerShortcut(shortcut: string, options: { description?: string; handler: (ctx: PiContext) => Promise<void> | void }): void;
  registerMessageRenderer(customType: string, renderer: (message: PiCustomMessage, options: PiMessageRenderOptions, theme: PiTheme) => PiComponent | undefined): void;
  sendMessage(
    message: { customType: string; content: string; display: boolean; details?: unknown },
    options?: { triggerTurn?: boolean; deliverAs?: "steer" | "followUp" | "nextTurn" },
  ): void;
}
