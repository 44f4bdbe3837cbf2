// WorkflowClient: one connection at a time to the pi-workflows server's user-only Unix socket,
// speaking client.v1 (canonical JSON lines). Requests are answered in order; subscription events
// are delivered to their subscription's handler. Views are materialized from a snapshot plus
// merge patches, and referenced content is read in chunks and verified before it is returned.
//
// Identity and reconnects (docs/CLIENT-PROTOCOL.md, "Client identity and reconnects"): every
// request carries the installation's stable client ID (`identity.ts`), because the server keys
// receipts by (client ID, idempotency key). When the connection is lost (end of file, reset,
// broken pipe) while requests await their answers, the client reconnects, checks `hello` again
// and resends each of them in order with the same client ID and idempotency key under a new
// request ID: the server adopts a committed receipt, or waits again for the verdict of a
// submission it is still validating. At most RETRIES_MAX reconnects without any answer in
// between, after RETRY_BACKOFF_MS, none later than RETRY_WINDOW_MS after the first loss. An
// error response is an answer and is never retried. Subscriptions are restored on the new
// connection from the newest revision seen; their handlers keep the subscription IDs they got.
import { createHash } from "node:crypto";
import net from "node:net";
import { installationClientId, isValidId, newId, PI_CLIENT, stateDirOfSocket } from "./identity.js";
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
 * Each transport attempt gets the whole wait: a resent submission must be able to wait for the
 * same verdict.
 */
const RESPONSE_TIMEOUTS_MS: Partial<Record<Operation, number>> = {
  "run.start": 90_000,
  "interaction.submit": 150_000,
  "interaction.assistant": 150_000,
  "decision.answer": 150_000,
  "state.backup": 30 * 60_000,
  "state.prune": 30 * 60_000,
  "state.verify": 30 * 60_000,
};
/** Largest chunk `readContent` asks for (the server's limit). */
export const CONTENT_CHUNK_BYTES_MAX = 512 * 1024;
/** Reconnects without any answer in between before the client gives up (per loss streak). */
export const RETRIES_MAX = 3;
/** The wait before each reconnect: a lost local socket answers again at once or not at all. */
export const RETRY_BACKOFF_MS: readonly number[] = Object.freeze([100, 300, 1_000]);
/** No reconnect starts later than this after the first loss of a streak. */
export const RETRY_WINDOW_MS = 10_000;
/** How long a connection may take to send `hello` (the server writes it at once). */
export const HELLO_TIMEOUT_MS = 5_000;

