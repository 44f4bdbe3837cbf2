// Runner messages: fenced, one in flight at a time, stable message IDs `<runnerEpoch>:<seq>`.
import { HostRejectedError, type NodeStart } from "../engine/host.js";
import type { NodeError } from "../types.js";
import { type FrameChannel, ProtocolError } from "./channel.js";

export const LAUNCH_SCHEMA = "pi-workflows.worker-launch.v1";
export const COMMAND_SCHEMA = "pi-workflows.runner-command.v1";
export const MESSAGE_SCHEMA = "pi-workflows.runner-message.v1";
export const RESPONSE_SCHEMA = "pi-workflows.runner-response.v1";
export const EXIT_CLAIM_LOST = 75;

export interface Launch {
  schema: string;
  runId: string;
  generation: number;
  runnerEpoch: string;
  projectPath: string;
  workflowSource: unknown;
  definitionDigest: string;
  inputHash: string;
  protocolVersion: number;
  /** How long the workflow's load may take after `runner.ready` (the server's ready deadline). */
  loadDeadlineMs?: number;
}

export interface RunnerResponse {
  messageId: string;
  outcome: "accepted" | "adopted" | "rejected" | "claimLost";
  revision?: number;
  result?: unknown;
  error?: { code: string; message: string };
  /** A newer settings version than a start message named (see docs/RUNNER-PROTOCOL.md). */
  settings?: unknown;
}

export function parseLaunch(frame: Record<string, unknown>): Launch {
  const launch = frame as unknown as Launch;
  if (launch.schema !== LAUNCH_SCHEMA) throw new ProtocolError(`expected a ${LAUNCH_SCHEMA} envelope`);
  if (launch.protocolVersion !== 1) throw new ProtocolError(`unsupported runner protocol version ${String(launch.protocolVersion)}`);
  if (typeof launch.runId !== "string" || typeof launch.runnerEpoch !== "string" || !Number.isInteger(launch.generation)) {
    throw new ProtocolError("the launch envelope lacks runId, generation or runnerEpoch");
  }
  if (typeof launch.projectPath !== "string") throw new ProtocolError("the launch envelope lacks projectPath");
  return launch;
}

/** Pure-node results a runner sends ahead of their answers (the server commits them together). */
export const PIPELINE_WINDOW = 16;

/** A proposal sent ahead was refused: the runner cannot tell what followed it, so it stops. */
export class PipelineError extends Error {}

/**
 * One pure compute node's start fields and outcome, as a `nodes.finished` message carries it
 * (the node was never started: it is recorded already settled).
 */
export type PureResult = NodeStart & { attemptId: string } & (
    | { outcome: "completed"; value: unknown }
    | { outcome: "failed"; value: NodeError }
  );

/** Pure results gathered into one `nodes.finished` message, at most (the server's bound too). */
export const PURE_RESULTS_MAX = 32;
/**
 * Bytes of values and start fields gathered into one message, at most: half a frame, so one
 * more result of the largest size (a 256 KiB value) still fits under the 1 MiB frame limit.
 */
export const PURE_RESULTS_BYTES_MAX = 512 * 1024;
/** Room for one result's keys, numbers and punctuation besides its IDs and value. */
const PURE_RESULT_KEYS_BYTES = 256;

interface Waiter {
  messageId: string;
  kind: string;
  /** What the message expected; a refused message changed nothing, so it still holds. */
  expectedRevision?: number;
  resolve(response: RunnerResponse): void;
  reject(error: Error): void;
}

export class RunnerSession {
  private sequence = 0;
  /** Messages written whose answers have not been read yet, in order. */
  private readonly waiters: Waiter[] = [];
  private pumping = false;
  /** Answers of messages sent ahead, oldest first. */
  private readonly ahead: Promise<RunnerResponse>[] = [];
  /** Pure results of this event-loop tick not posted yet, and their size (sendPureResult). */
  private pending?: { results: PureResult[]; bytes: number };
  /**
   * The run revision the next state-changing message expects (fencing: a change made by
   * anyone else in between makes the server refuse it). Known from the `runner.ready`
   * answer on; each accepted change advances it by one, and every answer resynchronizes it.
   */
  private expectedRevision?: number;

