// SessionLink: the extension's one connection to the server and its one origin-session
// subscription (a coordinator watch). At most one connection attempt runs at a time; failed
// attempts back off (bounded); a lost connection is first restored by the client itself
// (which re-claims the session under a new epoch), and when that fails the link starts over.
// It polls once per second while the session is open: the poll is what finds a server that was
// down at session start, and what lets the coordinator look for work. Polling sends nothing
// durable by itself.
import { ClientError, WorkflowClient } from "../client/client.js";
import type { JsonObject } from "../client/protocol.js";
import { type Binary, findBinary, SetupError, socketPath, startServer, stateDir } from "./server-process.js";
import { parseSessionView, type SessionView } from "./session-view.js";

/** The poll: once per second while the session is open. */
export const POLL_INTERVAL_MS = 1_000;
/** Waits between failed connection attempts (the last one repeats). */
export const CONNECT_BACKOFF_MS: readonly number[] = Object.freeze([500, 1_000, 2_000, 4_000, 8_000, 15_000]);
/** How long a command waits for a connection before it says the server is unavailable. */
export const READY_WAIT_MS = 15_000;

export interface LinkEvents {
  /** A connection claimed the session: a new coordinator epoch (also after a restore). */
  onEpoch(epoch: number): void;
  onView(view: SessionView): void;
  /** The connection was lost (what the widget shows is stale from now). */
  onDisconnected(): void;
  /** Something the user must fix (no binary, another version); each distinct message once. */
  onProblem(message: string): void;
  /** Each poll (the coordinator looks for work). */
  onPoll(): void;
}

export interface LinkOptions {
  env?: NodeJS.ProcessEnv;
  packageVersion: string;
  /** Tests: connect without starting a server. */
  startServer?: () => Promise<void>;
}

export class SessionLink {
  private client?: WorkflowClient;
  private connecting = false;
  private failures = 0;
  private nextAttemptAt = 0;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private lastProblem?: string;
  private readonly state: { dir: string; explicit: boolean };
  private binary?: Binary;
  private waiters: ((client: WorkflowClient | undefined) => void)[] = [];

  constructor(
    readonly sessionId: string,
    private readonly options: LinkOptions,
    private readonly events: LinkEvents,
  ) {
    this.state = stateDir(options.env);
  }

  get socket(): string {
    return socketPath(this.state.dir);
  }

  start(): void {
    if (this.timer || this.stopped) return;
    this.timer = setInterval(() => this.poll(), POLL_INTERVAL_MS);
    // Pi's process must be free to exit; the link never keeps it alive.
    this.timer.unref();
    this.poll();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.client?.close();
    this.client = undefined;
    for (const waiter of this.waiters.splice(0)) waiter(undefined);
  }

  /** The live client, if connected now. */
  current(): WorkflowClient | undefined {
    return this.client && !this.client.isClosed ? this.client : undefined;
  }

  /** The live client, waiting up to `ms` for a connection; a ClientError says what is wrong. */
  async ready(ms = READY_WAIT_MS): Promise<WorkflowClient> {
    const now = this.current();
    if (now) return now;
    this.nextAttemptAt = 0; // a user is waiting: try now
    this.poll();
    const client = await new Promise<WorkflowClient | undefined>((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve(undefined);
      }, ms);
      const done = (c: WorkflowClient | undefined) => {
        clearTimeout(timer);
        resolve(c);
      };
      this.waiters.push(done);
    });
    if (client) return client;
    throw new ClientError("unavailable", this.lastProblem ?? "the pi-workflows server does not answer; check it with `pi-workflows server status`");
  }

  private poll(): void {
    if (this.stopped) return;
    if (!this.current() && !this.connecting && Date.now() >= this.nextAttemptAt) void this.connect();
    this.events.onPoll();
  }

  private async connect(): Promise<void> {
    this.connecting = true;
    this.client?.close();
    this.client = undefined;
    try {
      const client = await this.open();
      if (this.stopped) {
        client.close();
        return;
      }
      this.client = client;
      this.failures = 0;
      this.lastProblem = undefined;
      const watch = await client.watchSession(this.sessionId, (raw: JsonObject) => this.view(client, raw), {
        coordinator: true,
        onEpoch: (epoch) => {
          if (this.client === client) this.events.onEpoch(epoch);
        },
        onUnavailable: () => this.lost(client),
      });
      if (this.client !== client) return;
      if (watch.epoch === undefined) throw new ClientError("protocol", "the server gave no coordinator epoch");
      for (const waiter of this.waiters.splice(0)) waiter(client);
    } catch (error) {
      this.client?.close();
      this.client = undefined;
      this.failures += 1;
      const wait = CONNECT_BACKOFF_MS[Math.min(this.failures - 1, CONNECT_BACKOFF_MS.length - 1)];
      this.nextAttemptAt = Date.now() + wait;
      this.problem(error);
    } finally {
      this.connecting = false;
    }
  }

  /** Connect; when nothing answers, start the server once and connect again. */
  private async open(): Promise<WorkflowClient> {
    const connectOptions = {
      packageVersion: this.options.packageVersion,
      stateDir: this.state.dir,
      reconnect: true,
      onWarning: (message: string) => this.problem(new Error(message)),
      onConnectionLost: () => this.events.onDisconnected(),
    };
    try {
      return await WorkflowClient.connect(this.socket, connectOptions);
    } catch (error) {
      if (!(error instanceof ClientError) || error.code !== "unavailable") throw error;
    }
    if (this.options.startServer) await this.options.startServer();
    else {
      this.binary ??= findBinary(this.options.env);
      await startServer(this.binary, this.state, this.options.env);
    }
    return WorkflowClient.connect(this.socket, connectOptions);
  }

  private view(client: WorkflowClient, raw: JsonObject): void {
    if (this.client !== client) return;
    const view = parseSessionView(raw);
    if (view) this.events.onView(view);
  }

  /** The watch ended (the client could not restore it): start over with backoff. */
  private lost(client: WorkflowClient): void {
    if (this.client !== client) return;
    client.close();
    this.client = undefined;
    this.events.onDisconnected();
    this.nextAttemptAt = Date.now() + CONNECT_BACKOFF_MS[0];
  }

  private problem(error: unknown): void {
    const message =
      error instanceof SetupError
        ? error.message
        : error instanceof ClientError && error.code === "packageVersion"
          ? `pi-workflows: ${error.message} (\`pi-workflows server stop\`, then /reload)`
          : `pi-workflows: cannot reach the workflow server: ${(error as Error).message}`;
    this.lastProblem = message;
    if (message === this.reportedProblem) return;
    this.reportedProblem = message;
    this.events.onProblem(message);
  }
  private reportedProblem?: string;
}
