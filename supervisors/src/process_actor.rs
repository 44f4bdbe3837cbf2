//! An OS process as a supervised child: one actor owns one `ProcessChild`.
//!
//! - Start: spawn the process (own process group) from the config's factory, or adopt one
//!   already started (a pre-started, unassigned process handed over by its previous owner).
//!   The start identity goes to the owner's `on_started` hook (the server persists it before
//!   it could ever signal it) and the pid and process group to the tree's details.
//! - Ready: optionally the child must prove it is ready before a deadline, by a `Ready`
//!   message from its owner or by writing a ready line on an inherited descriptor; a child
//!   that misses the deadline is killed and the actor fails.
//! - Exit: exit code 0 is a normal exit; anything else (or a signal) is a failure, so the
//!   supervisor's restart type applies. Either way the `on_exit` hook learns how the process
//!   ended before the actor stops, so an owner that links to this actor can settle it.
//! - Stop: SIGTERM to the whole group, SIGKILL after the grace, reap by exact pid; the owner
//!   can ask for that with `Terminate` and get the exit status back. A brutal kill of the
//!   actor drops the `ProcessChild`, whose `Drop` kills and reaps the group.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::io::AsyncBufReadExt;
use tokio::task::AbortHandle;

use crate::process::{ExitOutcome, ProcessChild, ProcessSpec, StartIdentity, spawn};
use crate::snapshot::{DetailsCell, ProcessInfo};

/// How often the actor checks whether its process exited when no pidfd tells it.
pub const EXIT_CHECK_MS: u64 = 50;
/// With a pidfd the exit wakes the actor; this slow check is only a backstop, so an idle
/// supervised process costs the server (almost) no wake-ups.
pub const EXIT_CHECK_BACKSTOP_MS: u64 = 10_000;
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

/// Why the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// It exited (or was killed) on its own.
    Exited,
    /// It missed its ready deadline and was killed.
    ReadyDeadlineMissed,
    /// Its owner or its supervisor stopped it.
    Terminated,
}

/// How the process ended: told to the `on_exit` hook exactly once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEnd {
    /// The leader's exit status, when it could be read.
    pub outcome: Option<ExitOutcome>,
    pub cause: EndCause,
}

pub type SpecFactory = Arc<dyn Fn() -> std::io::Result<(ProcessSpec, Option<OwnedFd>)> + Send + Sync>;
pub type StartedHook = Arc<dyn Fn(&StartIdentity) + Send + Sync>;
pub type ExitHook = Arc<dyn Fn(ProcessEnd) + Send + Sync>;
/// A process started by someone else, handed to the next start of this actor (once).
pub type AdoptSlot = Arc<Mutex<Option<ProcessChild>>>;

/// What a process child is started with. The factory runs at every (re)start and returns
/// the spec plus, for `Readiness::Line`, the parent's end of the ready descriptor; a start
/// that finds a process in `adopt` takes that one instead.
#[derive(Clone)]
pub struct ProcessConfig {
    pub factory: SpecFactory,
    pub readiness: Readiness,
    pub on_started: Option<StartedHook>,
    pub on_exit: Option<ExitHook>,
    /// Where the actor shows its pid and process group in the tree.
    pub details: Option<DetailsCell>,
    pub adopt: Option<AdoptSlot>,
}

impl ProcessConfig {
    pub fn new(
        factory: impl Fn() -> std::io::Result<(ProcessSpec, Option<OwnedFd>)> + Send + Sync + 'static,
        readiness: Readiness,
    ) -> Self {
        Self {
            factory: Arc::new(factory),
            readiness,
            on_started: None,
            on_exit: None,
            details: None,
            adopt: None,
        }
    }

    /// Own a process that is already running (its ready handshake, if any, still applies).
    /// A restart of an adopted child has nothing to adopt and fails.
    pub fn adopt(child: ProcessChild, readiness: Readiness) -> Self {
        let mut config = Self::new(
            || Err(std::io::Error::other("an adopted process cannot be started again")),
            readiness,
        );
        config.adopt = Some(Arc::new(Mutex::new(Some(child))));
        config
    }

    pub fn on_started(mut self, hook: impl Fn(&StartIdentity) + Send + Sync + 'static) -> Self {
        self.on_started = Some(Arc::new(hook));
        self
    }

    pub fn on_exit(mut self, hook: impl Fn(ProcessEnd) + Send + Sync + 'static) -> Self {
        self.on_exit = Some(Arc::new(hook));
        self
    }

    pub fn with_details(mut self, details: DetailsCell) -> Self {
        self.details = Some(details);
        self
    }
}

pub struct ProcessActor;

