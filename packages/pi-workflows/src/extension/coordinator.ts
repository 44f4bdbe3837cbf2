// WorkflowMessageCoordinator: the one place that delivers workflow messages of every kind into
// the origin Pi session and reports what Pi did with them (docs/SESSIONS.md; the spec's
// "Interactive Pi execution" send algorithm and "Origin-session activity").
//
// The rules it keeps, and why:
// - After every connection (a new coordinator epoch) it waits for a complete session view of
//   that epoch and reports the active branch before it sends anything or reports a turn: the
//   server may hold messages this process (or a previous one) already put into Pi.
// - It sends only the view's `nextEligible`, only while Pi is idle with no pending input, and
//   never an ID already in its in-memory queued map (a poll can discover work, not resend it).
//   It searches the active branch for the hidden ID first and reports a match instead of
//   sending; otherwise it re-checks synchronously and calls `sendMessage` with no `await`
//   between that final check and the call, so nothing can start in between.
// - After a send it waits for Pi's entry and reports the branch, so the server marks the
//   message `sent` with that entry.
// - While a message it sent is not yet confirmed, or a turn it saw is not yet reported, its
//   branch reports say `isIdle: false`: the server may treat absence as proof only when Pi is
//   really done (Pi defers a turn requested inside `agent_settled`, and an earlier
//   implementation "proved" a just-sent step absent and cancelled it).
// - One Pi prompt cycle (first `agent_start` to `agent_settled`) is one workflow turn:
//   `agent_start` fires again for retries and continuations of the same prompt, and a second
//   turn ID would make the server close the first as lost.
// - Turn starts and ends are buffered until the view and the message's receipt are known,
//   then reported in order; `aborted` (Escape) is reported as the end's outcome, and the server
//   pauses the run: no pause command is sent.
// Every server call runs on one serialized chain, so reports reach the server in the order Pi
// produced them.
import { toolRefusal } from "../agent/allowed-tools.js";
import type { BranchReport, TurnOutcome, TurnReport } from "../client/client.js";
import { newId } from "../client/identity.js";
import type { JsonObject } from "../client/protocol.js";
import { findOnBranch, type OutgoingMessage, outgoing, sourcesOnBranch, stepForm, requestIdOf, triggersTurn } from "./messages.js";
import type { PiSessionEntry } from "./pi-types.js";
import type { SessionView, ViewMessage } from "./session-view.js";

/** Steps one pump may take before it yields (each is one server call at most). */
export const PUMP_STEPS_MAX = 16;
/** Messages kept in the queued map at most (sends wait for confirmation, so it stays tiny). */
export const QUEUED_MAX = 64;
/**
 * Older messages of the window's sources a branch report names at most, besides the window's
 * own (the server takes up to 4 × its 64-message window).
 */
export const OLDER_FOUND_MAX = 128;
/** Characters of an assistant reply submitted for an assistant-message step, at most. */
export const ASSISTANT_TEXT_CHARS_MAX = 256 * 1024;

export interface CoordinatorPi {
  isIdle(): boolean;
  hasPendingMessages(): boolean;
  branch(): readonly PiSessionEntry[];
  send(message: OutgoingMessage, triggerTurn: boolean): void;
}

export interface CoordinatorServer {
  reportBranch(epoch: number, report: BranchReport): Promise<JsonObject>;
  reportTurn(epoch: number, report: TurnReport): Promise<JsonObject>;
  /** The session view now, rendered for `epoch` (a read after a report, so sends use fresh facts). */
  window(epoch: number): Promise<SessionView | undefined>;
  /** `interaction.assistant` for an assistant-message step, with coordinator authority. */
  submitAssistant(epoch: number, runId: string, requestId: string, text: string, idempotencyKey: string): Promise<void>;
}

export interface TurnEnd {
  outcome: TurnOutcome;
  responseEntryId?: string;
  assistantText?: string;
}

interface LocalTurn {
  turnId: string;
  /** The message the turn serves, once known. */
  messageId?: string;
  /** `buffered`: not yet accepted; `active`: the server owns it under `reportedEpoch`. */
  phase: "buffered" | "active";
  reportedEpoch?: number;
  end?: TurnEnd;
}

export type CoordinatorLog = (level: "info" | "warning" | "error", message: string) => void;

