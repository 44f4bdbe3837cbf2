// The runner's end of the headless agent bridge (./protocol.ts): a Unix socket in a fresh 0700
// temp dir, listening for the one bridge extension of one Pi child. It answers `hello` with the
// step's request ID and tool policy, forwards each submission to the node's own checks (the same
// judge an interactive candidate gets) and each update to the runner, and remembers the accepted
// value until the turn settles.
import { randomBytes, timingSafeEqual } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { canonicalJson } from "../../canonical.js";
import { isRecord, JsonlReader, type RpcLine } from "../rpc.js";
import {
  BRIDGE_ACTIONS,
  BRIDGE_FRAME_BYTES_MAX,
  BRIDGE_PROTOCOL,
  BRIDGE_SOCKET_ENV,
  BRIDGE_TOKEN_ENV,
  type AnswerFrame,
  type BridgeFrame,
  type CallFrame,
  encodeFrame,
} from "./protocol.js";

/** Calls (submissions and updates) one step takes, at most; later ones are refused. */
export const BRIDGE_CALLS_MAX = 256;
/** Updates one step may send per second, sustained, and in a burst (the server's `interaction.update` limits). */
export const BRIDGE_UPDATES_PER_SECOND = 20;
export const BRIDGE_UPDATES_BURST = 100;
/** Connections that have not said a valid `hello` yet, at most at once. */
const PENDING_CONNECTIONS_MAX = 4;
/** How long a new connection may take to say `hello`. */
const HELLO_TIMEOUT_MS = 10_000;
/** Random bytes of the per-step token. */
const TOKEN_BYTES = 32;
/** A message quoted back in a refusal, at most (characters). */
const QUOTE_CHARS_MAX = 80;
/** Unix socket paths longer than this fail on some systems (sun_path is 104 or 108 bytes). */
const SOCKET_PATH_BYTES_MAX = 100;
const SOCKET_NAME = "bridge.sock";

/** What the node's own checks said about one submitted value. */
export type SubmissionVerdict = { accepted: true; output: unknown } | { accepted: false; message: string };

/** One `update` action's payload (checked against the tool contract by the extension, again here). */
export interface AgentUpdate {
  type: string;
  key: string;
  data: unknown;
}

export interface BridgeHandlers {
  requestId: string;
  /** Tools besides `workflow` the step allows (undefined: all). */
  allowedTools?: readonly string[];
  /** Judge one submitted value with the node's checks: the shaped output, or an actionable message. */
  check(output: unknown): Promise<SubmissionVerdict>;
  /** Record one progress update (absent: updates are taken and dropped). */
  update?(update: AgentUpdate): Promise<void>;
}

const clip = (text: string) => (text.length > QUOTE_CHARS_MAX ? `${text.slice(0, QUOTE_CHARS_MAX)}…` : text);

