// The pi-workflows extension for Pi 1.6.x: `/workflow`, the model-facing `workflow` tool, the
// WorkflowMessageCoordinator that delivers workflow messages into this session, message
// renderers, the widget and the status line. Load it with `pi -e <package dir>` or install the
// package with `pi install <package dir>` (docs/PI.md).
//
// What it never does: open SQLite, run workflow code, or start anything in the factory (some
// Pi invocations never start a session). Work starts in `session_start` and stops in
// `session_shutdown`. The server is a separate process (`pi-workflows server start`).
import { ClientError } from "../client/client.js";
import type { JsonObject } from "../client/protocol.js";
import * as actions from "./actions.js";
import { completions, parseCommand, type Parsed, UsageError } from "./command.js";
import { turnEndFromBranch, WorkflowMessageCoordinator, type CoordinatorPi, type CoordinatorServer } from "./coordinator.js";
import { SessionLink } from "./link.js";
import type { PiApi, PiCommandContext, PiContext, PiToolResult } from "./pi-types.js";
import { registerChannelCommand } from "./channel-command.js";
import { registerPiw } from "./piw.js";
import { renderMessage, RENDERED_TYPES } from "./render.js";
import { packageVersion } from "./server-process.js";
import { parseSessionView, type SessionView } from "./session-view.js";
import { configDir, loadShortcuts } from "./shortcuts.js";
import { idempotencyKeyOf, TOOL_DESCRIPTION, TOOL_PARAMETERS, ToolInputError, validateToolParams } from "./tool.js";
import { clampScroll, STATUS_KEY, statusLine, WIDGET_KEY, widgetLines, type WidgetState } from "./widget.js";

/** In print and JSON mode, how long `/workflow start` keeps Pi alive for the run's turns, at most. */
export const PRINT_WAIT_MS_MAX = 30 * 60_000;
const PRINT_POLL_MS = 200;
/** How long a completion waits for the workflow list. */
const COMPLETION_WAIT_MS = 2_000;
/** How long a submission waits for a reconnection to coordinate the session again. */
const COORDINATOR_WAIT_MS_MAX = 5_000;

export default function piWorkflows(pi: PiApi): void {
  new Extension(pi).register();
}

class Extension {
  private ctx?: PiContext;
  private link?: SessionLink;
  private coordinator?: WorkflowMessageCoordinator;
  private readonly widget: WidgetState = { stale: false, scroll: 0 };
  private drawn?: string;
  private knownWorkflows: string[] = [];
  private listing?: Promise<void>;
  private readonly version: string;

  constructor(private readonly pi: PiApi) {
    this.version = packageVersion();
  }

