//! Thin, safe wrappers around the system calls used by process supervision.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Rlimit, Signal, WaitId, WaitIdOptions, WaitIdStatus, WaitOptions};

use super::child::ExitOutcome;
use super::error::ProcessError;
use super::spec::ResourceLimit;

/// Which exact child a wait refers to.
#[derive(Clone, Copy)]
pub(crate) enum WaitTarget<'a> {
    PidFd(BorrowedFd<'a>),
    Pid(i32),
}

/// Result of one non-blocking attempt to reap a member of a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupReap {
    /// One member was reaped; try again.
    Reaped,
    /// Children in the group exist but none has exited yet.
    Pending,
    /// No child of ours is left in the group.
    Done,
}

/// Marks the calling process as a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphaned descendants
/// are reparented to it instead of init, so their process groups can be reaped by their owners.
pub fn set_child_subreaper() -> Result<(), ProcessError> {
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))
        .map_err(|e| ProcessError::os(me.as_raw_nonzero().get(), "prctl(PR_SET_CHILD_SUBREAPER)", e))
}

fn positive_pid(raw: i32) -> io::Result<Pid> {
    // Never 0 or 1: kill(0)/kill(-1) would hit our own group or every process.
    if raw <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "refusing pid <= 1"));
    }
    Pid::from_raw(raw).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Sends `sig` to every member of process group `pgid`. `Ok(false)` when the group does not exist.
pub(crate) fn kill_group(pgid: i32, sig: Signal) -> io::Result<bool> {
    match rustix::process::kill_process_group(positive_pid(pgid)?, sig) {
        Ok(()) => Ok(true),
        Err(Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Opens a pidfd for `pid`; `None` when the kernel (or a sandbox) does not provide it.
pub(crate) fn open_pidfd(pid: i32) -> Option<OwnedFd> {
    let pid = positive_pid(pid).ok()?;
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        Err(errno) => {
            tracing::debug!(pid = pid.as_raw_nonzero().get(), %errno, "pidfd_open unavailable; polling for exit");
            None
        }
    }
}

fn wait_target(target: WaitTarget<'_>, options: WaitIdOptions) -> io::Result<Option<WaitIdStatus>> {
    let result = match target {
        WaitTarget::PidFd(fd) => rustix::process::waitid(WaitId::PidFd(fd.as_fd()), options),
        WaitTarget::Pid(pid) => rustix::process::waitid(WaitId::Pid(positive_pid(pid)?), options),
    };
    result.map_err(Into::into)
}

fn outcome_of(status: Option<WaitIdStatus>) -> Option<ExitOutcome> {
    let status = status?;
    if let Some(code) = status.exit_status() {
        return Some(ExitOutcome::Exited(code));
    }
    status.terminating_signal().map(ExitOutcome::Signaled)
}

/// Has the target exited? Leaves it unreaped (`WNOWAIT`), never blocks.
pub(crate) fn peek_exit(target: WaitTarget<'_>) -> io::Result<Option<ExitOutcome>> {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    wait_target(target, options).map(outcome_of)
}

/// Reaps the target if it has exited, never blocks.
pub(crate) fn reap_exit(target: WaitTarget<'_>) -> io::Result<Option<ExitOutcome>> {
    wait_target(target, WaitIdOptions::EXITED | WaitIdOptions::NOHANG).map(outcome_of)
}

/// Reaps at most one exited child of ours that belongs to process group `pgid` (never any other).
pub(crate) fn reap_group_once(pgid: i32) -> GroupReap {
    let Ok(group) = positive_pid(pgid) else {
        return GroupReap::Done;
    };
    match rustix::process::waitpgid(group, WaitOptions::NOHANG) {
        Ok(Some(_)) => GroupReap::Reaped,
        Ok(None) => GroupReap::Pending,
        Err(Errno::INTR) => GroupReap::Pending,
        Err(Errno::CHILD) => GroupReap::Done,
        Err(errno) => {
            tracing::debug!(pgid, %errno, "waitpid(-pgid) failed");
            GroupReap::Done
        }
    }
}

/// Sets one of this process's resource limits: one system call, no allocation, so it also
/// serves between fork and exec.
pub(crate) fn set_limit(limit: &ResourceLimit) -> rustix::io::Result<()> {
    let value = Rlimit {
        current: limit.soft,
        maximum: limit.hard,
    };
    rustix::process::setrlimit(limit.resource.to_rustix(), value)
}

/// Runs in the forked child before `exec`: async-signal-safe system calls only, no allocation.
pub(crate) fn child_pre_exec(limits: &[ResourceLimit], inherit: Option<(RawFd, RawFd)>) -> io::Result<()> {
    if let Some((source, target)) = inherit {
        place_fd(source, target)?;
    }
    for limit in limits {
        set_limit(limit)?;
    }
    Ok(())
}

fn place_fd(source: RawFd, target: RawFd) -> io::Result<()> {
    if source != target {
        // SAFETY: plain dup2 on descriptor numbers; the source is open (owned by the spec) and the
        // target is > 2. The new descriptor does not carry close-on-exec.
        if unsafe { libc::dup2(source, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: clearing FD_CLOEXEC on a descriptor we just placed; no memory is touched.
    if unsafe { libc::fcntl(target, libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