export class WorkflowMessageCoordinator {
  private epoch?: number;
  /** The epoch whose branch report is done (undefined: report before anything else). */
  private reportedEpoch?: number;
  private view?: SessionView;
  /** Subscription views taken so far (a read started before the newest one is stale). */
  private viewsSeen = 0;
  private needBranchReport = false;
  /**
   * A report that had to prove absence (after a connection or a branch change) said
   * `isIdle: false`: report again once Pi is idle with nothing held locally, so a source
   * missing from the branch is still re-presented.
   */
  private absenceUnproven = false;
  /** Messages this process sent that the server has not yet shown as sent (ID → kind). */
  private readonly queued = new Map<string, ViewMessage>();
  /** The last message sent that starts a turn, until a turn takes it. */
  private lastTurnMessage?: string;
  private turn?: LocalTurn;
  private chain: Promise<void> = Promise.resolve();
  private pumping = false;
  private pumpAgain = false;
  private stopped = false;
  /** Tool calls waiting for an active epoch (at most the tool calls made during one reconnection). */
  private readonly epochWaiters = new Set<() => void>();

  constructor(
    private readonly pi: CoordinatorPi,
    private readonly server: CoordinatorServer,
    private readonly log: CoordinatorLog = () => {},
  ) {}

  /** A new connection claimed the session under `epoch`: everything must be reported again. */
  connected(epoch: number): void {
    this.epoch = epoch;
    this.reportedEpoch = undefined;
    this.view = undefined;
    this.kick();
  }

  /** The connection is gone: no sends or reports until the next epoch. */
  disconnected(): void {
    this.epoch = undefined;
    this.reportedEpoch = undefined;
    this.view = undefined;
  }

  /** The current epoch, while the coordinator holds one that the server showed active. */
  get activeEpoch(): number | undefined {
    return this.epoch !== undefined && this.view?.coordinator?.epoch === this.epoch && this.view.coordinator.active ? this.epoch : undefined;
  }