  register(): void {
    const pi = this.pi;
    pi.registerTool({
      name: "workflow",
      label: "Workflow",
      description: TOOL_DESCRIPTION,
      promptSnippet: "Work with pi-workflows runs: submit step outputs, start, inspect and control workflows",
      promptGuidelines: [
        "When a workflow step message names a requestId, do the step, then call the workflow tool with action submit, that requestId and the output; then end your turn.",
      ],
      parameters: TOOL_PARAMETERS,
      // Calls of one response run one after another, in order (a submit after an update).
      executionMode: "sequential",
      execute: (toolCallId: string, params: never, _signal: AbortSignal | undefined, _onUpdate: unknown, ctx: PiContext) => this.tool(toolCallId, params, ctx),
    });
    pi.registerCommand("workflow", {
      description: "pi-workflows: list, start, status, pause, resume, cancel, clear, restart, answer, change-settings, queue-follow-up, remove-follow-up",
      getArgumentCompletions: (prefix) => this.complete(prefix),
      handler: (args, ctx) => this.command(args, ctx),
    });
    for (const type of RENDERED_TYPES) pi.registerMessageRenderer(type, renderMessage);
    const shortcuts = loadShortcuts();
    if (shortcuts.warning) this.widget.problem = shortcuts.warning.slice(0, 300);
    const hint = [shortcuts.scrollUp, shortcuts.scrollDown].filter(Boolean).join("/");
    this.widget.scrollHint = hint ? `${hint} scroll` : undefined;
    if (shortcuts.scrollUp) pi.registerShortcut(shortcuts.scrollUp, { description: "Scroll the pi-workflows widget up", handler: (ctx) => this.scroll(ctx, -1) });
    if (shortcuts.scrollDown) pi.registerShortcut(shortcuts.scrollDown, { description: "Scroll the pi-workflows widget down", handler: (ctx) => this.scroll(ctx, 1) });
    // `/piw` and Ctrl+Shift+R (piw.ts): the session's run in a Herdr pane, else how to run piw.
    this.widget.piwHint = registerPiw(pi, {
      view: () => this.widget.view,
      ready: async () => (this.link ?? failNotStarted()).ready(),
      notify: (message, type) => this.notify(message, type),
      setContext: (ctx) => {
        this.ctx = ctx;
      },
    }).widgetHint;
    // `/workflow-channel` (channel-command.ts): the Telegram decision channels.
    registerChannelCommand(pi, {
      client: async () => (this.link ?? failNotStarted()).ready(),
      notify: (message, type) => this.notify(message, type),
      setContext: (ctx) => {
        this.ctx = ctx;
      },
      configDir: () => configDir(),
    });

    pi.on("session_start", (_event, ctx) => this.start(ctx));
    pi.on("session_shutdown", () => this.stop());
    // A branch change (/tree, fork): the coordinator reports the new branch before anything else.
    pi.on("session_tree", (_event, ctx) => {
      this.ctx = ctx;
      this.coordinator?.branchChanged();
    });
    pi.on("agent_start", (_event, ctx) => {
      this.ctx = ctx;
      this.coordinator?.agentStart();
    });
    // The entry of a message sent at the start of this run exists now: confirm it.
    pi.on("turn_end", (_event, ctx) => {
      this.ctx = ctx;
      this.coordinator?.kick();
    });
    // A step that restricts tools (`agent({allowedTools})`) restricts them for its own turn.
    pi.on("tool_call", (event) => {
      const reason = this.coordinator?.toolRefusal(event.toolName);
      return reason === undefined ? undefined : { block: true, reason };
    });
    pi.on("agent_settled", (event, ctx) => {
      this.ctx = ctx;
      this.coordinator?.agentSettled(turnEndFromBranch(ctx.sessionManager.getBranch(), event.aborted));
    });
  }

  private start(ctx: PiContext): void {
    this.stop();
    this.ctx = ctx;
    const sessionId = ctx.sessionManager.getSessionId();
    const piPort: CoordinatorPi = {
      isIdle: () => this.live().isIdle(),
      hasPendingMessages: () => this.live().hasPendingMessages(),
      branch: () => this.live().sessionManager.getBranch(),
      send: (message, triggerTurn) => this.pi.sendMessage(message, triggerTurn ? { triggerTurn: true } : undefined),
    };
    const server: CoordinatorServer = {
      reportBranch: (epoch, report) => this.client().reportBranch(sessionId, epoch, report),
      reportTurn: (epoch, report) => this.client().reportTurn(sessionId, epoch, report),
      window: async (epoch) => parseSessionView(await this.client().sessionWindow(sessionId, { epoch })),
      submitAssistant: async (epoch, runId, requestId, text, key) => {
        await actions.submitAssistant(this.actionContext(key, epoch), runId, requestId, text);
      },
    };
    const coordinator = new WorkflowMessageCoordinator(piPort, server, (level, message) => {
      if (level !== "info") this.notify(message, level);
    });
    this.coordinator = coordinator;
    this.link = new SessionLink(
      sessionId,
      { packageVersion: this.version },
      {
        onEpoch: (epoch) => coordinator.connected(epoch),
        onView: (view) => {
          this.widget.view = view;
          this.widget.stale = false;
          this.widget.problem = undefined;
          coordinator.onView(view);
          this.redraw();
        },
        onDisconnected: () => {
          coordinator.disconnected();
          this.widget.stale = true;
          this.redraw();
        },
        onProblem: (message) => {
          this.widget.problem = message;
          this.notify(message, "warning");
          this.redraw();
        },
        onPoll: () => coordinator.kick(),
      },
    );
    this.link.start();
  }

  private stop(): void {
    this.coordinator?.stop();
    this.link?.stop();
    this.coordinator = undefined;
    this.link = undefined;
  }

  /** The newest ctx Pi gave us (a captured one is stale after a reload or session switch). */
  private live(): PiContext {
    if (!this.ctx) throw new Error("the Pi session is not open");
    return this.ctx;
  }

  private client() {
    const client = this.link?.current();
    if (!client) throw new ClientError("unavailable", "not connected to the pi-workflows server");
    return client;
  }

  private actionContext(idempotencyKey: string, epoch = this.coordinator?.activeEpoch, client = this.client()): actions.ActionContext {
    const ctx = this.live();
    return { client, sessionId: ctx.sessionManager.getSessionId(), cwd: ctx.cwd, view: this.widget.view, epoch, idempotencyKey };
  }

