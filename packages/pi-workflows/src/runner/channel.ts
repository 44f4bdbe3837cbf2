// Line framing on the runner socket: one canonical JSON object per line, at most 1 MiB.
import net from "node:net";
import type { Duplex } from "node:stream";
import { canonicalJson } from "../canonical.js";

export const FRAME_BYTES_MAX = 1024 * 1024;
/** A liveness ping of the server; canonical JSON puts its `ping` key first. */
export const PING_SCHEMA = "pi-workflows.runner-ping.v1";
export const PONG_SCHEMA = "pi-workflows.runner-pong.v1";
const PING_PREFIX = '{"ping":';
/** The longest `end` waits for written frames to leave before it closes anyway. */
const END_WAIT_MS_MAX = 2_000;

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

export class FrameChannel {
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  private readonly frames: string[] = [];
  private waiter?: { resolve(line: string): void; reject(error: Error): void };
  private failure?: Error;
  /** Whether writes of this tick are being gathered (see writeFrame). */
  private corked = false;

  /** Over the inherited socket, or any byte stream (the warm-up's in-memory pair). */
  constructor(private readonly socket: Duplex) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.fail(new ProtocolError("the server closed the runner channel")));
    socket.on("error", (error) => this.fail(error));
  }

  /** The inherited runner socket (fd 3). */
  static fromFd(fd = 3): FrameChannel {
    return new FrameChannel(new net.Socket({ fd, readable: true, writable: true }));
  }

  private onData(chunk: Buffer) {
    let start = 0;
    for (let index = chunk.indexOf(10); index >= 0; index = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, index);
      const line = Buffer.concat([...this.buffered, piece]);
      this.buffered = [];
      this.bufferedBytes = 0;
      start = index + 1;
      if (line.length + 1 > FRAME_BYTES_MAX) return this.fail(new ProtocolError("the server sent a frame above 1 MiB"));
      this.push(line.toString("utf8"));
    }
    const rest = chunk.subarray(start);
    if (rest.length > 0) {
      this.buffered.push(rest);
      this.bufferedBytes += rest.length;
      if (this.bufferedBytes >= FRAME_BYTES_MAX) this.fail(new ProtocolError("the server sent a frame above 1 MiB"));
    }
  }

  private push(line: string) {
    // A ping is answered from the event loop at once, never queued for a reader: a runner
    // whose loop is blocked (a busy computation, a stopped process) does not answer.
    if (line.startsWith(PING_PREFIX)) return this.answerPing(line);
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = undefined;
      resolve(line);
    } else {
      this.frames.push(line);
    }
  }

  private answerPing(line: string) {
    let ping: unknown;
    try {
      ping = JSON.parse(line);
    } catch {
      return this.fail(new ProtocolError("the server sent a ping that is not JSON"));
    }
    const record = ping as { ping?: unknown; schema?: unknown };
    if (record.schema !== PING_SCHEMA || !Number.isSafeInteger(record.ping)) {
      return this.fail(new ProtocolError("the server sent a malformed ping"));
    }
    this.writeFrame({ pong: record.ping, schema: PONG_SCHEMA }).catch((error: Error) => this.fail(error));
  }

  private fail(error: Error) {
    this.failure ??= error;
    if (this.waiter) {
      const { reject } = this.waiter;
      this.waiter = undefined;
      reject(this.failure);
    }
  }

  private nextLine(): Promise<string> {
    const line = this.frames.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.failure) return Promise.reject(this.failure);
    return new Promise<string>((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  async readFrame(): Promise<Record<string, unknown>> {
    const line = await this.nextLine();
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw new ProtocolError("the server sent a frame that is not JSON");
    }
    if (!value || typeof value !== "object" || Array.isArray(value)) throw new ProtocolError("the server sent a frame that is not an object");
    return value as Record<string, unknown>;
  }

  /**
   * Write one frame; a frame above the limit is refused here, never sent. Frames written in
   * the same tick leave in one `writev` (the socket is corked until the next tick), so the
   * server reads a pipelined burst at once and commits it together. The promise waits only
   * when the socket's buffer is full; a write error fails the channel (every reader sees it).
   */
  async writeFrame(value: unknown): Promise<void> {
    const line = canonicalJson(value) + "\n";
    const size = Buffer.byteLength(line, "utf8");
    if (size > FRAME_BYTES_MAX) throw new ProtocolError(`a runner frame of ${size} bytes is above the 1 MiB limit`);
    if (this.failure) throw this.failure;
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    if (this.socket.write(line)) return;
    await new Promise<void>((resolve, reject) => {
      const onDrain = () => {
        this.socket.off("close", onClose);
        resolve();
      };
      const onClose = () => {
        this.socket.off("drain", onDrain);
        reject(this.failure ?? new ProtocolError("the runner channel closed"));
      };
      this.socket.once("drain", onDrain);
      this.socket.once("close", onClose);
    });
  }

  close() {
    this.socket.destroy();
  }

  /**
   * Close once every frame written so far has left, for a process about to exit: `close`
   * would drop frames still corked or buffered (an exit right after a write loses it). A peer
   * that stopped reading holds this for at most `waitMs`.
   */
  async end(waitMs = END_WAIT_MS_MAX): Promise<void> {
    if (this.corked) {
      this.corked = false;
      this.socket.uncork();
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, waitMs);
      this.socket.end(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    this.socket.destroy();
  }
}
