//! The private runner channel (server ⇄ one runner child, on an inherited socket, fd 3):
//! canonical frames of at most 1 MiB, like the client socket.
//!
//! 1. server → runner: the launch envelope (`pi-workflows.worker-launch.v1`);
//! 2. runner → server: a `runner.ready` message before the startup deadline;
//! 3. server → runner: exactly one command (`start`, `resume`, `continue`, `restart`);
//! 4. runner → server: messages, each answered by one response with the same message ID.
//!
//! Every runner message carries the run ID, generation and runner epoch; the server checks
//! them before it reads the payload. A stale runner gets one `claimLost` answer and must exit.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::wire_enum::wire_enum;

pub const LAUNCH_SCHEMA: &str = "pi-workflows.worker-launch.v1";
pub const COMMAND_SCHEMA: &str = "pi-workflows.runner-command.v1";
pub const MESSAGE_SCHEMA: &str = "pi-workflows.runner-message.v1";
pub const RESPONSE_SCHEMA: &str = "pi-workflows.runner-response.v1";
/// A liveness ping from the server (`{"ping": N, "schema": …}`); the runner answers it from
/// its event loop at once with a pong carrying the same `N`. Neither is fenced or receipted:
/// they travel on the runner's own private channel and change nothing durable.
pub const PING_SCHEMA: &str = "pi-workflows.runner-ping.v1";
pub const PONG_SCHEMA: &str = "pi-workflows.runner-pong.v1";

/// A ping frame.
pub fn ping(number: u64) -> serde_json::Value {
    serde_json::json!({"ping": number, "schema": PING_SCHEMA})
}

/// The number a pong frame answers, if the frame is a pong.
pub fn pong_of(frame: &Map<String, Value>) -> Option<u64> {
    (frame.get("schema").and_then(Value::as_str) == Some(PONG_SCHEMA))
        .then(|| frame.get("pong").and_then(Value::as_u64))
        .flatten()
}
pub const RUNNER_PROTOCOL_VERSION: u32 = 1;
/// The descriptor number of the runner channel in the child.
pub const RUNNER_CHANNEL_FD: i32 = 3;

/// The first frame the server writes to a runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Launch {
    pub schema: String,
    pub run_id: String,
    pub generation: u64,
    pub runner_epoch: String,
    pub project_path: String,
    pub workflow_source: Value,
    pub definition_digest: String,
    pub input_hash: String,
    pub protocol_version: u32,
    /// How long the runner may load the workflow after `runner.ready`, which it sends at once
    /// (the server's ready deadline, carried on; docs/RUNNER-PROTOCOL.md).
    pub load_deadline_ms: u64,
}

wire_enum! {
    /// The one explicit command after `runner.ready`; the runner never infers it.
    pub enum CommandKind {
        Start = "start",
        Resume = "resume",
        /// Continue after a checkpoint; names its waiting checkpoint parent.
        Continue = "continue",
        /// Begin a new run from the workflow start.
        Restart = "restart",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Command {
    pub schema: String,
    pub command: CommandKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_attempt_id: Option<String>,
    pub payload: Map<String, Value>,
}

wire_enum! {
    /// Every kind of message a runner may send (spec "Runner protocol").
    pub enum MessageKind {
        RunnerReady = "runner.ready",
        NodeStarted = "node.started",
        NodeUpdate = "node.update",
        NodeFinished = "node.finished",
        NodeFailed = "node.failed",
        /// The results of pure compute nodes that were never started, in order (a runner
        /// gathers the ones of one event-loop tick): each recorded already settled.
        NodesFinished = "nodes.finished",
        RunParked = "run.parked",
        RunFinished = "run.finished",
        InteractionRequested = "interaction.requested",
        InteractionAccepted = "interaction.accepted",
        InteractionRejected = "interaction.rejected",
        NotificationRequested = "notification.requested",
        PresentationRequested = "presentation.requested",
        EffectReserve = "effect.reserve",
        EffectSettle = "effect.settle",
        RunnerProgress = "runner.progress",
        RunnerExiting = "runner.exiting",
        /// A read, not a state change: one part of content the server advertised to this
        /// runner (a run state above the frame limit). No receipt is stored.
        ContentRead = "content.read",
    }
}

/// A message from a runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Message {
    pub schema: String,
    pub launch_schema: String,
    /// Stable across retries of the same message: a repeat gets the same answer.
    pub message_id: String,
    pub kind: MessageKind,
    pub run_id: String,
    pub generation: u64,
    pub runner_epoch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
    pub payload: Map<String, Value>,
}

/// The most results one `nodes.finished` message may carry.
pub const PURE_RESULTS_MAX: usize = 32;

wire_enum! {
    /// How a pure node ended.
    pub enum PureOutcome {
        Completed = "completed",
        Failed = "failed",
    }
}

/// One pure compute node's start fields and outcome in a `nodes.finished` payload
/// (`{"results": [...]}`); `value` is its output, or its `{code, message}` error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PureResult {
    pub attempt_id: String,
    pub node_id: String,
    pub node_path: String,
    pub visit: i64,
    pub node_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_change_number: Option<i64>,
    pub outcome: PureOutcome,
    pub value: Value,
}

wire_enum! {
    pub enum ResponseOutcome {
        Accepted = "accepted",
        Adopted = "adopted",
        Rejected = "rejected",
        ClaimLost = "claimLost",
    }
}

/// The server's answer to one runner message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Response {
    pub schema: String,
    pub message_id: String,
    pub outcome: ResponseOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunnerError>,
    /// A newer settings version (`{changeNumber, value}`) than the one the message's start
    /// fields named: the runner gives it to the nodes it starts next. Not part of the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerError {
    pub code: String,
    pub message: String,
}

/// The fencing fields of a message, read before anything else of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fencing {
    pub run_id: String,
    pub generation: u64,
    pub runner_epoch: String,
    pub message_id: String,
}

/// Read only the fencing fields of a decoded frame (the payload is not touched).
pub fn fencing_of(frame: &Map<String, Value>) -> Option<Fencing> {
    Some(Fencing {
        run_id: frame.get("runId")?.as_str()?.to_string(),
        generation: frame.get("generation")?.as_u64()?,
        runner_epoch: frame.get("runnerEpoch")?.as_str()?.to_string(),
        message_id: frame.get("messageId")?.as_str()?.to_string(),
    })
}

impl Response {
    pub fn new(message_id: &str, outcome: ResponseOutcome) -> Self {
        Self {
            schema: RESPONSE_SCHEMA.to_string(),
            message_id: message_id.to_string(),
            outcome,
            revision: None,
            result: None,
            error: None,
            settings: None,
        }
    }

    pub fn with_error(mut self, code: &str, message: &str) -> Self {
        self.error = Some(RunnerError {
            code: code.to_string(),
            message: message.to_string(),
        });
        self
    }
}
