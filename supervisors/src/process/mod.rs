//! Supervision of one OS child process owned by one owner (Linux only).
//!
//! This module knows nothing about what the child does. It gives an owner:
//!
//! - [`spawn`]: start a program in its own process group with bounded output capture into user-only
//!   files, resource limits applied before `exec`, and optionally one inherited descriptor (for a
//!   private socketpair channel).
//! - [`ProcessChild`]: wait for the group leader to exit *without reaping it* (so its PID and PGID
//!   cannot be reused while the group may still be signaled), terminate the whole group with
//!   `SIGTERM` then a bounded `SIGKILL` escalation, and reap by exact PID / pidfd. Dropping a live
//!   child kills and reaps it.
//! - [`StartIdentity`]: boot id + PID + start time, persisted by a server so that a later server can
//!   signal a recorded group only when the live process is provably the same one
//!   ([`signal_group_if_identity_matches`]).
//! - [`group_members`] to prove that no member of a group survived, and [`set_child_subreaper`] so
//!   orphaned grandchildren come back to the server to be reaped.
//!
//! Reaping never waits for "any child" (`waitpid(-1)`): that would steal exit statuses from Tokio and
//! from other owners. Only the exact leader and members of the owned process group are reaped.
//!
//! All async methods need a Tokio runtime with IO and time drivers enabled.

mod capture;
mod child;
mod error;
mod identity;
mod launch;
mod orphans;
mod spec;
mod sys;

pub use capture::{CaptureReport, StreamCapture};
pub use child::{ExitOutcome, ProcessChild, Termination, reap_group, spawn};
pub use error::ProcessError;
pub use identity::{
    SignalOutcome, StartIdentity, current_boot_id, group_members, identity_of, is_running, parent_of,
    signal_group_if_identity_matches,
};
pub use launch::adopt_limits;
pub use orphans::{
    ENVIRON_BYTES_MAX, ORPHAN_SCAN_PROCESSES_MAX, has_orphans, kill_orphans_with_env, orphans_with_env, reap_orphans,
};
pub use spec::{ProcessSignal, ProcessSpec, ResourceLimit, RlimitResource};
pub use sys::set_child_subreaper;

/// Default delay between `SIGTERM` and `SIGKILL` when terminating a group.
pub const GRACE_MS_DEFAULT: u64 = 5_000;
/// Upper bound for any termination grace; larger requests are clamped (or rejected in a spec).
pub const GRACE_MS_MAX: u64 = 60_000;
/// Default number of bytes written per captured stream (stdout, stderr) before truncation.
pub const CAPTURE_BYTES_MAX_DEFAULT: u64 = 1024 * 1024;
/// Upper bound for a spec's `capture_bytes_max`.
pub const CAPTURE_BYTES_MAX_LIMIT: u64 = 256 * 1024 * 1024;
/// Size of one read from a child's output pipe.
pub const CAPTURE_READ_CHUNK_BYTES: usize = 64 * 1024;
/// Prefix of the line appended to a capture file once its stream was truncated.
pub const CAPTURE_TRUNCATION_MARKER_PREFIX: &str = "[pi-workflows: output truncated after ";
/// Poll interval for exit detection when pidfd is not available.
pub const EXIT_POLL_MS: u64 = 20;
/// With pidfd, re-check the exit state at least this often (guards against a lost wakeup).
pub const EXIT_RECHECK_MS: u64 = 1_000;
/// How long to wait for the leader to exit after `SIGKILL` before reporting an error.
pub const KILL_WAIT_MS_MAX: u64 = 10_000;
/// How long to keep reaping reparented members of a killed group.
pub const GROUP_REAP_MS_MAX: u64 = 2_000;
/// Poll interval while reaping reparented members of a killed group.
pub const GROUP_REAP_POLL_MS: u64 = 10;
/// How long `Drop` blocks to reap a killed child before handing the reaping to a helper thread.
pub const DROP_REAP_MS_MAX: u64 = 250;
/// Maximum number of resource limits in one spec.
pub const RLIMITS_COUNT_MAX: usize = 16;
/// Maximum number of bytes read from `/proc/<pid>/stat` or the boot id file.
pub const PROC_FILE_BYTES_MAX: u64 = 4 * 1024;