  /**
   * The active epoch, waiting up to `waitMs` while there is none: right after a reconnection
   * the claim is made but its first view has not arrived, and a model's submission in that
   * window would be refused (and its step reminded) although the session is coordinated again
   * a moment later. Each view arrival wakes the waiters to look again.
   */
  async activeEpochWithin(waitMs: number): Promise<number | undefined> {
    const deadline = Date.now() + waitMs;
    for (let left = waitMs; this.activeEpoch === undefined && !this.stopped && left > 0; left = deadline - Date.now()) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.epochWaiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.epochWaiters.add(wake);
      });
    }
    return this.activeEpoch;
  }

  /** A complete session view arrived (subscription event or read). */
  onView(view: SessionView): void {
    if (this.epoch === undefined || view.coordinator?.epoch !== this.epoch) return; // another epoch's view
    this.viewsSeen += 1;
    this.view = view;
    for (const wake of [...this.epochWaiters]) wake();
    this.prune(view);
    if (!view.coordinator.active) return; // fenced by another coordinator: send and report nothing
    this.kick();
  }

  /** Pi's active branch changed (`session_tree`, fork): report it again. */
  branchChanged(): void {
    this.needBranchReport = true;
    this.kick();
  }

  /** `agent_start`: a model run began. */
  agentStart(): void {
    if (this.turn && this.turn.end === undefined) return; // a retry or continuation of the same prompt
    this.turn = { turnId: newId("turn"), messageId: this.lastTurnMessage, phase: "buffered" };
    this.lastTurnMessage = undefined;
    this.kick();
  }

  /**
   * Why `toolName` may not run now: the current Pi turn serves a step whose contract restricts
   * tools (`allowedTools`). Counted from the send, before the server's receipt arrives, so a
   * fast tool call cannot slip through; an ordinary turn restricts nothing.
   */
  toolRefusal(toolName: string): string | undefined {
    const turn = this.turn;
    if (!turn || turn.end !== undefined || turn.messageId === undefined) return undefined;
    const message = this.view?.messages.find((m) => m.workflowMessageId === turn.messageId) ?? this.queued.get(turn.messageId);
    const content = message?.kind === "step" ? message.content : undefined;
    if (content === null || typeof content !== "object" || !Array.isArray((content as JsonObject).allowedTools)) return undefined;
    const allowed = ((content as JsonObject).allowedTools as unknown[]).filter((name): name is string => typeof name === "string");
    return toolRefusal(toolName, allowed);
  }

  /** `agent_settled`: the prompt cycle ended. */
  agentSettled(end: TurnEnd): void {
    if (this.turn && this.turn.end === undefined) this.turn.end = end;
    this.kick();
  }

  /** Look for work (polls, Pi events, views). Never more than one pump at a time. */
  kick(): void {
    if (this.stopped) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    // A macrotask later: never inside a Pi event handler (a turn requested inside
    // `agent_settled` is deferred by Pi, and `isIdle()` would still say true).
    setTimeout(() => {
      this.chain = this.chain
        .then(() => this.pump())
        .catch((error: unknown) => this.log("error", `workflow messages: ${(error as Error).message}`))
        .finally(() => {
          this.pumping = false;
          if (this.pumpAgain) {
            this.pumpAgain = false;
            this.kick();
          }
        });
    }, 0);
  }

  stop(): void {
    this.stopped = true;
    this.epoch = undefined;
    for (const wake of [...this.epochWaiters]) wake();
  }

  /** Resolves when the work queued so far is done (tests, shutdown). */
  async idle(): Promise<void> {
    for (let i = 0; i < 100 && (this.pumping || this.pumpAgain); i++) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      await this.chain;
    }
  }

  private async pump(): Promise<void> {
    for (let step = 0; step < PUMP_STEPS_MAX && !this.stopped; step++) {
      if (!(await this.stepOnce())) return;
    }
    this.pumpAgain = true; // more to do: continue in a later pump
  }

  /** One step of the algorithm; true when it made progress and another step may follow. */
  private async stepOnce(): Promise<boolean> {
    const epoch = this.epoch;
    const view = this.view;
    if (epoch === undefined || !view || view.coordinator?.epoch !== epoch || !view.coordinator.active) return false;
    const onBranch = findOnBranch(this.pi.branch());
    const unconfirmed = [...this.queued.keys()].some((id) => onBranch.has(id));
    if (this.reportedEpoch !== epoch || this.needBranchReport || unconfirmed || (this.absenceUnproven && this.pi.isIdle() && !this.pi.hasPendingMessages() && !this.holdsLocalState())) {
      return this.reportBranch(epoch, view, onBranch);
    }
    if (this.turn) {
      const progressed = await this.flushTurn(epoch, view);
      if (progressed || this.turn) return progressed;
    }
    return this.trySend(epoch, view, onBranch);
  }

  /** Whether Pi may hold work the server cannot see yet (a send not confirmed, a turn not reported). */
  private holdsLocalState(): boolean {
    return this.queued.size > 0 || this.turn !== undefined;
  }

  private async reportBranch(epoch: number, view: SessionView, onBranch: Map<string, string>): Promise<boolean> {
    const found = view.messages
      .filter((message) => onBranch.has(message.workflowMessageId))
      .map((message) => ({ workflowMessageId: message.workflowMessageId, piEntryId: onBranch.get(message.workflowMessageId) as string }));
    // The window names only the newest sent step of a pending request (or decision). A branch
    // that still shows an older message of the same source (back on the branch a step was
    // first presented on, after a re-presentation elsewhere) needs nothing new: report that
    // message too, or the server, seeing none of the source's messages, presents it again.
    // Same run and request means this session's message, which the server accepts as sent.
    const sources = new Set(view.messages.filter((m) => m.kind === "step" || m.kind === "decision").map((m) => `${m.runId}\u0000${requestIdOf(m) ?? ""}`));
    const named = new Set(found.map((f) => f.workflowMessageId));
    let older = 0;
    for (const entry of sourcesOnBranch(this.pi.branch())) {
      if (older >= OLDER_FOUND_MAX) break;
      if (named.has(entry.workflowMessageId) || !sources.has(`${entry.runId}\u0000${entry.requestId}`)) continue;
      named.add(entry.workflowMessageId);
      found.push({ workflowMessageId: entry.workflowMessageId, piEntryId: entry.piEntryId });
      older += 1;
    }
    const proving = this.reportedEpoch !== epoch || this.needBranchReport || this.absenceUnproven;
    const report: BranchReport = {
      isIdle: this.pi.isIdle() && !this.holdsLocalState(),
      hasPendingMessages: this.pi.hasPendingMessages(),
      found,
    };
    this.needBranchReport = false;
    try {
      await this.server.reportBranch(epoch, report);
    } catch (error) {
      return this.failed(epoch, "branch report", error, () => {
        this.needBranchReport = true;
      });
    }
    if (this.epoch !== epoch) return false;
    this.reportedEpoch = epoch;
    this.absenceUnproven = proving && !(report.isIdle && !report.hasPendingMessages);
    return this.refresh(epoch);
  }

  /** Read the view again after a report, so the next decision uses the facts it made. */
  private async refresh(epoch: number): Promise<boolean> {
    const seenBefore = this.viewsSeen;
    let fresh: SessionView | undefined;
    try {
      fresh = await this.server.window(epoch);
    } catch (error) {
      return this.failed(epoch, "session view read", error, () => {});
    }
    if (this.epoch !== epoch || !fresh) return false;
    // A subscription view that arrived while this read was on its way may be newer than it:
    // keep that one. (One that is older is followed by a newer one — the server's feed
    // publishes after every change — so keeping a stale read instead could stall delivery.)
    if (this.viewsSeen !== seenBefore) return true;
    if (fresh.coordinator?.epoch === epoch) {
      this.view = fresh;
      this.prune(fresh);
    }
    return true;
  }

  private async flushTurn(epoch: number, view: SessionView): Promise<boolean> {
    const turn = this.turn as LocalTurn;
    if (turn.phase === "buffered" || turn.reportedEpoch !== epoch) {
      const messageId = turn.messageId ?? this.openMessage(view, turn.turnId);
      if (messageId === undefined) {
        // Nothing open: an ordinary Pi turn, not workflow work.
        if (turn.end !== undefined) this.turn = undefined;
        else turn.phase = "buffered";
        return turn.end !== undefined;
      }
      turn.messageId = messageId;
      if (this.queued.has(messageId)) return false; // its entry is not confirmed yet: report the branch first
      let receipt: JsonObject;
      try {
        receipt = await this.server.reportTurn(epoch, { turnId: turn.turnId, phase: "start", workflowMessageId: messageId });
      } catch (error) {
        return this.failed(epoch, "turn start report", error, () => {
          if (this.turn === turn && isRefusal(error)) this.turn = undefined; // the server refused it for good
        });
      }
      if (this.turn !== turn) return true;
      if (receipt.ownership === "active") {
        turn.phase = "active";
        turn.reportedEpoch = epoch;
      } else {
        this.turn = undefined; // settled already, or not workflow work
      }
      return true;
    }
    if (turn.end === undefined) return false; // still running
    const end = turn.end;
    const message = view.messages.find((m) => m.workflowMessageId === turn.messageId);
    if (end.outcome === "completed" && message?.kind === "step" && stepForm(message.content) === "assistant" && end.assistantText) {
      const requestId = requestIdOf(message);
      if (requestId !== undefined) {
        try {
          await this.server.submitAssistant(epoch, message.runId, requestId, end.assistantText.slice(0, ASSISTANT_TEXT_CHARS_MAX), `assistant:${turn.turnId}`);
        } catch (error) {
          // A rejected reply leaves the step pending; the turn end below then asks for a reminder.
          this.log("warning", `the assistant reply was not accepted: ${(error as Error).message}`);
        }
      }
    }
    try {
      await this.server.reportTurn(epoch, {
        turnId: turn.turnId,
        phase: "end",
        outcome: end.outcome,
        ...(end.responseEntryId !== undefined ? { responseEntryId: end.responseEntryId } : {}),
      });
    } catch (error) {
      return this.failed(epoch, "turn end report", error, () => {
        if (this.turn === turn && isRefusal(error)) this.turn = undefined;
      });
    }
    if (this.turn === turn) this.turn = undefined;
    return this.refresh(epoch);
  }

  /** The message a turn that just started serves: the session's open message, if any. */
  private openMessage(view: SessionView, turnId: string): string | undefined {
    if (view.openTurn?.turnId === turnId && view.openTurn.workflowMessageId) return view.openTurn.workflowMessageId;
    let newest: ViewMessage | undefined;
    for (const message of view.messages) {
      if (message.status !== "sent" || !triggersTurn(message)) continue;
      if (!newest || message.order > newest.order) newest = message;
    }
    return newest?.workflowMessageId;
  }

  private trySend(epoch: number, view: SessionView, onBranch: Map<string, string>): boolean {
    const id = view.nextEligible;
    if (id === undefined || this.queued.has(id) || this.queued.size >= QUEUED_MAX) return false;
    const message = view.messages.find((m) => m.workflowMessageId === id);
    if (!message) return false; // outside the window: its content is not here yet
    if (!this.pi.isIdle() || this.pi.hasPendingMessages()) return false; // agent_settled or a poll will retry
    if (onBranch.has(id)) {
      // Already in the conversation (sent before a reload or a lost connection): report, never resend.
      this.needBranchReport = true;
      return true;
    }
    this.queued.set(id, message);
    const built = outgoing(message);
    // The final check and the send, with no await in between.
    if (!this.pi.isIdle() || this.pi.hasPendingMessages() || findOnBranch(this.pi.branch()).has(id) || this.epoch !== epoch || this.view !== view) {
      this.queued.delete(id);
      return false;
    }
    try {
      this.pi.send(built, triggersTurn(message));
    } catch (error) {
      this.queued.delete(id);
      this.log("error", `could not add a workflow message to the conversation: ${(error as Error).message}`);
      return false;
    }
    if (triggersTurn(message)) this.lastTurnMessage = id;
    // A message that starts no turn is appended at once: the next step reports it.
    return !triggersTurn(message);
  }

  /** Forget queued IDs the server has settled (sent, cancelled, or gone from a complete window). */
  private prune(view: SessionView): void {
    const byId = new Map(view.messages.map((m) => [m.workflowMessageId, m]));
    const newestOrder = view.messages.reduce((max, m) => Math.max(max, m.order), 0);
    for (const [id, queued] of this.queued) {
      const current = byId.get(id);
      if (current ? current.status !== "pending" : !view.truncated || queued.order <= newestOrder) this.queued.delete(id);
    }
  }

  /** A failed call: fenced or refused calls are final for this epoch; others retry on the next kick. */
  private failed(epoch: number, what: string, error: unknown, undo: () => void): false {
    undo();
    const code = (error as { code?: string }).code;
    if (code === "coordinatorFenced" && this.epoch === epoch) {
      this.log("warning", "another Pi process coordinates this session now; this one stops delivering workflow messages");
      if (this.view) this.view = { ...this.view, coordinator: { epoch, active: false }, nextEligible: undefined };
    } else if (this.epoch === epoch) {
      this.log("warning", `workflow ${what} failed (${code ?? "error"}): ${(error as Error).message}`);
    }
    return false;
  }
}