  /** Told of every newer settings version an answer carries. */
  onSettings?: (settings: unknown) => void;

  /** Whether any message was sent (before `runner.ready`, a goodbye would only be refused). */
  get hasSent(): boolean {
    return this.sequence > 0;
  }

  constructor(
    private readonly channel: FrameChannel,
    readonly launch: Launch,
    /** Called on `claimLost`: the runner must stop at once (never returns). */
    private readonly onClaimLost: () => never = () => process.exit(EXIT_CLAIM_LOST),
  ) {}

  /**
   * Send one message and wait for its response (after every message sent ahead was
   * answered); a rejection throws HostRejectedError.
   */
  async send(kind: string, payload: Record<string, unknown>, attemptId?: string): Promise<RunnerResponse> {
    await this.flush();
    return this.post(kind, payload, attemptId);
  }

  /**
   * Send a proposal nothing next depends on (a pure node's result, progress) without waiting
   * for its answer, up to PIPELINE_WINDOW in flight. A refusal surfaces as PipelineError at
   * the next send or flush.
   */
  async sendAhead(kind: string, payload: Record<string, unknown>, attemptId?: string): Promise<void> {
    this.postPending();
    while (this.ahead.length >= PIPELINE_WINDOW) await this.settleOldest();
    this.pushAhead(this.post(kind, payload, attemptId));
  }

  /**
   * Send a pure node's result ahead (like sendAhead), gathered with the others of this
   * event-loop tick into one `nodes.finished` message: a run of trivial steps costs one
   * frame, one receipt and one protected write instead of one per step. `valueBytes` is the
   * size of the output's or error's canonical JSON (it keeps the frame under its limit).
   */
  async sendPureResult(result: PureResult, valueBytes: number): Promise<void> {
    const bytes = valueBytes + startFieldBytes(result);
    for (;;) {
      const pending = this.pending;
      if (pending && (pending.results.length >= PURE_RESULTS_MAX || pending.bytes + bytes > PURE_RESULTS_BYTES_MAX)) {
        this.postPending();
      }
      if (this.pending || this.ahead.length < PIPELINE_WINDOW) break;
      await this.settleOldest();
    }
    if (!this.pending) {
      this.pending = { results: [], bytes: 0 };
      // After the tick's other results (the engine's steps run on microtasks before it).
      process.nextTick(() => this.postPending());
    }
    this.pending.results.push(result);
    this.pending.bytes += bytes;
  }

  /** Wait until every message sent ahead was answered. */
  async flush(): Promise<void> {
    this.postPending();
    while (this.ahead.length > 0) await this.settleOldest();
  }

