// The bridge extension of a headless agent step: loaded into the step's `pi --mode rpc
// --no-session --no-extensions` child with an explicit `-e` (the only extension that runs there).
// It exposes to the model ONLY a `workflow` tool with the actions `update` and `submit`, under the
// interactive tool's exact request contract (src/extension/tool.ts: the same flat schema fields and
// the same validation), forwards each call to the runner over the step's private channel
// (./protocol.ts), and blocks calls of tools the step does not allow (`allowedTools`).
import * as net from "node:net";
import { TOOL_PARAMETERS, ToolInputError, validateToolParams } from "../../extension/tool.js";
import { toolRefusal } from "../allowed-tools.js";
import { isRecord, JsonlReader, type RpcLine } from "../rpc.js";
import {
  type AnswerFrame,
  BRIDGE_ACTIONS,
  BRIDGE_CALL_TIMEOUT_MS,
  BRIDGE_CONNECT_TIMEOUT_MS,
  BRIDGE_FRAME_BYTES_MAX,
  BRIDGE_PROTOCOL,
  BRIDGE_SOCKET_ENV,
  BRIDGE_TOKEN_ENV,
  type CallFrame,
  encodeFrame,
  type ReadyFrame,
} from "./protocol.js";

/** The part of Pi's extension API (1.6) the bridge uses, as structural types (see extension/pi-types.ts for why). */
interface BridgeToolResult {
  content: { type: "text"; text: string }[];
  details: unknown;
  isError?: boolean;
  terminate?: boolean;
}
interface BridgeToolCallEvent {
  toolName: string;
  toolCallId: string;
}
interface BridgePi {
  on(event: "session_start" | "session_shutdown", handler: () => void | Promise<void>): unknown;
  on(event: "tool_call", handler: (event: BridgeToolCallEvent) => Promise<{ block: true; reason: string } | undefined>): unknown;
  registerTool(tool: {
    name: string;
    label: string;
    description: string;
    promptSnippet?: string;
    parameters: object;
    executionMode?: "sequential" | "parallel";
    execute(toolCallId: string, params: unknown, signal: AbortSignal | undefined): Promise<BridgeToolResult>;
  }): void;
}

export const BRIDGE_TOOL_NAME = "workflow";

/** The interactive tool's flat schema, cut to the fields of `update` and `submit`. */
export const BRIDGE_TOOL_PARAMETERS = Object.freeze({
  type: "object",
  properties: {
    action: { type: "string", enum: [...BRIDGE_ACTIONS], description: "What to do." },
    requestId: TOOL_PARAMETERS.properties.requestId,
    output: TOOL_PARAMETERS.properties.output,
    update: TOOL_PARAMETERS.properties.update,
  },
  required: ["action"],
  additionalProperties: false,
});

export const BRIDGE_TOOL_DESCRIPTION = [
  "Finish the workflow step this headless session runs.",
  "The step message names a requestId and the expected output: do the work, then call this tool with action \"submit\", that requestId and the output.",
  "A rejected submission explains why; fix the output and submit again with the same requestId.",
  "After an accepted submission, end your turn.",
  "Progress: update {requestId, update:{type,key,data}}.",
].join(" ");

const text = (message: string, details: unknown, extra: Partial<BridgeToolResult> = {}): BridgeToolResult => ({
  content: [{ type: "text", text: message }],
  details,
  ...extra,
});

/** The interactive tool's validation, for the two actions this tool offers. */
export function validateBridgeParams(raw: unknown): Record<string, unknown> & { action: (typeof BRIDGE_ACTIONS)[number] } {
  const action = isRecord(raw) ? (raw as Record<string, unknown>).action : undefined;
  if (typeof action === "string" && !(BRIDGE_ACTIONS as readonly string[]).includes(action)) {
    throw new ToolInputError([`action must be one of: ${BRIDGE_ACTIONS.join(", ")} (a headless workflow step offers nothing else)`]);
  }
  return validateToolParams(raw) as Record<string, unknown> & { action: (typeof BRIDGE_ACTIONS)[number] };
}