pub enum ProcessMsg {
    /// The owner saw the child's ready handshake.
    Ready,
    ReadyDeadline,
    CheckExit,
    /// The process's start identity.
    Identity(RpcReplyPort<StartIdentity>),
    /// Stop the whole group (SIGTERM, SIGKILL after `grace`), answer its exit status, then
    /// stop this actor normally.
    Terminate(Duration, RpcReplyPort<Option<ExitOutcome>>),
}

pub struct ProcessState {
    child: ProcessChild,
    ready: bool,
    timers: Vec<AbortHandle>,
    on_exit: Option<ExitHook>,
    details: Option<DetailsCell>,
    /// The hook was told; nothing more to report.
    ended: bool,
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
        let (child, ready_end) = start_process(&config)?;
        if let Some(hook) = &config.on_started {
            hook(child.identity());
        }
        if let Some(details) = &config.details {
            details.set_processes([ProcessInfo {
                pid: child.pid(),
                process_group: child.pgid(),
            }]);
        }
        let mut timers = exit_checks(&myself, &child);
        let ready = match config.readiness {
            Readiness::Immediate => true,
            Readiness::Message { deadline } => {
                timers.push(ready_deadline(&myself, deadline));
                false
            }
            Readiness::Line { deadline, line } => {
                let ready_end = ready_end.ok_or("Readiness::Line needs the parent end of the ready descriptor")?;
                timers.push(ready_deadline(&myself, deadline));
                timers.push(tokio::spawn(watch_ready_line(ready_end, line, myself.clone())).abort_handle());
                false
            }
        };
        Ok(ProcessState {
            child,
            ready,
            timers,
            on_exit: config.on_exit,
            details: config.details,
            ended: false,
        })
    }

    async fn post_stop(&self, _: ActorRef<ProcessMsg>, state: &mut ProcessState) -> Result<(), ActorProcessingErr> {
        stop_timers(state);
        let grace = state.child.grace();
        let termination = state.child.terminate(grace).await;
        let outcome = termination.as_ref().ok().map(|t| t.outcome);
        end(state, outcome, EndCause::Terminated);
        let termination = termination?;
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
                let killed = state.child.kill().await.ok().map(|t| t.outcome);
                end(state, killed, EndCause::ReadyDeadlineMissed);
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
                end(state, Some(outcome), EndCause::Exited);
                if !outcome.success() {
                    return Err(format!("process {} ended: {outcome}", state.child.pid()).into());
                }
                myself.stop(Some("exited".to_string()));
            }
            ProcessMsg::Identity(reply) => {
                let _ = reply.send(state.child.identity().clone());
            }
            ProcessMsg::Terminate(grace, reply) => {
                stop_timers(state);
                let outcome = state.child.terminate(grace).await.ok().map(|t| t.outcome);
                end(state, outcome, EndCause::Terminated);
                let _ = reply.send(outcome);
                myself.stop(Some("terminated".to_string()));
            }
        }
        Ok(())
    }
}

/// The adopted process, if one waits in the slot; else a new one from the factory.
fn start_process(config: &ProcessConfig) -> Result<(ProcessChild, Option<OwnedFd>), ActorProcessingErr> {
    let adopted = config
        .adopt
        .as_ref()
        .and_then(|slot| slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take());
    if let Some(child) = adopted {
        return Ok((child, None));
    }
    let (spec, ready_end) = (config.factory)()?;
    Ok((spawn(spec)?, ready_end))
}

/// Tell the hook once, and stop showing the process in the tree.
fn end(state: &mut ProcessState, outcome: Option<ExitOutcome>, cause: EndCause) {
    if state.ended {
        return;
    }
    state.ended = true;
    if let Some(details) = &state.details {
        details.set_processes([]);
    }
    if let Some(hook) = &state.on_exit {
        hook(ProcessEnd { outcome, cause });
    }
}

/// The exit watch (a pidfd) with a slow backstop, or a fast poll without a pidfd.
fn exit_checks(myself: &ActorRef<ProcessMsg>, child: &ProcessChild) -> Vec<AbortHandle> {
    let Some(exited) = child.exit_watch() else {
        let poll = myself.send_interval(Duration::from_millis(EXIT_CHECK_MS), || ProcessMsg::CheckExit);
        return vec![poll.abort_handle()];
    };
    let actor = myself.clone();
    let watch = tokio::spawn(async move {
        exited.await;
        let _ = actor.cast(ProcessMsg::CheckExit);
    });
    let backstop = myself.send_interval(Duration::from_millis(EXIT_CHECK_BACKSTOP_MS), || ProcessMsg::CheckExit);
    vec![watch.abort_handle(), backstop.abort_handle()]
}

fn ready_deadline(myself: &ActorRef<ProcessMsg>, deadline: Duration) -> AbortHandle {
    let bounded = deadline.min(Duration::from_millis(READY_DEADLINE_MS_MAX));
    myself.send_after(bounded, || ProcessMsg::ReadyDeadline).abort_handle()
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