function sameToken(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

function canonicalOrUndefined(value: unknown): string | undefined {
  try {
    return canonicalJson(value);
  } catch {
    return undefined;
  }
}

export class BridgeServer {
  /** The accepted submission's output (shaped by the node's checks), once there is one. */
  accepted: { output: unknown } | undefined;
  /** The last rejection's message, for the error of a step that never got an accepted value. */
  lastRejection: string | undefined;
  submissions = 0;
  updates = 0;
  /** Whether the extension ever said a valid `hello` (false: it did not load or could not connect). */
  connected = false;
  private calls = 0;
  private acceptedPayload: string | undefined;
  private busy = false;
  private bound: net.Socket | undefined;
  private pending = 0;
  private tokens = BRIDGE_UPDATES_BURST;
  private tokensAt = Date.now();
  private closed = false;

  private constructor(
    private readonly handlers: BridgeHandlers,
    private readonly dir: string,
    readonly socketPath: string,
    private readonly token: string,
    private readonly server: net.Server,
  ) {}

  /** Listen on a new socket in a new 0700 temp dir. */
  static async open(handlers: BridgeHandlers): Promise<BridgeServer> {
    let base = os.tmpdir();
    if (Buffer.byteLength(path.join(base, "piw-bridge-XXXXXX", SOCKET_NAME)) > SOCKET_PATH_BYTES_MAX) base = "/tmp";
    const dir = fs.mkdtempSync(path.join(base, "piw-bridge-")); // mode 0700
    fs.chmodSync(dir, 0o700);
    const socketPath = path.join(dir, SOCKET_NAME);
    const server = net.createServer();
    const bridge = new BridgeServer(handlers, dir, socketPath, randomBytes(TOKEN_BYTES).toString("hex"), server);
    server.on("connection", (socket) => bridge.accept(socket));
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(socketPath, () => {
          server.off("error", reject);
          resolve();
        });
      });
      fs.chmodSync(socketPath, 0o600);
    } catch (error) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    server.on("error", () => {});
    return bridge;
  }

  /** The variables that tell the Pi child's bridge extension where to connect. */
  env(): Record<string, string> {
    return { [BRIDGE_SOCKET_ENV]: this.socketPath, [BRIDGE_TOKEN_ENV]: this.token };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.bound?.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  private accept(socket: net.Socket): void {
    if (this.closed || this.pending >= PENDING_CONNECTIONS_MAX) {
      socket.destroy();
      return;
    }
    this.pending++;
    let counted = true;
    const unpend = () => {
      if (counted) {
        counted = false;
        this.pending--;
      }
    };
    socket.on("error", () => {});
    const helloTimer = setTimeout(() => socket.destroy(), HELLO_TIMEOUT_MS);
    let isBound = false;
    const write = (frame: BridgeFrame) => {
      if (!socket.destroyed) socket.write(encodeFrame(frame));
    };
    const reader = new JsonlReader(BRIDGE_FRAME_BYTES_MAX, (line: RpcLine) => {
      const frame = line.kind === "json" && isRecord(line.value) ? (line.value as Record<string, unknown>) : undefined;
      if (!isBound) {
        clearTimeout(helloTimer);
        unpend();
        const ok = frame?.type === "hello" && frame.protocol === BRIDGE_PROTOCOL && typeof frame.token === "string" && sameToken(frame.token, this.token);
        if (!ok || this.bound) {
          write({ type: "refused", message: ok ? "another bridge is connected" : "bad hello" });
          socket.end();
          return;
        }
        isBound = true;
        this.bound = socket;
        this.connected = true;
        write({ type: "ready", requestId: this.handlers.requestId, allowedTools: this.handlers.allowedTools ? [...this.handlers.allowedTools] : null });
        return;
      }
      if (!frame || frame.type !== "call") {
        // A broken bridge (oversized or malformed frame): it cannot tell which call failed.
        socket.destroy();
        return;
      }
      void this.onCall(frame).then(write);
    });
    socket.on("data", (chunk: Buffer) => reader.push(chunk));
    socket.on("close", () => {
      clearTimeout(helloTimer);
      unpend();
      if (this.bound === socket) this.bound = undefined; // the extension may connect again
    });
  }

  private async onCall(frame: Record<string, unknown>): Promise<AnswerFrame> {
    const seq = typeof frame.seq === "number" && Number.isSafeInteger(frame.seq) ? frame.seq : -1;
    const refuse = (message: string): AnswerFrame => ({ type: "answer", seq, status: "refused", message });
    if (this.busy) return refuse("one workflow call at a time: wait for the answer to the previous one");
    this.busy = true;
    try {
      return { ...(await this.handle(frame as Partial<CallFrame>, refuse)), seq };
    } catch (error) {
      return refuse(`the runner could not take the call: ${clip((error as Error)?.message ?? String(error))}`);
    } finally {
      this.busy = false;
    }
  }

  private async handle(call: Partial<CallFrame>, refuse: (message: string) => AnswerFrame): Promise<AnswerFrame> {
    const seq = -1; // replaced by the caller
    if (++this.calls > BRIDGE_CALLS_MAX) return refuse(`this step took its ${BRIDGE_CALLS_MAX} workflow calls; no more are accepted`);
    if (typeof call.action !== "string" || !(BRIDGE_ACTIONS as readonly string[]).includes(call.action)) {
      return refuse(`action must be one of: ${BRIDGE_ACTIONS.join(", ")}`);
    }
    const expected = this.handlers.requestId;
    if (call.requestId !== expected) {
      return refuse(`requestId ${JSON.stringify(clip(String(call.requestId)))} is not this step's request; use "${expected}"`);
    }
    if (call.action === "submit") {
      const payload = canonicalOrUndefined(call.output);
      if (payload === undefined) return refuse("output must be a JSON value");
      if (this.accepted) {
        if (payload === this.acceptedPayload) return { type: "answer", seq, status: "accepted", message: "already accepted" };
        return refuse("this step already accepted an output; end your turn now");
      }
      this.submissions++;
      const verdict = await this.handlers.check(JSON.parse(payload) as unknown);
      if (verdict.accepted) {
        this.accepted = { output: verdict.output };
        this.acceptedPayload = payload;
        return { type: "answer", seq, status: "accepted" };
      }
      this.lastRejection = verdict.message;
      return { type: "answer", seq, status: "rejected", message: verdict.message };
    }
    if (this.accepted) return refuse("the step is complete; it takes no more updates");
    const update = call.update;
    if (!isRecord(update) || typeof update.type !== "string" || typeof update.key !== "string" || update.data === undefined) {
      return refuse("update must be an object {type, key, data}");
    }
    if (!this.takeUpdateToken()) return refuse(`updates are limited to ${BRIDGE_UPDATES_PER_SECOND} a second; send fewer`);
    this.updates++;
    await this.handlers.update?.({ type: update.type, key: update.key, data: update.data });
    return { type: "answer", seq, status: "recorded" };
  }

  private takeUpdateToken(): boolean {
    const now = Date.now();
    this.tokens = Math.min(BRIDGE_UPDATES_BURST, this.tokens + ((now - this.tokensAt) / 1000) * BRIDGE_UPDATES_PER_SECOND);
    this.tokensAt = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
