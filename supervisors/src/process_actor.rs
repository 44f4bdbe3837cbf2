//! An OS process as a supervised child: one actor owns one `ProcessChild`.
//!
//! - Start: spawn the process (own process group), report its start identity to the
//!   owner's `on_started` hook (the server persists it before it could ever signal it).
//! - Ready: optionally the child must prove it is ready before a deadline, by a `Ready`
//!   message from its owner or by writing a ready line on an inherited descriptor; a child
//!   that misses the deadline is killed and the actor fails.
//! - Exit: exit code 0 is a normal exit; anything else (or a signal) is a failure, so the
//!   supervisor's restart type applies.
//! - Stop: SIGTERM to the whole group, SIGKILL after the grace, reap by exact pid. A brutal
//!   kill of the actor drops the `ProcessChild`, whose `Drop` kills and reaps the group.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::io::AsyncBufReadExt;
use tokio::task::AbortHandle;

use crate::process::{ProcessChild, ProcessSpec, StartIdentity, spawn};

/// How often the actor checks whether its process exited.
pub const EXIT_CHECK_MS: u64 = 50;
/// The longest a ready handshake may be given.
pub const READY_DEADLINE_MS_MAX: u64 = 120_000;
/// A ready line is short; anything longer is not one.
const READY_LINE_BYTES_MAX: usize = 256;

/// How the child proves it is ready.
#[derive(Debug, Clone)]
pub enum Readiness {
    /// Ready as soon as it is spawned.
    Immediate,
    /// The owner sends `ProcessMsg::Ready` before the deadline.
    Message { deadline: Duration },
    /// The child writes `line` (plus newline) on an inherited descriptor before the deadline;
    /// the spec factory returns the parent's end of it. The actor closes that end once the
    /// line arrives, so the descriptor is for the handshake only.
    Line { deadline: Duration, line: String },
}

pub type SpecFactory = Arc<dyn Fn() -> std::io::Result<(ProcessSpec, Option<OwnedFd>)> + Send + Sync>;
pub type StartedHook = Arc<dyn Fn(&StartIdentity) + Send + Sync>;

/// What a process child is started with. The factory runs at every (re)start and returns
/// the spec plus, for `Readiness::Line`, the parent's end of the ready descriptor.
#[derive(Clone)]
pub struct ProcessConfig {
    pub factory: SpecFactory,
    pub readiness: Readiness,
    pub on_started: Option<StartedHook>,
}

pub struct ProcessActor;

pub enum ProcessMsg {
    /// The owner saw the child's ready handshake.
    Ready,
    ReadyDeadline,
    CheckExit,
}

pub struct ProcessState {
    child: ProcessChild,
    ready: bool,
    timers: Vec<AbortHandle>,
}

impl Actor for ProcessActor {
    type Msg = ProcessMsg;
    type State = ProcessState;
    type Arguments = ProcessConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<ProcessMsg>,
        config: ProcessConfig,
    ) -> Result<ProcessState, ActorProcessingErr> {
        let (spec, ready_end) = (config.factory)()?;
        let child = spawn(spec)?;
        if let Some(hook) = &config.on_started {
            hook(child.identity());
        }
        let mut timers = vec![
            myself
                .send_interval(Duration::from_millis(EXIT_CHECK_MS), || ProcessMsg::CheckExit)
                .abort_handle(),
        ];
        let ready = match config.readiness {
            Readiness::Immediate => true,
            Readiness::Message { deadline } => {
                timers.push(
                    myself
                        .send_after(bounded(deadline), || ProcessMsg::ReadyDeadline)
                        .abort_handle(),
                );
                false
            }
            Readiness::Line { deadline, line } => {
                let ready_end = ready_end.ok_or("Readiness::Line needs the parent end of the ready descriptor")?;
                timers.push(
                    myself
                        .send_after(bounded(deadline), || ProcessMsg::ReadyDeadline)
                        .abort_handle(),
                );
                timers.push(tokio::spawn(watch_ready_line(ready_end, line, myself.clone())).abort_handle());
                false
            }
        };
        Ok(ProcessState { child, ready, timers })
    }

    async fn post_stop(&self, _: ActorRef<ProcessMsg>, state: &mut ProcessState) -> Result<(), ActorProcessingErr> {
        stop_timers(state);
        let grace = state.child.grace();
        let termination = state.child.terminate(grace).await?;
        tracing::debug!(pid = state.child.pid(), outcome = %termination.outcome, escalated = termination.escalated, "process stopped");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ProcessMsg>,
        message: ProcessMsg,
        state: &mut ProcessState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ProcessMsg::Ready => state.ready = true,
            ProcessMsg::ReadyDeadline if !state.ready => {
                stop_timers(state);
                state.child.kill().await?;
                return Err(format!(
                    "process {} was not ready by its handshake deadline and was killed",
                    state.child.pid()
                )
                .into());
            }
            ProcessMsg::ReadyDeadline => {}
            ProcessMsg::CheckExit => {
                let Some(outcome) = state.child.try_exit()? else {
                    return Ok(());
                };
                stop_timers(state);
                // Kill stragglers of the group and reap the leader by its exact pid.
                state.child.terminate(Duration::ZERO).await?;
                if !outcome.success() {
                    return Err(format!("process {} ended: {outcome}", state.child.pid()).into());
                }
                myself.stop(Some("exited".to_string()));
            }
        }
        Ok(())
    }
}

fn bounded(deadline: Duration) -> Duration {
    deadline.min(Duration::from_millis(READY_DEADLINE_MS_MAX))
}

fn stop_timers(state: &mut ProcessState) {
    for timer in state.timers.drain(..) {
        timer.abort();
    }
}

async fn watch_ready_line(ready_end: OwnedFd, expected: String, actor: ActorRef<ProcessMsg>) {
    let stream = std::os::unix::net::UnixStream::from(ready_end);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(stream) = tokio::net::UnixStream::from_std(stream) else {
        return;
    };
    let bounded = tokio::io::AsyncReadExt::take(stream, READY_LINE_BYTES_MAX as u64 * 16);
    let mut lines = tokio::io::BufReader::new(bounded).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.len() <= READY_LINE_BYTES_MAX && line == expected {
            let _ = actor.cast(ProcessMsg::Ready);
            return;
        }
    }
}
