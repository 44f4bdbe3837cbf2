// The private per-step channel between a headless agent step's runner (src/agent/executor.ts, the
// listening side) and the bridge extension inside its Pi child (./extension.ts). One Unix socket in
// a fresh 0700 temp dir; its path and a random token reach Pi in the child's environment, and the
// extension removes both from its own environment before any tool runs (so the agent's shell
// commands do not inherit them). Frames are one JSON object per LF-terminated line, each at most
// BRIDGE_FRAME_BYTES_MAX; one connection per step, one call at a time. docs/RUNNER-PROTOCOL.md
// ("Headless agent bridge") describes it.

/** Environment variable that names the socket. */
export const BRIDGE_SOCKET_ENV = "PI_WORKFLOWS_BRIDGE_SOCKET";
/** Environment variable with the per-step token the extension proves itself with. */
export const BRIDGE_TOKEN_ENV = "PI_WORKFLOWS_BRIDGE_TOKEN";
/** Version of this channel (`hello.protocol`). */
export const BRIDGE_PROTOCOL = 1;
/** One frame, at most: a submission (≤ 256 KiB of canonical JSON) plus room for JSON escaping and the envelope. */
export const BRIDGE_FRAME_BYTES_MAX = 1024 * 1024;
/** How long the extension waits for the runner's answer to one call. */
export const BRIDGE_CALL_TIMEOUT_MS = 60_000;
/** How long the extension waits for the connection and the runner's `ready`. */
export const BRIDGE_CONNECT_TIMEOUT_MS = 10_000;
/** The actions the bridge's `workflow` tool offers (a subset of the interactive tool's, same contract). */
export const BRIDGE_ACTIONS = ["update", "submit"] as const;
export type BridgeAction = (typeof BRIDGE_ACTIONS)[number];

/** extension → runner, first frame. */
export interface HelloFrame {
  type: "hello";
  protocol: number;
  token: string;
}

/** runner → extension: the answer to `hello`. */
export interface ReadyFrame {
  type: "ready";
  /** The open step's request ID (the prompt names it too). */
  requestId: string;
  /** Tools besides `workflow` the step allows; null: no restriction. */
  allowedTools: string[] | null;
}

/** runner → extension: `hello` refused; the runner closes the connection. */
export interface RefusedHelloFrame {
  type: "refused";
  message: string;
}

/** extension → runner: one tool call, already checked against the tool's contract. */
export interface CallFrame {
  type: "call";
  seq: number;
  action: BridgeAction;
  requestId: string;
  /** submit */
  output?: unknown;
  /** update: {type, key, data} */
  update?: { type: string; key: string; data: unknown };
}

/**
 * runner → extension: the answer to call `seq`. `accepted`: the step's output is settled;
 * `rejected`: the node's checks refused the value (`message` says why; fix and resubmit);
 * `recorded`: an update was taken; `refused`: the call itself was not taken (stale requestId,
 * too many calls, the step already settled, a call while another is open).
 */
export interface AnswerFrame {
  type: "answer";
  seq: number;
  status: "accepted" | "rejected" | "recorded" | "refused";
  message?: string;
}

export type BridgeFrame = HelloFrame | ReadyFrame | RefusedHelloFrame | CallFrame | AnswerFrame;

export function encodeFrame(frame: BridgeFrame): string {
  // JSON.stringify escapes LF inside strings: one frame is exactly one line.
  return `${JSON.stringify(frame)}\n`;
}
