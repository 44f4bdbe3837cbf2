// WorkflowClient: one connection to the pi-workflows server's user-only Unix socket, speaking
// client.v1 (canonical JSON lines). Requests are answered in order; subscription events are
// delivered to their subscription's handler. Views are materialized from a snapshot plus merge
// patches, and referenced content is read in chunks and verified before it is returned.
import { createHash, randomBytes } from "node:crypto";
import net from "node:net";
import { applyMergePatch } from "./patch.js";
import {
  CLIENT_SCHEMA_V1,
  type ClientMessage,
  decodeMessage,
  type Event,
  encodeMessage,
  FRAME_BYTES_MAX,
  type Hello,
  type JsonObject,
  type Operation,
  type Response,
} from "./protocol.js";

/** How long a request waits for its response by default. */
export const RESPONSE_TIMEOUT_MS = 30_000;

/**
 * Longer waits for operations the server may legitimately work on longer: resolving a
 * workflow (≤ 60 s), a submission's verdict (≤ 120 s), state maintenance on a large database.
 */
const RESPONSE_TIMEOUTS_MS: Partial<Record<Operation, number>> = {
  "run.start": 90_000,
  "interaction.submit": 150_000,
  "decision.answer": 150_000,
  "state.backup": 30 * 60_000,
  "state.prune": 30 * 60_000,
  "state.verify": 30 * 60_000,
};
/** Largest chunk `readContent` asks for (the server's limit). */
export const CONTENT_CHUNK_BYTES_MAX = 512 * 1024;

const READ_ONLY = new Set<Operation>([
  "run.status",
  "run.list",
  "channel.status",
  "resourceManager.list",
  "resourceManager.get",
  "server.status",
  "view.runs.watch",
  "view.runs.page",
  "view.run.get",
  "view.run.watch",
  "view.run.unwatch",
  "view.page",
  "view.content",
  "view.session.watch",
  "view.session.window",
  "view.unwatch",
  "state.status",
  "state.verify",
]);

/** Whether an operation changes durable state (and so carries an idempotency key). */
export function isStateChanging(operation: Operation): boolean {
  return !READ_ONLY.has(operation);
}

export class ClientError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ClientError";
  }
}

export interface RequestOptions {
  runId?: string;
  payload?: JsonObject;
  /** Stable across retries of one user action; a fresh one per call when absent. */
  idempotencyKey?: string;
  expectedRevision?: number;
  timeoutMs?: number;
}

interface Pending {
  requestId: string;
  resolve(response: Response): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

/** A digest-bound reference to content a view advertised. */
export interface ContentRef {
  digest: string;
  mediaType: string;
  byteLength: number;
}

const randomId = (prefix: string) => `${prefix}-${randomBytes(12).toString("hex")}`;

export class WorkflowClient {
  readonly clientId: string;
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  private readonly pending: Pending[] = [];
  private readonly handlers = new Map<string, (event: Event) => void>();
  private closedError?: Error;

  private constructor(
    private readonly socket: net.Socket,
    readonly hello: Hello,
    clientId: string | undefined,
  ) {
    this.clientId = clientId ?? randomId("ts");
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => this.fail(new ClientError("unavailable", "the connection to the server closed")));
    socket.on("error", (error) => this.fail(new ClientError("unavailable", error.message)));
  }

