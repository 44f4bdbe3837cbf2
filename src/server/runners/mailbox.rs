//! The messages of the `runners` subtree's actors, apart from the actors, so the registry,
//! the operations and the actors can all name them without importing each other.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ractor::RpcReplyPort;
use supervisors::process::ProcessChild;

use crate::server::shared::lock;
use crate::server::spawn::{capture_paths, child_mark};
use crate::store::StoreResult;
use crate::store::commands::{CommandReceipt, CommandRequest};

/// A client control that changes a live runner's run through its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunControl {
    Pause,
    Resume,
    Cancel,
}

pub enum RunnerMsg {
    /// Lines from the runner, in order (more than one when it pipelines); the reply says
    /// whether to keep reading.
    Frames(Vec<Vec<u8>>, RpcReplyPort<bool>),
    /// Pause or cancel the run as a durable client command, then stop the runner's group.
    Control(
        RunControl,
        CommandRequest,
        Option<i64>,
        RpcReplyPort<StoreResult<CommandReceipt>>,
    ),
    /// Renew the run claim while the runner works; never waits for a scheduler slot.
    RenewClaim,
    /// Check the runner's liveness and ping it.
    Ping,
    /// Its running step passed its deadline by `OVERDUE_GRACE_MS` without the runner ending
    /// it (a blocked event loop): stop it like a stalled runner; the reclaim that follows
    /// records the step `timed_out` (`store::deadlines`).
    Overdue,
    /// `READY_RECORD_WAIT_MS` passed since the runner's ready: record it alone if no
    /// proposal has yet (`messages::record_ready_alone`).
    RecordReady,
    /// The channel reader reached the channel's end; every frame before it was handled.
    ChannelClosed,
    /// The process ended `CHANNEL_DRAIN_MS` ago and its channel is still open (a descendant
    /// holds it): settle without waiting longer.
    DrainTimeout,
}

pub enum PoolMsg {
    /// A live warm runner, if one is ready (ownership passes to the caller).
    Take(RpcReplyPort<Option<WarmRunner>>),
    /// Start warm runners toward the target number (a runner ended, or the pool started).
    Refill,
    /// The demand window after the last take may have passed: back to the idle target.
    Shrink,
    /// A taken warm runner whose run was not admitted: it saw no launch and holds nothing.
    Return(Box<WarmRunner>),
    /// The startup snapshot's background build ended: the runner program that starts from
    /// it and its file, or why there is none (`runners/snapshot.rs`).
    SnapshotBuilt(Result<(crate::server::config::Program, std::path::PathBuf), String>),
}

/// One started runner process and the server's end of its channel, not yet assigned.
pub struct WarmRunner {
    pub child: ProcessChild,
    pub channel: StdUnixStream,
    pub log_stem: String,
    /// When its process was started: the pool takes and retires warm runners by age.
    pub started: std::time::Instant,
}

impl WarmRunner {
    /// Hand the process to a run: its captures are renamed after the run's runner epoch
    /// (where operators look for them).
    pub fn assign(self, logs_dir: &Path, runner_epoch: &str) -> (ProcessChild, StdUnixStream) {
        let (stdout, stderr) = capture_paths(logs_dir, runner_epoch);
        if let Err(err) = self.child.move_captures(&stdout, &stderr) {
            tracing::debug!(error = %err, "warm runner capture not renamed");
        }
        (self.child, self.channel)
    }
}

/// A runner's process, the server's end of its channel, and the mark its descendants carry.
pub type RunnerProcess = (ProcessChild, StdUnixStream, String);

/// What an admission hands the new runner actor (`admission.rs`): the launch envelope
/// recorded for it, and the warm process taken for its run, if any (handed over once; a
/// runner actor is never restarted).
#[derive(Clone)]
pub struct LaunchHandOver {
    envelope: Vec<u8>,
    warm: Arc<Mutex<Option<WarmRunner>>>,
}

impl LaunchHandOver {
    pub fn new(envelope: Vec<u8>, warm: Option<WarmRunner>) -> Self {
        Self {
            envelope,
            warm: Arc::new(Mutex::new(warm)),
        }
    }

    /// The launch envelope, encoded as recorded (its hash is in the launch's row).
    pub fn envelope(&self) -> &[u8] {
        &self.envelope
    }

    /// The warm process, assigned to `runner_epoch` (its captures renamed), with the mark its
    /// descendants carry; `None` after the first call, or when the pool had none.
    pub fn take_warm(&self, logs_dir: &Path, runner_epoch: &str) -> Option<RunnerProcess> {
        let warm = lock(&self.warm).take()?;
        let mark = child_mark(&warm.log_stem);
        let (child, channel) = warm.assign(logs_dir, runner_epoch);
        Some((child, channel, mark))
    }
}
