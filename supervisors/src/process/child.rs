//! Spawning one child in its own process group, waiting without reaping, terminating, reaping.

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;

use super::capture::{self, CaptureReport, CaptureTarget, StreamCapture};
use super::error::ProcessError;
use super::identity::{self, StartIdentity};
use super::launch;
use super::orphans;
use super::spec::ProcessSpec;
use super::sys::{self, GroupReap, WaitTarget};
use super::{
    DROP_REAP_MS_MAX, EXIT_POLL_MS, EXIT_RECHECK_MS, GRACE_MS_MAX, GROUP_REAP_MS_MAX, GROUP_REAP_POLL_MS,
    KILL_WAIT_MS_MAX,
};

/// How the group leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitOutcome {
    /// Exited normally with this code.
    Exited(i32),
    /// Killed by this signal number.
    Signaled(i32),
}

impl ExitOutcome {
    /// The exit code, if it exited normally.
    pub fn code(self) -> Option<i32> {
        match self {
            Self::Exited(code) => Some(code),
            Self::Signaled(_) => None,
        }
    }

    /// The terminating signal, if it was killed.
    pub fn signal(self) -> Option<i32> {
        match self {
            Self::Exited(_) => None,
            Self::Signaled(sig) => Some(sig),
        }
    }

    /// Exited with code 0.
    pub fn success(self) -> bool {
        self == Self::Exited(0)
    }
}

impl fmt::Display for ExitOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "exited with code {code}"),
            Self::Signaled(sig) => write!(f, "killed by signal {sig}"),
        }
    }
}

/// How a child ended after [`ProcessChild::terminate`] or [`ProcessChild::kill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Termination {
    /// The leader's exit status.
    pub outcome: ExitOutcome,
    /// `SIGKILL` had to be sent while the leader was still running.
    pub escalated: bool,
}

enum Waiter {
    PidFd(AsyncFd<OwnedFd>),
    Poll,
}

/// One running (or exited but not yet reaped) child process and its process group.
///
/// The leader is never reaped before [`terminate`](Self::terminate) or [`kill`](Self::kill) (or
/// `Drop`), so its pid and process group id stay reserved while the group may be signaled.
pub struct ProcessChild {
    pid: i32,
    identity: StartIdentity,
    program_name: String,
    grace: Duration,
    waiter: Waiter,
    exit: Option<ExitOutcome>,
    termination: Option<Termination>,
    /// Someone else reaped the leader (`ECHILD`): its pid may be reused, so never signal it again.
    lost: bool,
    stdout_task: Option<JoinHandle<StreamCapture>>,
    stderr_task: Option<JoinHandle<StreamCapture>>,
    capture: Option<CaptureReport>,
    stdout_target: Option<CaptureTarget>,
    stderr_target: Option<CaptureTarget>,
}

impl fmt::Debug for ProcessChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessChild")
            .field("pid", &self.pid)
            .field("program", &self.program_name)
            .field("pidfd", &self.uses_pidfd())
            .field("exit", &self.exit)
            .field("termination", &self.termination)
            .finish_non_exhaustive()
    }
}

/// Starts `spec.program` as the leader of a new process group.
///
/// Must be called inside a Tokio runtime with IO and time enabled (capture and exit watching run on
/// it). Stdin is null; stdout/stderr go to the capture files or are discarded.
pub fn spawn(mut spec: ProcessSpec) -> Result<ProcessChild, ProcessError> {
    tokio::runtime::Handle::try_current().map_err(|_| ProcessError::NoRuntime)?;
    spec.validate()?;
    let program_name = program_file_name(&spec.program);
    let stdout_target = prepare_capture(spec.stdout_path.as_deref())?;
    let stderr_target = prepare_capture(spec.stderr_path.as_deref())?;
    // Recorded as owned under the orphan reaper's lock, so it can never reap this leader.
    let mut owned = orphans::owned();
    let started = launch::start(&mut spec, stdout_target.is_some(), stderr_target.is_some())?;
    let pid = started.pid;
    owned.insert(pid);
    drop(owned);
    let waiter = Waiter::open(pid);
    let identity = identity::read_identity(pid).inspect_err(|_| kill_and_reap_blocking(pid))?;
    tracing::debug!(pid, program = %program_name, pidfd = matches!(waiter, Waiter::PidFd(_)), "spawned child");
    let bytes_max = spec.capture_bytes_max;
    let stdout_task = attach_capture(started.stdout, stdout_target.clone(), bytes_max, pid)?;
    let stderr_task = attach_capture(started.stderr, stderr_target.clone(), bytes_max, pid)?;
    Ok(ProcessChild {
        pid,
        identity,
        program_name,
        grace: spec.grace,
        waiter,
        exit: None,
        termination: None,
        lost: false,
        stdout_task,
        stderr_task,
        capture: None,
        stdout_target,
        stderr_target,
    })
}