  private notify(message: string, type: "info" | "warning" | "error"): void {
    try {
      this.ctx?.ui.notify(message, type);
    } catch {
      // A stale ctx (Pi reloaded): nothing to show it on.
    }
  }

  private redraw(): void {
    const ctx = this.ctx;
    if (!ctx || ctx.mode === "print" || ctx.mode === "json") return;
    const lines = widgetLines(this.widget);
    const status = statusLine(this.widget);
    const key = JSON.stringify([lines, status]);
    if (key === this.drawn) return; // RPC turns every call into a line: draw changes only
    this.drawn = key;
    try {
      ctx.ui.setWidget(WIDGET_KEY, lines);
      ctx.ui.setStatus(STATUS_KEY, status);
    } catch {
      // A stale ctx: the next event brings a fresh one.
    }
  }

  private scroll(ctx: PiContext, by: number): void {
    this.ctx = ctx;
    this.widget.scroll = clampScroll(this.widget, this.widget.scroll + by);
    this.redraw();
  }

  private async complete(prefix: string) {
    if (/^\s*start\s+\S*$/.test(prefix) && this.knownWorkflows.length === 0 && this.link?.current()) {
      this.listing ??= (async () => {
        try {
          const { names } = await actions.listWorkflows(this.actionContext(`list:${Date.now()}`));
          this.knownWorkflows = names;
        } catch {
          // No list now: completion offers nothing, the command still works.
        } finally {
          this.listing = undefined;
        }
      })();
      await Promise.race([this.listing, new Promise((resolve) => setTimeout(resolve, COMPLETION_WAIT_MS))]);
    }
    const view = this.widget.view;
    const runIds = [view?.activeRun?.runId, view?.retainedTerminal?.runId].filter((id): id is string => typeof id === "string");
    return completions(prefix, { workflows: this.knownWorkflows, runIds });
  }

  private async command(args: string, ctx: PiCommandContext): Promise<void> {
    this.ctx = ctx;
    let parsed: Parsed;
    try {
      parsed = parseCommand(args);
    } catch (error) {
      this.notify(`/workflow: ${(error as Error).message}`, "warning");
      return;
    }
    try {
      const client = await (this.link ?? failNotStarted()).ready();
      const act = this.actionContext(`cmd:${actions.newRunId()}`, this.coordinator?.activeEpoch, client);
      const text = await this.runCommand(parsed, act);
      this.notify(text, "info");
      if (parsed.sub === "start" && (ctx.mode === "print" || ctx.mode === "json")) await this.waitForWorkflow(ctx);
    } catch (error) {
      this.notify(`/workflow ${parsed.sub}: ${(error as Error).message}`, "error");
    }
  }

  private async runCommand(parsed: Parsed, act: actions.ActionContext): Promise<string> {
    switch (parsed.sub) {
      case "list": {
        const { text, names } = await actions.listWorkflows(act, parsed.offset);
        if (parsed.offset === 0) this.knownWorkflows = names;
        return text;
      }
      case "start":
        return (await actions.startRun(act, parsed.workflow, parsed.input)).text;
      case "status":
        return actions.runStatus(act, parsed.runId);
      case "pause":
      case "resume":
      case "cancel":
        return actions.control(act, parsed.sub, parsed.runId);
      case "restart":
        return actions.restartRun(act, parsed.runId);
      case "clear":
        return (await actions.clearTerminal(act)) ? "the ended run is cleared from this session" : "nothing to clear";
      case "answer":
        return actions.personAnswer(act, parsed.runId, parsed.answer);
      case "change-settings":
        return actions.changeSettings(act, parsed.runId, parsed.patch, parsed.expect, "human");
      case "queue-follow-up":
        return actions.queueFollowUp(act, undefined, parsed.prompt);
      case "remove-follow-up":
        return actions.removeFollowUp(act, undefined, parsed.followUpId);
    }
  }

  /**
   * Print and JSON mode end when the command's handler returns (pitfall 7): keep Pi alive while
   * the run has model work for this session, waiting for Pi to go idle between its turns.
   */
  private async waitForWorkflow(ctx: PiCommandContext): Promise<void> {
    const deadline = Date.now() + PRINT_WAIT_MS_MAX;
    let quietPolls = 0;
    while (Date.now() < deadline) {
      await ctx.waitForIdle();
      await this.coordinator?.idle();
      const view = this.widget.view;
      if (hasModelWork(view)) quietPolls = 0;
      else if (++quietPolls >= 3) return; // three quiet looks in a row: nothing more for the model
      await new Promise((resolve) => setTimeout(resolve, PRINT_POLL_MS));
    }
  }