  /** Connect and read `hello`; a server of another package version is refused. */
  static async connect(socketPath: string, options: { clientId?: string; packageVersion?: string } = {}): Promise<WorkflowClient> {
    const socket = net.createConnection(socketPath);
    const hello = await new Promise<Hello>((resolve, reject) => {
      let data = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        data = Buffer.concat([data, chunk]);
        const end = data.indexOf(10);
        if (end < 0) return;
        socket.off("data", onData);
        socket.off("error", onError);
        const rest = data.subarray(end + 1);
        if (rest.length > 0) socket.unshift(rest);
        try {
          const message = decodeMessage(data.subarray(0, end + 1));
          if (message.type !== "hello") throw new ClientError("protocol", "the first message was not hello");
          resolve(message);
        } catch (error) {
          reject(error as Error);
        }
      };
      const onError = (error: Error) =>
        reject(new ClientError("unavailable", `no pi-workflows server answers at this socket (${error.message}); start one with \`pi-workflows server start\``));
      socket.on("data", onData);
      socket.once("error", onError);
    });
    if (options.packageVersion !== undefined && hello.packageVersion !== options.packageVersion) {
      socket.destroy();
      throw new ClientError("packageVersion", `the server runs pi-workflows ${hello.packageVersion}, this client is ${options.packageVersion}; restart the server`);
    }
    return new WorkflowClient(socket, hello, options.clientId);
  }

  /** Send one request and wait for its response (responses come back in request order). */
  request(operation: Operation, options: RequestOptions = {}): Promise<Response> {
    if (this.closedError) return Promise.reject(this.closedError);
    const requestId = randomId("req");
    const line = encodeMessage({
      schema: CLIENT_SCHEMA_V1,
      type: "request",
      requestId,
      clientId: this.clientId,
      operation,
      ...(options.runId !== undefined ? { runId: options.runId } : {}),
      ...(isStateChanging(operation) ? { idempotencyKey: options.idempotencyKey ?? randomId("key") } : {}),
      ...(options.expectedRevision !== undefined ? { expectedRevision: options.expectedRevision } : {}),
      payload: options.payload ?? {},
    });
    return new Promise<Response>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new ClientError("timeout", `${operation} got no response in time`)), options.timeoutMs ?? RESPONSE_TIMEOUTS_MS[operation] ?? RESPONSE_TIMEOUT_MS);
      this.pending.push({ requestId, resolve, reject, timer });
      this.socket.write(line);
    });
  }

  /** `request`, resolving to the receipt of an accepted or adopted answer (else a ClientError). */
  async call(operation: Operation, options: RequestOptions = {}): Promise<JsonObject> {
    const response = await this.request(operation, options);
    if ((response.outcome === "accepted" || response.outcome === "adopted") && response.receipt) return response.receipt;
    throw new ClientError(response.error?.code ?? response.outcome, response.error?.message ?? `the server answered ${response.outcome}`);
  }

  /**
   * Watch one run: `onView` gets each complete view (a snapshot, or the held view with a
   * patch applied) with its presentation revision.
   */
  async watchRun(
    runId: string,
    onView: (view: JsonObject, revision: number) => void,
    options: { since?: { view: JsonObject; revision: number }; onUnavailable?: () => void } = {},
  ): Promise<{ subscriptionId: string; unwatch(): Promise<void> }> {
    let held: JsonObject | undefined = options.since?.view;
    let heldRevision = options.since?.revision;
    const show = (view: JsonObject, revision: number) => {
      held = view;
      heldRevision = revision;
      onView(view, revision);
    };
    const handler = (event: Event) => {
      if (event.event === "unavailable") {
        options.onUnavailable?.();
      } else if (event.event === "run_snapshot") {
        show(event.payload.view as JsonObject, event.revision ?? 0);
      } else if (event.event === "run_patch" && held !== undefined && event.payload.fromRevision === heldRevision) {
        show(applyMergePatch(held, event.payload.patch) as JsonObject, event.revision ?? 0);
      } else if (event.event === "run_patch") {
        // A patch from a view this client does not hold (an event was missed): read it whole.
        this.call("view.run.get", { runId }).then(
          (receipt) => {
            const view = receipt.view as JsonObject;
            show(view, Number(view.revision ?? 0));
          },
          () => options.onUnavailable?.(),
        );
      }
    };
    const payload: JsonObject = heldRevision !== undefined ? { sinceRevision: heldRevision } : {};
    const receipt = await this.subscribe("view.run.watch", { runId, payload }, handler);
    const subscriptionId = receipt.subscriptionId as string;
    return {
      subscriptionId,
      unwatch: async () => {
        await this.call("view.run.unwatch", { payload: { subscriptionId } });
        this.handlers.delete(subscriptionId);
      },
    };
  }

  private async subscribe(operation: Operation, options: RequestOptions, handler: (event: Event) => void): Promise<JsonObject> {
    const receipt = await this.call(operation, options);
    const subscriptionId = receipt.subscriptionId;
    if (typeof subscriptionId !== "string") throw new ClientError("protocol", `${operation} answered without a subscriptionId`);
    this.handlers.set(subscriptionId, handler);
    // Events that arrived with the response are replayed once the handler exists.
    const early = this.early.splice(0).filter((event) => {
      if (event.subscriptionId !== subscriptionId) return true;
      handler(event);
      return false;
    });
    this.early.push(...early);
    return receipt;
  }

  /** Events for subscriptions whose handler is not registered yet (bounded). */
  private readonly early: Event[] = [];

  /**
   * Change a run's settings with a JSON Patch (RFC 6902: add, remove, replace, test) on the
   * paths its workflow declares changeable. `expectedChangeNumber` refuses the change
   * (`settingsChanged`) when someone changed them first. Answers the new change number.
   */
  async changeSettings(
    runId: string,
    patch: readonly JsonObject[],
    options: { expectedChangeNumber?: number; actor?: "human" | "session"; idempotencyKey?: string } = {},
  ): Promise<number> {
    const payload: JsonObject = { patch: patch as unknown as JsonObject[] };
    if (options.expectedChangeNumber !== undefined) payload.expectedChangeNumber = options.expectedChangeNumber;
    if (options.actor !== undefined) payload.actor = options.actor;
    const receipt = await this.call("run.changeSettings", { runId, payload, idempotencyKey: options.idempotencyKey });
    return Number(receipt.changeNumber);
  }

  /** A run's settings: current value and change number, changeable paths, newest changes. */
  async readSettings(runId: string): Promise<JsonObject> {
    return this.call("view.page", { runId, payload: { kind: "settings" } });
  }

  /** Read referenced content in chunks and verify it against the reference's digest. */
  async readContent(runId: string, reference: ContentRef): Promise<Buffer> {
    const parts: Buffer[] = [];
    let read = 0;
    while (read < reference.byteLength) {
      const length = Math.min(CONTENT_CHUNK_BYTES_MAX, reference.byteLength - read);
      const chunk = await this.call("view.content", {
        runId,
        payload: { digest: reference.digest, mediaType: reference.mediaType, offset: read, length },
      });
      if (chunk.digest !== reference.digest) throw new ClientError("contentMismatch", "the server answered for other content");
      const data = Buffer.from(String(chunk.data), "base64");
      if (data.length === 0) throw new ClientError("contentMismatch", "the content ended early");
      parts.push(data);
      read += data.length;
    }
    const bytes = Buffer.concat(parts);
    const digest = "sha256:" + createHash("sha256").update(bytes).digest("hex");
    if (bytes.length !== reference.byteLength || digest !== reference.digest) {
      throw new ClientError("contentMismatch", "the assembled content does not match its reference");
    }
    return bytes;
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let end = chunk.indexOf(10); end >= 0; end = chunk.indexOf(10, start)) {
      const line = Buffer.concat([...this.buffered, chunk.subarray(start, end + 1)]);
      this.buffered = [];
      this.bufferedBytes = 0;
      start = end + 1;
      this.onLine(line);
    }
    if (start < chunk.length) {
      this.buffered.push(chunk.subarray(start));
      this.bufferedBytes += chunk.length - start;
      if (this.bufferedBytes > FRAME_BYTES_MAX) this.fail(new ClientError("protocol", "the server sent a frame above 1 MiB"));
    }
  }

  private onLine(line: Buffer): void {
    let message: ClientMessage;
    try {
      message = decodeMessage(line);
    } catch (error) {
      this.fail(new ClientError("protocol", `the server sent a bad message: ${(error as Error).message}`));
      return;
    }
    if (message.type === "response") return this.onResponse(message);
    if (message.type === "event") return this.onEvent(message);
    this.fail(new ClientError("protocol", `unexpected ${message.type} message`));
  }

  private onResponse(response: Response): void {
    const pending = this.pending.shift();
    if (!pending || pending.requestId !== response.requestId) {
      this.fail(new ClientError("protocol", "a response arrived for another request"));
      return;
    }
    clearTimeout(pending.timer);
    pending.resolve(response);
  }

  private onEvent(event: Event): void {
    const handler = this.handlers.get(event.subscriptionId);
    if (handler) return handler(event);
    if (this.early.length >= EARLY_EVENTS_MAX) this.early.shift();
    this.early.push(event);
  }

  private fail(error: Error): void {
    if (this.closedError) return;
    this.closedError = error;
    for (const pending of this.pending.splice(0)) {
      clearTimeout(pending.timer);
      pending.reject(error);
    }
    this.socket.destroy();
  }
}

/** Events kept for a subscription whose response is still on its way. */
const EARLY_EVENTS_MAX = 64;