/** One connection to the runner; calls go one at a time, in order. */
class BridgeClient {
  private connecting: Promise<ReadyFrame> | undefined;
  private socket: net.Socket | undefined;
  private seq = 0;
  private waiting: { seq: number; resolve(answer: AnswerFrame): void; reject(error: Error): void } | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly socketPath: string,
    private readonly token: string,
  ) {}

  /** Connect and say hello (once; again after the connection was lost). */
  ready(): Promise<ReadyFrame> {
    this.connecting ??= this.connect().catch((error: unknown) => {
      this.connecting = undefined;
      throw error;
    });
    return this.connecting;
  }

  call(frame: Omit<CallFrame, "type" | "seq">): Promise<AnswerFrame> {
    const run = this.chain.then(() => this.callNow(frame));
    this.chain = run.catch(() => undefined);
    return run;
  }

  close(): void {
    this.closed = true;
    this.socket?.destroy();
  }

  private async callNow(frame: Omit<CallFrame, "type" | "seq">): Promise<AnswerFrame> {
    await this.ready();
    const socket = this.socket;
    if (!socket || socket.destroyed) throw new Error("the connection to the workflow runner is closed");
    const seq = ++this.seq;
    return new Promise<AnswerFrame>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = undefined;
        reject(new Error(`the workflow runner did not answer within ${BRIDGE_CALL_TIMEOUT_MS} ms`));
        socket.destroy(); // a late answer must not answer the next call
      }, BRIDGE_CALL_TIMEOUT_MS);
      this.waiting = {
        seq,
        resolve: (answer) => {
          clearTimeout(timer);
          resolve(answer);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      socket.write(encodeFrame({ type: "call", seq, ...frame }));
    });
  }

  private connect(): Promise<ReadyFrame> {
    if (this.closed) return Promise.reject(new Error("the session is shutting down"));
    return new Promise<ReadyFrame>((resolve, reject) => {
      const socket = net.createConnection(this.socketPath);
      let ready = false;
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`the workflow runner did not answer within ${BRIDGE_CONNECT_TIMEOUT_MS} ms`));
      }, BRIDGE_CONNECT_TIMEOUT_MS);
      const lost = (why: string) => {
        clearTimeout(timer);
        if (this.socket === socket) this.socket = undefined;
        if (!ready) reject(new Error(why));
        else this.connecting = undefined; // the next call connects again
        const waiting = this.waiting;
        this.waiting = undefined;
        waiting?.reject(new Error(why));
      };
      const reader = new JsonlReader(BRIDGE_FRAME_BYTES_MAX, (line: RpcLine) => {
        const frame = line.kind === "json" && isRecord(line.value) ? (line.value as Record<string, unknown>) : undefined;
        if (!ready) {
          if (frame?.type === "ready" && typeof frame.requestId === "string") {
            ready = true;
            clearTimeout(timer);
            this.socket = socket;
            const allowed = Array.isArray(frame.allowedTools) ? frame.allowedTools.filter((t): t is string => typeof t === "string") : null;
            resolve({ type: "ready", requestId: frame.requestId, allowedTools: allowed });
          } else {
            socket.destroy();
            lost(`the workflow runner refused the bridge (${typeof frame?.message === "string" ? frame.message : "no ready"})`);
          }
          return;
        }
        const waiting = this.waiting;
        if (frame?.type === "answer" && waiting && frame.seq === waiting.seq && typeof frame.status === "string") {
          this.waiting = undefined;
          waiting.resolve(frame as unknown as AnswerFrame);
        }
      });
      socket.on("data", (chunk: Buffer) => reader.push(chunk));
      socket.on("error", (error) => lost(`the workflow channel failed (${error.message})`));
      socket.on("close", () => lost("the connection to the workflow runner closed"));
      socket.on("connect", () => socket.write(encodeFrame({ type: "hello", protocol: BRIDGE_PROTOCOL, token: this.token })));
    });
  }
}

export default function piWorkflowsBridge(pi: BridgePi): void {
  const socketPath = process.env[BRIDGE_SOCKET_ENV];
  const token = process.env[BRIDGE_TOKEN_ENV];
  // The agent's shell commands inherit Pi's environment: they get neither.
  delete process.env[BRIDGE_SOCKET_ENV];
  delete process.env[BRIDGE_TOKEN_ENV];
  const client = socketPath && token ? new BridgeClient(socketPath, token) : undefined;
  const unavailable = "the workflow channel of this headless step is unavailable";

  pi.on("session_start", () => {
    client?.ready().catch(() => undefined); // connect early; a failure shows at the first call
  });
  pi.on("session_shutdown", () => client?.close());

  pi.on("tool_call", async (event) => {
    if (event.toolName === BRIDGE_TOOL_NAME) return undefined;
    let ready: ReadyFrame;
    try {
      if (!client) throw new Error(unavailable);
      ready = await client.ready();
    } catch {
      return { block: true, reason: `pi-workflows: ${unavailable}, so no tool may run.` };
    }
    const reason = toolRefusal(event.toolName, ready.allowedTools);
    return reason === undefined ? undefined : { block: true, reason };
  });

  pi.registerTool({
    name: BRIDGE_TOOL_NAME,
    label: "Workflow",
    description: BRIDGE_TOOL_DESCRIPTION,
    promptSnippet: "Submit the output of the workflow step this session runs (action submit), or report its progress (action update).",
    parameters: BRIDGE_TOOL_PARAMETERS,
    executionMode: "sequential",
    async execute(_toolCallId, raw) {
      let params;
      try {
        params = validateBridgeParams(raw);
      } catch (error) {
        return text(error instanceof ToolInputError ? error.message : String(error), { refused: true }, { isError: true });
      }
      const action = params.action;
      const requestId = String(params.requestId);
      let answer: AnswerFrame;
      try {
        if (!client) throw new Error(unavailable);
        answer = await client.call(
          action === "submit" ? { action, requestId, output: params.output } : { action, requestId, update: params.update as CallFrame["update"] },
        );
      } catch (error) {
        return text(`${action} failed (unavailable): ${(error as Error).message}`, { action, code: "unavailable" }, { isError: true });
      }
      switch (answer.status) {
        case "accepted":
          // The step is settled: stop after this tool batch instead of asking the model again.
          return text("Accepted: the step is complete. End your turn now.", { action, accepted: true }, { terminate: true });
        case "rejected":
          return text(
            `Rejected: ${answer.message ?? "the output does not meet the step's checks"}\nFix the output and call the workflow tool again with action submit and requestId ${requestId}.`,
            { action, accepted: false, code: "submissionRejected" },
            { isError: true },
          );
        case "recorded":
          return text("update recorded", { action });
        default:
          return text(`${action} failed (refused): ${answer.message ?? "refused"}`, { action, code: "refused" }, { isError: true });
      }
    },
  });
}