  private async tool(toolCallId: string, raw: unknown, ctx: PiContext): Promise<PiToolResult> {
    this.ctx = ctx;
    let params;
    try {
      params = validateToolParams(raw);
    } catch (error) {
      return toolError(error instanceof ToolInputError ? error.message : String(error), { refused: true });
    }
    const key = idempotencyKeyOf(toolCallId);
    try {
      const client = await (this.link ?? failNotStarted()).ready();
      // A submission carries the coordinator's epoch: give a reconnection a moment to claim
      // the session again rather than refuse the model's answer at once.
      const needsEpoch = params.action === "submit" || params.action === "update";
      const epoch = needsEpoch ? await this.coordinator?.activeEpochWithin(COORDINATOR_WAIT_MS_MAX) : this.coordinator?.activeEpoch;
      const act = this.actionContext(key, epoch, client);
      switch (params.action) {
        case "list": {
          const { text } = await actions.listWorkflows(act, typeof params.offset === "number" ? params.offset : 0);
          return toolText(text, { action: "list" });
        }
        case "start": {
          const { text, runId } = await actions.startRun(act, params.workflow as string, params.input);
          return toolText(`${text}. End your turn now: the first step arrives after it.`, { action: "start", runId });
        }
        case "status":
          return toolText(await actions.runStatus(act, params.runId), { action: "status" });
        case "pause":
        case "resume":
        case "cancel":
          return toolText(await actions.control(act, params.action, params.runId), { action: params.action });
        case "restart":
          return toolText(await actions.restartRun(act, params.runId), { action: "restart" });
        case "answer":
          return toolText(await actions.modelAnswer(act, params.runId, params.requestId, params.input), { action: "answer" });
        case "update": {
          const receipt = await actions.update(act, params.requestId as string, params.runId, params.update as JsonObject);
          return toolText(`update recorded (seq ${String(receipt.seq ?? "?")})`, { action: "update" });
        }
        case "submit": {
          await actions.submit(act, params.requestId as string, params.runId, params.output);
          return toolText("Accepted: the step is complete. End your turn now; the next step, if any, arrives after your turn ends.", {
            action: "submit",
            accepted: true,
          });
        }
        case "change-settings":
          return toolText(await actions.changeSettings(act, params.runId, params.patch, params.expectedChangeNumber, "session"), { action: "change-settings" });
        case "queue-follow-up":
          return toolText(await actions.queueFollowUp(act, params.runId, params.prompt as string), { action: "queue-follow-up" });
        case "remove-follow-up":
          return toolText(await actions.removeFollowUp(act, params.runId, params.followUpId as string), { action: "remove-follow-up" });
        case "read-step":
          return toolText(await actions.readStep(act, params.requestId as string, params.runId, typeof params.offset === "number" ? params.offset : 0), { action: "read-step" });
      }
    } catch (error) {
      const code = (error as { code?: string }).code ?? "error";
      const message = (error as Error).message;
      if (params.action === "submit" && code === "submissionRejected") {
        return toolError(`Rejected: ${message}\nFix the output and call the workflow tool again with action submit and requestId ${String(params.requestId)}.`, {
          action: "submit",
          accepted: false,
          code,
        });
      }
      return toolError(`${params.action} failed (${code}): ${message}`, { action: params.action, code });
    }
  }
}

function failNotStarted(): never {
  throw new ClientError("unavailable", "the Pi session has not started yet");
}

/** Whether the session still has work for the model (a message to deliver, a run at work). */
function hasModelWork(view: SessionView | undefined): boolean {
  if (!view) return true; // not loaded yet
  if (view.messages.some((m) => m.status === "pending") || view.openTurn) return true;
  const run = view.activeRun;
  if (!run) return false;
  const status = run.display.status;
  if (status === "queued" || status === "running") return true;
  const request = run.display.request as { kind?: string } | undefined;
  return status === "waiting" && (request?.kind === "agent" || request?.kind === "assistant");
}

function toolText(text: string, details: JsonObject): PiToolResult {
  return { content: [{ type: "text", text }], details };
}

function toolError(text: string, details: JsonObject): PiToolResult {
  return { content: [{ type: "text", text }], details, isError: true };
}

export { UsageError };