const READ_ONLY = new Set<Operation>([
  "run.status",
  "run.list",
  "effect.list",
  "workflow.list",
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

/** Never resent automatically: a stop resent to a server started since would stop that one. */
function isResendable(operation: Operation): boolean {
  return operation !== "server.stop";
}

function advice(operation: Operation): string {
  if (operation === "server.stop") return "the server may be stopping: check with `pi-workflows server status`";
  if (isStateChanging(operation)) {
    return "the command may have been applied: check with `pi-workflows runs` or `pi-workflows run status <run-id>` before repeating it (with the same idempotency key it is safe)";
  }
  return "check the server with `pi-workflows server status` and try again";
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

export interface ConnectOptions {
  /** The client ID to send (tests); default the installation's, stored in the state directory. */
  clientId?: string;
  /** Where the installation's client ID lives; default the socket's state directory. */
  stateDir?: string;
  /** Refuse a server of another package version (checked again after every reconnect). */
  packageVersion?: string;
  /** Reconnect and resend after a lost connection (default true). */
  reconnect?: boolean;
  /** Where identity warnings go (a replaced or unwritable ID file); default `process.emitWarning`. */
  onWarning?: (message: string) => void;
  /**
   * Called when the current connection is lost (before any reconnect): what a live view shows
   * is stale from then on, and a coordinator's epoch has ended.
   */
  onConnectionLost?: () => void;
}

export interface RequestOptions {
  runId?: string;
  payload?: JsonObject;
  /** Stable across retries of one user action; a fresh one per call when absent. */
  idempotencyKey?: string;
  expectedRevision?: number;
  timeoutMs?: number;
}

/** A request awaiting its answer; `line` encodes it (with `payload`) for one transport attempt. */
interface Pending {
  operation: Operation;
  requestId: string;
  payload: JsonObject;
  line(requestId: string, payload: JsonObject): Buffer;
  resolve(response: Response): void;
  reject(error: Error): void;
  timeoutMs: number;
  timer?: NodeJS.Timeout;
  /** A restore of a subscription (internal; redone after another loss). */
  restore?: boolean;
  /** An unwatch of a subscription this client restores: the ID its caller holds. */
  unwatchOf?: string;
  /** Its `payload.coordinator` epoch was renewed once already (see renewAuthority). */
  authorityRenewed?: boolean;
}

/** A subscription the caller holds, restored after a reconnect. */
interface Subscription {
  /** The ID its caller was given (handlers and unwatch use it across reconnects). */
  id: string;
  /** Its ID on the current connection (undefined until restored there). */
  current?: string;
  operation: Operation;
  runId?: string;
  /** The watch payload for a restore (from the newest revision seen). */
  payload(): JsonObject;
  handler(event: Event): void;
  onUnavailable?: () => void;
  /** Called with the restore's receipt once the watch is live on a new connection. */
  onRestore?: (receipt: JsonObject) => void;
}

/** A digest-bound reference to content a view advertised. */
export interface ContentRef {
  digest: string;
  mediaType: string;
  byteLength: number;
}

/** Entries one branch report may name (the server's limit). */
export const BRANCH_FOUND_MAX = 256;

export interface BranchReport {
  isIdle: boolean;
  hasPendingMessages: boolean;
  found: readonly { workflowMessageId: string; piEntryId: string }[];
}

export type TurnOutcome = "completed" | "aborted" | "error";
export type TurnReport =
  | { turnId: string; phase: "start"; workflowMessageId: string }
  | { turnId: string; phase: "end"; outcome: TurnOutcome; responseEntryId?: string };

const isObject = (value: unknown): value is JsonObject => value !== null && typeof value === "object" && !Array.isArray(value);
const randomId = (prefix: string) => newId(prefix);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Connect and read `hello` within `helloMs`; another package version is refused. */
function openConnection(socketPath: string, helloMs: number, packageVersion: string | undefined): Promise<{ socket: net.Socket; hello: Hello }> {
  const socket = net.createConnection(socketPath);
  return new Promise((resolve, reject) => {
    let data = Buffer.alloc(0);
    const finish = (error?: Error, hello?: Hello) => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("close", onClose);
      if (error) {
        socket.destroy();
        reject(error);
      } else {
        resolve({ socket, hello: hello as Hello });
      }
    };
    const onData = (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const end = data.indexOf(10);
      if (end < 0) {
        if (data.length > FRAME_BYTES_MAX) finish(new ClientError("protocol", "the server sent a frame above 1 MiB"));
        return;
      }
      const rest = data.subarray(end + 1);
      let message: ClientMessage;
      try {
        message = decodeMessage(data.subarray(0, end + 1));
      } catch (error) {
        return finish(error as Error);
      }
      if (message.type !== "hello") return finish(new ClientError("protocol", "the first message was not hello"));
      if (packageVersion !== undefined && message.packageVersion !== packageVersion) {
        return finish(new ClientError("packageVersion", `the server runs pi-workflows ${message.packageVersion}, this client is ${packageVersion}; restart the server`));
      }
      socket.pause();
      if (rest.length > 0) socket.unshift(rest);
      finish(undefined, message);
    };
    const onError = (error: Error) =>
      finish(new ClientError("unavailable", `no pi-workflows server answers at this socket (${error.message}); start one with \`pi-workflows server start\``));
    const onClose = () => finish(new ClientError("unavailable", "the server closed the connection before hello"));
    const timer = setTimeout(() => finish(new ClientError("unavailable", `no hello within ${helloMs} ms`)), helloMs);
    socket.on("data", onData);
    socket.on("error", onError);
    socket.on("close", onClose);
  });
}

export class WorkflowClient {
  readonly clientId: string;
  private socket?: net.Socket;
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  /** In send order; the server answers in that order. */
  private pending: Pending[] = [];
  private readonly subscriptions = new Map<string, Subscription>();
  private closedError?: Error;
  /** True while a reconnect runs (requests queue until it sends them). */
  private reconnectRunning = false;
  /** Reconnects since the last answer or event, and when that streak's first loss was. */
  private lossStreak = 0;
  private firstLossAt = 0;

  private constructor(
    private readonly socketPath: string,
    socket: net.Socket,
    private currentHello: Hello,
    clientId: string,
    private readonly options: ConnectOptions,
  ) {
    this.clientId = clientId;
    this.attach(socket);
  }

  /** The `hello` of the current connection. */
  get hello(): Hello {
    return this.currentHello;
  }

  /** Connect and read `hello`; a server of another package version is refused. */
  static async connect(socketPath: string, options: ConnectOptions = {}): Promise<WorkflowClient> {
    if (options.clientId !== undefined && !isValidId(options.clientId)) {
      throw new ClientError("invalidRequest", "clientId must be 1 to 256 bytes of letters, digits and ._:@|+=~-");
    }
    const { socket, hello } = await openConnection(socketPath, RESPONSE_TIMEOUT_MS, options.packageVersion);
    const clientId = options.clientId ?? installationClientId(options.stateDir ?? stateDirOfSocket(socketPath), PI_CLIENT, options.onWarning);
    return new WorkflowClient(socketPath, socket, hello, clientId, options);
  }

  /** Send one request and wait for its response (responses come back in request order). */
  request(operation: Operation, options: RequestOptions = {}): Promise<Response> {
    if (this.closedError) return Promise.reject(this.closedError);
    let payload = options.payload ?? {};
    const unwatchOf = this.forgetSubscription(operation, payload);
    if (unwatchOf !== undefined) {
      const current = this.subscriptions.get(unwatchOf)?.current;
      this.subscriptions.delete(unwatchOf);
      // Not live on a current connection: it ended with the lost one, and its old ID could
      // name another subscription restored since.
      if (current === undefined || !this.socket || this.reconnectRunning) {
        return Promise.resolve(localUnwatch(randomId("req"), unwatchOf));
      }
      payload = { ...payload, subscriptionId: current };
    }
    const idempotencyKey = isStateChanging(operation) ? (options.idempotencyKey ?? randomId("key")) : undefined;
    const line = (requestId: string, sent: JsonObject) =>
      encodeMessage({
        schema: CLIENT_SCHEMA_V1,
        type: "request",
        requestId,
        clientId: this.clientId,
        operation,
        ...(options.runId !== undefined ? { runId: options.runId } : {}),
        ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
        ...(options.expectedRevision !== undefined ? { expectedRevision: options.expectedRevision } : {}),
        payload: sent,
      });
    return new Promise<Response>((resolve, reject) => {
      const pending: Pending = {
        operation,
        requestId: randomId("req"),
        payload,
        line,
        resolve,
        reject,
        timeoutMs: options.timeoutMs ?? RESPONSE_TIMEOUTS_MS[operation] ?? RESPONSE_TIMEOUT_MS,
        unwatchOf,
      };
      this.pending.push(pending);
      if (this.reconnectRunning) return; // sent once the new connection is up
      if (this.socket) this.send(pending);
      else this.startReconnect(new ClientError("unavailable", "not connected"));
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
   * patch applied) with its presentation revision. After a reconnect the watch is restored
   * from the held revision; `onUnavailable` is called when the run is gone or the connection
   * could not be restored (the watch then ended).
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
    const payload = (): JsonObject => (heldRevision !== undefined ? { sinceRevision: heldRevision } : {});
    const subscriptionId = await this.subscribe("view.run.watch", runId, payload, handler, options.onUnavailable);
    return {
      subscriptionId,
      unwatch: async () => {
        await this.call("view.run.unwatch", { payload: { subscriptionId } });
      },
    };
  }

  private async subscribe(
    operation: Operation,
    runId: string | undefined,
    payload: () => JsonObject,
    handler: (event: Event) => void,
    onUnavailable?: () => void,
    onRestore?: (receipt: JsonObject) => void,
    onReceipt?: (receipt: JsonObject) => void,
  ): Promise<string> {
    const receipt = await this.call(operation, { runId, payload: payload() });
    const subscriptionId = receipt.subscriptionId;
    if (typeof subscriptionId !== "string") throw new ClientError("protocol", `${operation} answered without a subscriptionId`);
    // Answered on the connection that is current now (a loss in between would have resent it).
    // Bounded by the server's limit of live subscriptions per connection (64): an ended one
    // (`unavailable`) or an unwatched one is forgotten.
    // Before the early events: they are newer than the receipt's view.
    onReceipt?.(receipt);
    const subscription: Subscription = { id: subscriptionId, current: subscriptionId, operation, runId, payload, handler, onUnavailable, onRestore };
    this.subscriptions.set(subscriptionId, subscription);
    // Events that arrived with the response are replayed once the handler exists.
    const early = this.early.splice(0).filter((event) => {
      if (event.subscriptionId !== subscriptionId) return true;
      handler(event);
      return false;
    });
    this.early.push(...early);
    return subscriptionId;
  }

  /** For an unwatch of a restored subscription: stop restoring it; the ID its caller holds. */
  private forgetSubscription(operation: Operation, payload: JsonObject): string | undefined {
    if (operation !== "view.run.unwatch" && operation !== "view.unwatch") return undefined;
    const named = payload.subscriptionId;
    if (typeof named !== "string" || !this.subscriptions.has(named)) return undefined;
    return named;
  }

  /** Events for subscriptions whose handler is not registered yet (bounded). */
  private readonly early: Event[] = [];

  /**
   * The newest coordinator epoch this client claimed per origin session (one entry per
   * coordinator watch it holds, removed on unwatch): renews the authority of a resent request.
   */
  private readonly coordinatorEpochs = new Map<string, number>();

  /**
   * Watch an origin session (docs/SESSIONS.md): `onView` gets each complete
   * `pi-workflows.session-view.v1` (the answer's view when it has one, then every
   * `session_snapshot`; each event carries the whole view, so nothing is merged). With
   * `coordinator`, `onEpoch` gets the claimed epoch before any view. With `coordinator: true` this
   * connection becomes the session's coordinator under a new epoch and fences the previous one.
   *
   * After a reconnect the watch is restored on the new connection. A coordinator watch then
   * claims again: a new epoch, given to `onEpoch` before any view of it. The old epoch is fenced
   * by then, so the caller must treat everything it knew as unreported: report the branch
   * again before any send or turn report. `onUnavailable` says the watch ended (the connection
   * could not be restored, or the server refused the restore).
   */
  async watchSession(
    sessionId: string,
    onView: (view: JsonObject) => void,
    options: { coordinator?: boolean; onEpoch?: (epoch: number) => void; onUnavailable?: () => void } = {},
  ): Promise<{ subscriptionId: string; epoch?: number; view?: JsonObject; unwatch(): Promise<void> }> {
    const coordinator = options.coordinator === true;
    const payload = (): JsonObject => ({ sessionId, coordinator });
    const handler = (event: Event) => {
      if (event.event === "unavailable") options.onUnavailable?.();
      else if (event.event === "session_snapshot" && isObject(event.payload.view)) onView(event.payload.view);
    };
    let first: JsonObject | undefined;
    let epoch: number | undefined;
    // The epoch first, then the receipt's view (when the server puts one there), then the
    // events that arrived with the answer: the caller never sees a view before its epoch.
    const takeReceipt = (receipt: JsonObject) => {
      if (coordinator) {
        if (typeof receipt.epoch !== "number") throw new ClientError("protocol", "view.session.watch answered a coordinator without an epoch");
        epoch = receipt.epoch;
        this.coordinatorEpochs.set(sessionId, epoch);
        options.onEpoch?.(epoch);
      }
      if (isObject(receipt.view)) {
        first = receipt.view;
        onView(first);
      }
    };
    const onRestore = (receipt: JsonObject) => {
      if (coordinator && typeof receipt.epoch === "number") {
        this.coordinatorEpochs.set(sessionId, receipt.epoch);
        options.onEpoch?.(receipt.epoch);
      }
      if (isObject(receipt.view)) onView(receipt.view);
    };
    const subscriptionId = await this.subscribe("view.session.watch", undefined, payload, handler, options.onUnavailable, onRestore, takeReceipt);
    return {
      subscriptionId,
      epoch,
      view: first,
      unwatch: async () => {
        if (coordinator) this.coordinatorEpochs.delete(sessionId);
        await this.call("view.unwatch", { payload: { subscriptionId } });
      },
    };
  }

  /** One read of a session view (no subscription); rendered for `epoch` when given. */
  async sessionWindow(sessionId: string, options: { epoch?: number } = {}): Promise<JsonObject> {
    const payload: JsonObject = { sessionId };
    if (options.epoch !== undefined) payload.epoch = options.epoch;
    const receipt = await this.call("view.session.window", { payload });
    if (!isObject(receipt.view)) throw new ClientError("protocol", "view.session.window answered without a view");
    return receipt.view;
  }

  /**
   * What the coordinator of `epoch` found on Pi's active branch: the Pi entries carrying the
   * window's messages, and whether Pi is idle with no pending input (only then may the server
   * treat an absent message as absent). Answers `{sent, created, lostTurns}`.
   */
  async reportBranch(sessionId: string, epoch: number, report: BranchReport, options: { idempotencyKey?: string } = {}): Promise<JsonObject> {
    if (report.found.length > BRANCH_FOUND_MAX) {
      throw new ClientError("invalidRequest", `a branch report names at most ${BRANCH_FOUND_MAX} entries`);
    }
    const payload: JsonObject = {
      sessionId,
      epoch,
      isIdle: report.isIdle,
      hasPendingMessages: report.hasPendingMessages,
      found: report.found.map((entry) => ({ workflowMessageId: entry.workflowMessageId, piEntryId: entry.piEntryId })),
    };
    return this.call("workflowMessage.reportBranch", { payload, idempotencyKey: options.idempotencyKey });
  }

  /** An exact Pi model turn started or ended; answers `{ownership, turn?}`. */
  async reportTurn(sessionId: string, epoch: number, report: TurnReport, options: { idempotencyKey?: string } = {}): Promise<JsonObject> {
    const payload: JsonObject = { sessionId, epoch, turnId: report.turnId, phase: report.phase };
    if (report.phase === "start") {
      payload.workflowMessageId = report.workflowMessageId;
    } else {
      payload.outcome = report.outcome;
      if (report.responseEntryId !== undefined) payload.responseEntryId = report.responseEntryId;
    }
    return this.call("workflowTurn.report", { payload, idempotencyKey: options.idempotencyKey });
  }

  /** Remove the retained terminal run from the session view; answers whether one was removed. */
  async clearTerminal(sessionId: string, options: { idempotencyKey?: string } = {}): Promise<boolean> {
    const receipt = await this.call("sessionView.clearTerminal", { payload: { sessionId }, idempotencyKey: options.idempotencyKey });
    return receipt.cleared === true;
  }

  /** Whether the client ended for good (`close()`, a protocol error, a timeout): connect anew. */
  get isClosed(): boolean {
    return this.closedError !== undefined;
  }

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
    this.fail(new ClientError("closed", "the client was closed"));
  }

  private attach(socket: net.Socket): void {
    this.socket = socket;
    this.buffered = [];
    this.bufferedBytes = 0;
    socket.on("data", (chunk: Buffer) => {
      if (socket === this.socket) this.onData(chunk);
    });
    socket.on("close", () => this.onLoss(socket, new ClientError("unavailable", "the server closed the connection")));
    socket.on("error", (error) => this.onLoss(socket, new ClientError("unavailable", error.message)));
    socket.resume();
  }

  /** Write one attempt of `pending` under a new request ID, with a fresh answer wait. */
  private send(pending: Pending): void {
    const socket = this.socket;
    if (!socket) return;
    clearTimeout(pending.timer);
    pending.timer = setTimeout(
      () => this.fail(new ClientError("timeout", `${pending.operation} got no response in time; it may still finish: check with \`pi-workflows runs\``)),
      pending.timeoutMs,
    );
    socket.write(pending.line(pending.requestId, pending.payload));
  }

  /** The current connection ended without our asking: reconnect if anything awaits it. */
  private onLoss(socket: net.Socket, error: ClientError): void {
    if (socket !== this.socket || this.closedError) return;
    this.socket = undefined;
    socket.destroy();
    this.options.onConnectionLost?.();
    for (const subscription of this.subscriptions.values()) subscription.current = undefined;
    for (const pending of this.pending) clearTimeout(pending.timer);
    if (this.options.reconnect === false) return this.fail(error);
    // Restores are redone on the next connection; an unwatch's subscription ended with this
    // one (resending its old ID could remove another subscription restored under it).
    const kept: Pending[] = [];
    for (const pending of this.pending) {
      if (pending.restore) continue;
      if (pending.unwatchOf !== undefined) {
        pending.resolve(localUnwatch(pending.requestId, pending.unwatchOf));
      } else if (!isResendable(pending.operation)) {
        pending.reject(this.lost(pending.operation, 0, error));
      } else {
        kept.push(pending);
      }
    }
    this.pending = kept;
    if (this.pending.length > 0 || this.subscriptions.size > 0) this.startReconnect(error);
  }

  private startReconnect(error: ClientError): void {
    if (this.reconnectRunning || this.closedError) return;
    this.reconnectRunning = true;
    this.reconnect(error).catch((caught: unknown) => this.fail(caught instanceof Error ? caught : new Error(String(caught))));
  }

  /** Reconnect (bounded), restore the subscriptions, resend what awaits an answer, in order. */
  private async reconnect(error: ClientError): Promise<void> {
    try {
      await this.reconnectOnce(error);
    } finally {
      // In the same turn as the last send: a request made after it is sent directly.
      this.reconnectRunning = false;
    }
  }

  private async reconnectOnce(error: ClientError): Promise<void> {
    let last: Error = error;
    for (;;) {
      if (this.closedError) return;
      if (this.lossStreak === 0) this.firstLossAt = Date.now();
      const pause = RETRY_BACKOFF_MS[this.lossStreak];
      if (this.lossStreak >= RETRIES_MAX || pause === undefined || Date.now() - this.firstLossAt + pause >= RETRY_WINDOW_MS) {
        return this.giveUp(last);
      }
      this.lossStreak += 1;
      await sleep(pause);
      if (this.closedError) return;
      let opened: { socket: net.Socket; hello: Hello };
      try {
        opened = await openConnection(this.socketPath, HELLO_TIMEOUT_MS, this.options.packageVersion);
      } catch (caught) {
        if (caught instanceof ClientError && caught.code === "packageVersion") return this.fail(caught);
        last = caught as Error;
        continue;
      }
      if (this.closedError) {
        opened.socket.destroy();
        return;
      }
      this.currentHello = opened.hello;
      this.attach(opened.socket);
      const restores = [...this.subscriptions.values()].map((subscription) => this.restoreOf(subscription));
      const waiting = this.pending;
      this.pending = [...restores, ...waiting];
      for (const pending of this.pending) {
        pending.requestId = randomId("req"); // same client ID and key, a new transport attempt
        this.send(pending);
      }
      return;
    }
  }

  /** The watch that restores `subscription` on the new connection (answered synchronously). */
  private restoreOf(subscription: Subscription): Pending {
    const line = (requestId: string, payload: JsonObject) =>
      encodeMessage({
        schema: CLIENT_SCHEMA_V1,
        type: "request",
        requestId,
        clientId: this.clientId,
        operation: subscription.operation,
        ...(subscription.runId !== undefined ? { runId: subscription.runId } : {}),
        payload,
      });
    return {
      operation: subscription.operation,
      requestId: randomId("req"),
      payload: subscription.payload(),
      line,
      restore: true,
      timeoutMs: RESPONSE_TIMEOUT_MS,
      // Called from onResponse itself, so the events that follow are routed at once.
      resolve: (response) => {
        const current = response.receipt?.subscriptionId;
        if ((response.outcome === "accepted" || response.outcome === "adopted") && typeof current === "string") {
          subscription.current = current;
          subscription.onRestore?.(response.receipt as JsonObject);
        } else if (this.subscriptions.get(subscription.id) === subscription) {
          this.subscriptions.delete(subscription.id);
          subscription.onUnavailable?.();
        }
      },
      reject: () => {},
    };
  }

  /** Reconnecting failed: every waiting request fails with what happened and what to do. */
  private giveUp(last: Error): void {
    const attempts = this.lossStreak;
    this.lossStreak = 0;
    for (const pending of this.pending.splice(0)) {
      clearTimeout(pending.timer);
      if (!pending.restore) pending.reject(this.lost(pending.operation, attempts, last));
    }
    // The watches ended; their callers learn it (a later request starts a new connection).
    const ended = [...this.subscriptions.values()];
    this.subscriptions.clear();
    for (const subscription of ended) subscription.onUnavailable?.();
  }

  private lost(operation: Operation, attempts: number, last: Error): ClientError {
    return new ClientError(
      "connectionLost",
      `lost the connection to the server while waiting for the answer to ${operation}; ${attempts} reconnect attempt(s) got no answer (last: ${last.message}); ${advice(operation)}`,
    );
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let end = chunk.indexOf(10); end >= 0; end = chunk.indexOf(10, start)) {
      const line = Buffer.concat([...this.buffered, chunk.subarray(start, end + 1)]);
      this.buffered = [];
      this.bufferedBytes = 0;
      start = end + 1;
      this.onLine(line);
      if (this.closedError) return;
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
    this.lossStreak = 0;
    clearTimeout(pending.timer);
    if (this.renewAuthority(pending, response)) return;
    if (pending.unwatchOf !== undefined && response.receipt && "subscriptionId" in response.receipt) {
      response = { ...response, receipt: { ...response.receipt, subscriptionId: pending.unwatchOf } };
    }
    pending.resolve(response);
  }

  /**
   * A model-side request carries `payload.coordinator {sessionId, epoch}`. Resent after a
   * reconnect it still names the epoch of the lost connection, which the restored coordinator
   * watch has replaced by the time its answer arrives (answers come in order), so the server
   * refuses it `coordinatorFenced` before any receipt or change. Send it once more under the
   * session's newest epoch this client holds; a refusal for any other reason is the answer.
   */
  private renewAuthority(pending: Pending, response: Response): boolean {
    if (pending.authorityRenewed || response.outcome !== "rejected" || response.error?.code !== "coordinatorFenced") return false;
    const authority = pending.payload.coordinator;
    if (!isObject(authority) || typeof authority.sessionId !== "string" || typeof authority.epoch !== "number") return false;
    const newest = this.coordinatorEpochs.get(authority.sessionId);
    if (newest === undefined || newest <= authority.epoch || !this.socket) return false;
    pending.authorityRenewed = true;
    pending.payload = { ...pending.payload, coordinator: { ...authority, epoch: newest } };
    pending.requestId = randomId("req");
    this.pending.push(pending);
    this.send(pending);
    return true;
  }

  private onEvent(event: Event): void {
    this.lossStreak = 0;
    for (const subscription of this.subscriptions.values()) {
      if (subscription.current === event.subscriptionId) {
        // The server ended it (its forwarder stops after `unavailable`): nothing to restore.
        if (event.event === "unavailable") this.subscriptions.delete(subscription.id);
        // The handler sees the ID its caller holds, whatever this connection calls it.
        return subscription.handler(subscription.id === event.subscriptionId ? event : { ...event, subscriptionId: subscription.id });
      }
    }
    if (this.early.length >= EARLY_EVENTS_MAX) this.early.shift();
    this.early.push(event);
  }

  /** Final: a protocol error, a timeout, another version, or `close()`. */
  private fail(error: Error): void {
    if (this.closedError) return;
    this.closedError = error;
    for (const pending of this.pending.splice(0)) {
      clearTimeout(pending.timer);
      pending.reject(error);
    }
    this.subscriptions.clear();
    const socket = this.socket;
    this.socket = undefined;
    socket?.destroy();
  }
}

/** The answer to an unwatch whose subscription ended with a lost connection. */
function localUnwatch(requestId: string, subscriptionId: string): Response {
  return {
    schema: CLIENT_SCHEMA_V1,
    type: "response",
    requestId,
    outcome: "accepted",
    receipt: { subscriptionId, removed: true },
  } as Response;
}

/** Events kept for a subscription whose response is still on its way. */
const EARLY_EVENTS_MAX = 64;