fn prepare_capture(path: Option<&Path>) -> Result<Option<CaptureTarget>, ProcessError> {
    path.map(CaptureTarget::prepare).transpose()
}

fn program_file_name(program: &Path) -> String {
    program
        .file_name()
        .map_or_else(|| "<program>".to_owned(), |name| name.to_string_lossy().into_owned())
}

fn attach_capture(
    pipe: Option<OwnedFd>,
    target: Option<CaptureTarget>,
    bytes_max: u64,
    pid: i32,
) -> Result<Option<JoinHandle<StreamCapture>>, ProcessError> {
    let (Some(pipe), Some(target)) = (pipe, target) else {
        return Ok(None);
    };
    let reader = tokio::process::ChildStdout::from_std(std::process::ChildStdout::from(pipe)).map_err(|e| {
        kill_and_reap_blocking(pid);
        ProcessError::os(pid, "registering output pipe", e)
    })?;
    Ok(Some(capture::start_capture(reader, target, bytes_max)))
}

impl Waiter {
    fn open(pid: i32) -> Self {
        let Some(fd) = sys::open_pidfd(pid) else {
            return Self::Poll;
        };
        // SAFETY: an `OwnedFd` stays open and always returns the same descriptor until dropped, and
        // the `AsyncFd` owns it for its whole lifetime.
        match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
            Ok(fd) => Self::PidFd(fd),
            Err(error) => {
                tracing::debug!(pid, error = %error.into_parts().1, "pidfd not pollable; polling for exit");
                Self::Poll
            }
        }
    }
}

