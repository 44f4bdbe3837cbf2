// Runner messages: fenced, one in flight at a time, stable message IDs `<runnerEpoch>:<seq>`.
import { HostRejectedError } from "../engine/host.js";
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
}

export interface RunnerResponse {
  messageId: string;
  outcome: "accepted" | "adopted" | "rejected" | "claimLost";
  revision?: number;
  result?: unknown;
  error?: { code: string; message: string };
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

export class RunnerSession {
  private sequence = 0;

  /** Whether any message was sent (before `runner.ready`, a goodbye would only be refused). */
  get hasSent(): boolean {
    return this.sequence > 0;
  }
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly channel: FrameChannel,
    readonly launch: Launch,
    /** Called on `claimLost`: the runner must stop at once (never returns). */
    private readonly onClaimLost: () => never = () => process.exit(EXIT_CLAIM_LOST),
  ) {}

  /** Send one message and wait for its response; a rejection throws HostRejectedError. */
  send(kind: string, payload: Record<string, unknown>, attemptId?: string): Promise<RunnerResponse> {
    const turn = this.queue.then(() => this.exchange(kind, payload, attemptId));
    this.queue = turn.catch(() => undefined);
    return turn;
  }

  private async exchange(kind: string, payload: Record<string, unknown>, attemptId?: string): Promise<RunnerResponse> {
    const { runId, generation, runnerEpoch } = this.launch;
    const messageId = `${runnerEpoch}:${++this.sequence}`;
    await this.channel.writeFrame({
      schema: MESSAGE_SCHEMA,
      launchSchema: LAUNCH_SCHEMA,
      messageId,
      kind,
      runId,
      generation,
      runnerEpoch,
      ...(attemptId !== undefined ? { attemptId } : {}),
      payload,
    });
    const response = (await this.channel.readFrame()) as unknown as RunnerResponse;
    if (response.outcome === "claimLost") this.onClaimLost();
    if (response.messageId !== messageId) {
      throw new ProtocolError(`response for ${String(response.messageId)} while waiting for ${messageId}`);
    }
    if (response.outcome === "rejected") {
      throw new HostRejectedError(kind, response.error?.code ?? "rejected", response.error?.message ?? "no detail");
    }
    if (response.outcome !== "accepted" && response.outcome !== "adopted") {
      throw new ProtocolError(`unknown response outcome ${JSON.stringify(response.outcome)}`);
    }
    return response;
  }

  /** The one command frame that follows the `runner.ready` response. */
  async readCommand(): Promise<Record<string, unknown>> {
    const frame = await this.channel.readFrame();
    if (frame.schema !== COMMAND_SCHEMA) throw new ProtocolError(`expected a ${COMMAND_SCHEMA} frame`);
    return frame;
  }
}