/** An answer the server gave (not a lost connection): repeating the same report cannot help. */
function isRefusal(error: unknown): boolean {
  const code = (error as { code?: string }).code;
  return code !== undefined && !["connectionLost", "unavailable", "timeout", "closed", "coordinatorFenced"].includes(code);
}

/** The end of a settled prompt cycle, from Pi's active branch (pi-api.md §7). */
export function turnEndFromBranch(branch: readonly PiSessionEntry[], aborted: boolean): TurnEnd {
  let last: PiSessionEntry | undefined;
  for (let i = branch.length - 1; i >= 0; i--) {
    const entry = branch[i];
    const message = entry.message as { role?: string } | undefined;
    if (entry.type === "message" && message?.role === "assistant") {
      last = entry;
      break;
    }
    // Stop at our own message: an assistant reply before it belongs to an earlier turn.
    if (entry.type === "custom_message" && typeof entry.customType === "string" && entry.customType.startsWith("pi-workflows-")) break;
  }
  const message = last?.message as { stopReason?: string; content?: unknown } | undefined;
  const outcome: TurnOutcome = aborted || message?.stopReason === "aborted" ? "aborted" : message?.stopReason === "error" ? "error" : "completed";
  const text = Array.isArray(message?.content)
    ? (message.content as { type?: string; text?: unknown }[])
        .filter((part) => part.type === "text" && typeof part.text === "string")
        .map((part) => part.text as string)
        .join("")
    : typeof message?.content === "string"
      ? message.content
      : undefined;
  return {
    outcome,
    ...(last ? { responseEntryId: last.id } : {}),
    ...(outcome === "completed" && text ? { assistantText: text } : {}),
  };
}