impl ProcessChild {
    /// The leader's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The process group id (equal to the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.pid
    }

    /// The leader's start identity, recorded right after spawn.
    pub fn identity(&self) -> &StartIdentity {
        &self.identity
    }

    /// The default termination grace from the spec.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Whether exit is watched through a pidfd (otherwise by polling).
    pub fn uses_pidfd(&self) -> bool {
        matches!(self.waiter, Waiter::PidFd(_))
    }

    /// Stops using the pidfd and watches the leader by polling `waitid(P_PID)` every
    /// [`EXIT_POLL_MS`] instead (the fallback for kernels without pidfd; useful to test it).
    pub fn use_polling(&mut self) {
        self.waiter = Waiter::Poll;
    }

    /// A future that resolves once the leader has exited, for an owner that cannot hold
    /// `&mut self` while it waits (an actor handling other messages). It watches a duplicate
    /// of the pidfd, so it borrows nothing; `None` when exit is polled (no pidfd), and then the
    /// owner polls [`try_exit`](Self::try_exit) itself. The leader stays unreaped until its
    /// owner reaps it, so the duplicate can never name another process.
    pub fn exit_watch(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let Waiter::PidFd(fd) = &self.waiter else {
            return None;
        };
        let duplicate = fd.get_ref().try_clone().ok()?;
        // Registration reports a pidfd that is already readable (exited) at once.
        // SAFETY: as in `Waiter::open`: the `AsyncFd` owns the duplicate for its whole life.
        let watched = unsafe { AsyncFd::register_with_interest(duplicate, Interest::READABLE) }.ok()?;
        Some(async move {
            let _ = watched.readable().await;
        })
    }

    /// Whether the leader has been reaped (after terminate/kill).
    pub fn is_reaped(&self) -> bool {
        self.termination.is_some()
    }

    fn target(&self) -> WaitTarget<'_> {
        match &self.waiter {
            Waiter::PidFd(fd) => WaitTarget::PidFd(fd.get_ref().as_fd()),
            Waiter::Poll => WaitTarget::Pid(self.pid),
        }
    }

    /// Non-blocking: the leader's exit status if it has exited (it stays unreaped).
    pub fn try_exit(&mut self) -> Result<Option<ExitOutcome>, ProcessError> {
        if let Some(outcome) = self.exit {
            return Ok(Some(outcome));
        }
        let peeked = match sys::peek_exit(self.target()) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && self.uses_pidfd() => {
                // Kernel has pidfd_open but not waitid(P_PIDFD) (Linux 5.3): fall back to the pid.
                self.waiter = Waiter::Poll;
                sys::peek_exit(self.target())
            }
            other => other,
        };
        match peeked {
            Ok(exit) => self.exit = exit,
            Err(e) => {
                if e.raw_os_error() == Some(libc::ECHILD) {
                    tracing::warn!(pid = self.pid, program = %self.program_name, "leader was reaped elsewhere");
                    self.lost = true;
                    orphans::disown(self.pid);
                }
                return Err(ProcessError::os(self.pid, "waitid(WNOWAIT)", e));
            }
        }
        Ok(self.exit)
    }

    /// Waits until the leader exits, leaving it unreaped (a zombie) so the pid/pgid stay reserved.
    /// Cancel-safe.
    pub async fn wait_exit(&mut self) -> Result<ExitOutcome, ProcessError> {
        loop {
            if let Some(outcome) = self.try_exit()? {
                return Ok(outcome);
            }
            self.wait_exit_signal().await?;
        }
    }

    async fn wait_exit_signal(&self) -> Result<(), ProcessError> {
        let Waiter::PidFd(fd) = &self.waiter else {
            tokio::time::sleep(Duration::from_millis(EXIT_POLL_MS)).await;
            return Ok(());
        };
        let recheck = Duration::from_millis(EXIT_RECHECK_MS);
        match tokio::time::timeout(recheck, fd.readable()).await {
            Err(_elapsed) => Ok(()),
            Ok(Ok(mut guard)) => {
                // Readable means exited; if the next check disagrees, wait for the next edge.
                if sys::peek_exit(WaitTarget::PidFd(fd.get_ref().as_fd())).is_ok_and(|o| o.is_none()) {
                    guard.clear_ready();
                }
                Ok(())
            }
            Ok(Err(e)) => Err(ProcessError::os(self.pid, "polling pidfd", e)),
        }
    }

    /// Terminates the whole group: `SIGTERM`, wait up to `grace` (clamped to [`GRACE_MS_MAX`]) for
    /// the leader, then `SIGKILL`; after the leader exited, `SIGKILL` the group once more for
    /// stragglers, then reap the leader and any reparented group members. Idempotent.
    pub async fn terminate(&mut self, grace: Duration) -> Result<Termination, ProcessError> {
        if let Some(done) = self.termination {
            return Ok(done);
        }
        let grace = grace.min(Duration::from_millis(GRACE_MS_MAX));
        self.signal_group(Signal::TERM);
        let escalated = match tokio::time::timeout(grace, self.wait_exit()).await {
            Ok(outcome) => {
                outcome?;
                false
            }
            Err(_elapsed) => self.escalate().await?,
        };
        self.finish(escalated).await
    }

    /// Brutal kill: `SIGKILL` the whole group immediately, then reap. Idempotent.
    pub async fn kill(&mut self) -> Result<Termination, ProcessError> {
        if let Some(done) = self.termination {
            return Ok(done);
        }
        let escalated = if self.try_exit()?.is_some() {
            false
        } else {
            self.escalate().await?
        };
        self.finish(escalated).await
    }

    /// Sends `SIGKILL` to the group and waits (bounded) for the leader. Returns whether the leader
    /// was still running when killed.
    async fn escalate(&mut self) -> Result<bool, ProcessError> {
        if self.try_exit()?.is_some() {
            return Ok(false);
        }
        tracing::debug!(pid = self.pid, program = %self.program_name, "escalating to SIGKILL");
        self.signal_group(Signal::KILL);
        let bound = Duration::from_millis(KILL_WAIT_MS_MAX);
        match tokio::time::timeout(bound, self.wait_exit()).await {
            Ok(outcome) => outcome.map(|_| true),
            Err(_elapsed) => Err(ProcessError::StillRunning {
                pid: self.pid,
                waited_ms: KILL_WAIT_MS_MAX,
            }),
        }
    }

    /// Best effort: a failure (e.g. a member changed credentials) is logged, and the leader is still
    /// waited for and reaped.
    fn signal_group(&self, signal: Signal) {
        if self.lost {
            return;
        }
        if let Err(error) = sys::kill_group(self.pid, signal) {
            tracing::warn!(pid = self.pid, program = %self.program_name, %error, "signaling the group failed");
        }
    }

    /// The leader has exited (unreaped): kill stragglers, reap the leader, then reap the group.
    async fn finish(&mut self, escalated: bool) -> Result<Termination, ProcessError> {
        self.signal_group(Signal::KILL);
        // Reaped and disowned under the reaper's lock: no spawn can reuse the pid in between.
        let reaped = {
            let mut owned = orphans::owned();
            let reaped = sys::reap_exit(self.target());
            owned.remove(&self.pid);
            reaped
        };
        let outcome = reaped
            .map_err(|e| ProcessError::os(self.pid, "waitid(reap)", e))?
            .or(self.exit)
            .ok_or_else(|| ProcessError::os(self.pid, "waitid(reap)", std::io::ErrorKind::WouldBlock))?;
        let termination = Termination { outcome, escalated };
        self.termination = Some(termination);
        reap_group(self.pid).await;
        tracing::debug!(pid = self.pid, program = %self.program_name, %outcome, escalated, "child reaped");
        Ok(termination)
    }

    /// Capture to `stdout` and `stderr` from now on (streams that were captured): a file
    /// already created is renamed there, one not created yet will be created there. Used to
    /// name a process started ahead of need after the work it was given.
    pub fn move_captures(&self, stdout: &Path, stderr: &Path) -> std::io::Result<()> {
        if let Some(target) = &self.stdout_target {
            target.move_to(stdout)?;
        }
        if let Some(target) = &self.stderr_target {
            target.move_to(stderr)?;
        }
        Ok(())
    }

    /// Waits (at most `limit`) for both capture tasks to reach end of file and flush. A stream that
    /// is still open afterwards (a descendant escaped the group and holds the pipe) is abandoned and
    /// reported with `complete == false`. Call after the child ended.
    pub async fn wait_capture(&mut self, limit: Duration) -> CaptureReport {
        if let Some(report) = self.capture {
            return report;
        }
        let deadline = tokio::time::Instant::now() + limit;
        let report = CaptureReport {
            stdout: join_capture(self.stdout_task.take(), deadline).await,
            stderr: join_capture(self.stderr_task.take(), deadline).await,
        };
        self.capture = Some(report);
        report
    }
}