  /** Post the gathered pure results as one message sent ahead (a no-op when none wait). */
  private postPending(): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    this.pushAhead(this.postNow("nodes.finished", { results: pending.results }, undefined, pending.results.length));
  }

  private pushAhead(answer: Promise<RunnerResponse>): void {
    answer.catch(() => undefined); // observed by settleOldest
    this.ahead.push(answer);
  }

  private async settleOldest(): Promise<void> {
    try {
      await this.ahead.shift();
    } catch (error) {
      throw new PipelineError(`a result sent ahead was refused: ${(error as Error).message}`);
    }
  }

  /** Post one message, after any gathered pure results (messages leave in call order). */
  private post(kind: string, payload: Record<string, unknown>, attemptId?: string): Promise<RunnerResponse> {
    this.postPending();
    return this.postNow(kind, payload, attemptId, 1);
  }

  /** Write one message; `changes` is how many revisions it advances the run by when accepted. */
  private postNow(kind: string, payload: Record<string, unknown>, attemptId: string | undefined, changes: number): Promise<RunnerResponse> {
    const { runId, generation, runnerEpoch } = this.launch;
    const messageId = `${runnerEpoch}:${++this.sequence}`;
    const expectedRevision = CHANGES_NO_REVISION.has(kind) ? undefined : this.expectedRevision;
    if (expectedRevision !== undefined) this.expectedRevision = expectedRevision + changes;
    const answer = new Promise<RunnerResponse>((resolve, reject) =>
      this.waiters.push({ messageId, kind, expectedRevision, resolve, reject }),
    );
    // Writes go out in call order; answers come back in the same order.
    this.channel
      .writeFrame({
        schema: MESSAGE_SCHEMA,
        launchSchema: LAUNCH_SCHEMA,
        messageId,
        kind,
        runId,
        generation,
        runnerEpoch,
        ...(attemptId !== undefined ? { attemptId } : {}),
        ...(expectedRevision !== undefined ? { expectedRevision } : {}),
        payload,
      })
      .catch((error: Error) => this.failAll(error));
    void this.pump();
    return answer;
  }

  /** Read answers while any are awaited, matching each to the oldest waiter. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.waiters.length > 0) {
        const response = (await this.channel.readFrame()) as unknown as RunnerResponse;
        const waiter = this.waiters.shift()!;
        if (response.outcome === "claimLost") this.onClaimLost();
        let checked: RunnerResponse;
        try {
          checked = checkResponse(waiter, response);
        } catch (error) {
          // A refusal answers its own message only; a protocol error ends the channel.
          if (!(error instanceof HostRejectedError)) throw error;
          if (waiter.expectedRevision !== undefined && this.waiters.length === 0) this.expectedRevision = waiter.expectedRevision;
          waiter.reject(error);
          continue;
        }
        // The server's revision after this answer; later answers of pipelined messages
        // arrive in order, so the newest one wins once nothing is in flight.
        if (typeof checked.revision === "number" && this.waiters.length === 0) this.expectedRevision = checked.revision;
        if (checked.settings !== undefined) this.onSettings?.(checked.settings);
        waiter.resolve(checked);
      }
    } catch (error) {
      this.failAll(error as Error);
    } finally {
      this.pumping = false;
    }
  }

  private failAll(error: Error): void {
    for (const waiter of this.waiters.splice(0)) waiter.reject(error);
  }

  /** The one command frame that follows the `runner.ready` response. */
  async readCommand(): Promise<Record<string, unknown>> {
    const frame = await this.channel.readFrame();
    if (frame.schema !== COMMAND_SCHEMA) throw new ProtocolError(`expected a ${COMMAND_SCHEMA} frame`);
    return frame;
  }
}

/** Room a result's start fields take in a `nodes.finished` frame (its IDs as JSON strings). */
function startFieldBytes(result: PureResult): number {
  const ids = JSON.stringify([result.attemptId, result.nodeId, result.nodePath, result.nodeType]);
  return Buffer.byteLength(ids, "utf8") + PURE_RESULT_KEYS_BYTES;
}

/** Messages that never change the run's revision (reads, process registry, goodbye). */
const CHANGES_NO_REVISION = new Set(["runner.ready", "runner.progress", "runner.exiting", "content.read"]);

/** Check one answer against the message it must answer; rejections become HostRejectedError. */
function checkResponse(waiter: Waiter, response: RunnerResponse): RunnerResponse {
  if (response.messageId !== waiter.messageId) {
    throw new ProtocolError(`response for ${String(response.messageId)} while waiting for ${waiter.messageId}`);
  }
  if (response.outcome === "rejected") {
    throw new HostRejectedError(waiter.kind, response.error?.code ?? "rejected", response.error?.message ?? "no detail");
  }
  if (response.outcome !== "accepted" && response.outcome !== "adopted") {
    throw new ProtocolError(`unknown response outcome ${JSON.stringify(response.outcome)}`);
  }
  return response;
}