async fn join_capture(
    task: Option<JoinHandle<StreamCapture>>,
    deadline: tokio::time::Instant,
) -> Option<StreamCapture> {
    let mut task = task?;
    match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(Ok(report)) => Some(report),
        Ok(Err(_join_error)) => Some(StreamCapture::default()),
        Err(_elapsed) => {
            task.abort();
            Some(StreamCapture::default())
        }
    }
}

/// Reaps reparented members of `pgid` that are our children (we are a subreaper), bounded in time.
/// Public for groups this process signalled but did not spawn (e.g. a runner's registered
/// child, reparented to us when the runner died).
pub async fn reap_group(pgid: i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(GROUP_REAP_MS_MAX);
    loop {
        match sys::reap_group_once(pgid) {
            GroupReap::Reaped => continue,
            GroupReap::Done => return,
            GroupReap::Pending if tokio::time::Instant::now() >= deadline => {
                tracing::debug!(pgid, "group members still running after reap bound");
                return;
            }
            GroupReap::Pending => tokio::time::sleep(Duration::from_millis(GROUP_REAP_POLL_MS)).await,
        }
    }
}

/// Synchronous, bounded: `SIGKILL` the group and reap leader and group; hands leftovers to a thread.
fn kill_and_reap_blocking(pid: i32) {
    if let Err(error) = sys::kill_group(pid, Signal::KILL) {
        tracing::debug!(pid, %error, "SIGKILL to group failed");
    }
    let deadline = Instant::now() + Duration::from_millis(DROP_REAP_MS_MAX);
    let poll = Duration::from_millis(GROUP_REAP_POLL_MS);
    let mut leader_reaped = false;
    while Instant::now() < deadline {
        if !leader_reaped {
            // Ok(None): still running. Ok(Some): reaped now. Err: not our child (already reaped).
            let mut owned = orphans::owned();
            leader_reaped = !matches!(sys::reap_exit(WaitTarget::Pid(pid)), Ok(None));
            if leader_reaped {
                owned.remove(&pid);
            }
        }
        if leader_reaped {
            match sys::reap_group_once(pid) {
                GroupReap::Done => return,
                GroupReap::Reaped => continue,
                GroupReap::Pending => {}
            }
        }
        std::thread::sleep(poll);
    }
    reap_in_background(pid, leader_reaped);
}

/// How often a background reaper looks for its killed leader's exit.
const BACKGROUND_REAP_POLL_MS: u64 = 50;

fn reap_in_background(pid: i32, leader_reaped: bool) {
    let spawned = std::thread::Builder::new()
        .name("process-reaper".to_owned())
        .spawn(move || {
            // Polled under the reaper's lock (never a blocking wait while holding it).
            if !leader_reaped {
                loop {
                    let mut owned = orphans::owned();
                    if !matches!(sys::reap_exit(WaitTarget::Pid(pid)), Ok(None)) {
                        owned.remove(&pid);
                        break;
                    }
                    drop(owned);
                    std::thread::sleep(Duration::from_millis(BACKGROUND_REAP_POLL_MS));
                }
            }
            let deadline = Instant::now() + Duration::from_millis(GROUP_REAP_MS_MAX);
            while sys::reap_group_once(pid) != GroupReap::Done && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(GROUP_REAP_POLL_MS));
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(pid, %error, "could not start reaper thread; child may stay a zombie");
    }
}

impl Drop for ProcessChild {
    fn drop(&mut self) {
        if self.termination.is_some() || self.lost {
            return;
        }
        tracing::debug!(pid = self.pid, program = %self.program_name, "dropping live child: killing its group");
        kill_and_reap_blocking(self.pid);
    }
}
