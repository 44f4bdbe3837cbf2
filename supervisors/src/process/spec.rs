//! What to start: program, arguments, environment, capture files, limits, grace, inherited fd.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use super::error::ProcessError;
use super::{CAPTURE_BYTES_MAX_DEFAULT, CAPTURE_BYTES_MAX_LIMIT, GRACE_MS_DEFAULT, GRACE_MS_MAX, RLIMITS_COUNT_MAX};

/// A resource limited with `setrlimit` in the child before `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RlimitResource {
    /// `RLIMIT_CPU` (seconds).
    Cpu,
    /// `RLIMIT_FSIZE` (bytes).
    Fsize,
    /// `RLIMIT_DATA` (bytes).
    Data,
    /// `RLIMIT_STACK` (bytes).
    Stack,
    /// `RLIMIT_CORE` (bytes; 0 disables core dumps).
    Core,
    /// `RLIMIT_NOFILE` (descriptors).
    Nofile,
    /// `RLIMIT_AS` (bytes of address space).
    As,
    /// `RLIMIT_NPROC` (processes of the user).
    Nproc,
    /// `RLIMIT_MEMLOCK` (bytes).
    Memlock,
}

impl RlimitResource {
    pub(crate) fn to_rustix(self) -> rustix::process::Resource {
        use rustix::process::Resource;
        match self {
            Self::Cpu => Resource::Cpu,
            Self::Fsize => Resource::Fsize,
            Self::Data => Resource::Data,
            Self::Stack => Resource::Stack,
            Self::Core => Resource::Core,
            Self::Nofile => Resource::Nofile,
            Self::As => Resource::As,
            Self::Nproc => Resource::Nproc,
            Self::Memlock => Resource::Memlock,
        }
    }
}

/// One resource limit. `None` means unlimited (`RLIM_INFINITY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimit {
    /// Which resource.
    pub resource: RlimitResource,
    /// Soft limit (what the child sees as its limit).
    pub soft: Option<u64>,
    /// Hard limit (ceiling the child may raise its soft limit to).
    pub hard: Option<u64>,
}

/// A signal an owner may send to a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcessSignal {
    /// `SIGTERM`.
    Term,
    /// `SIGKILL`.
    Kill,
    /// `SIGINT`.
    Int,
    /// `SIGHUP`.
    Hup,
    /// `SIGCONT`.
    Cont,
    /// `SIGUSR1`.
    Usr1,
    /// `SIGUSR2`.
    Usr2,
}

impl ProcessSignal {
    pub(crate) fn to_rustix(self) -> rustix::process::Signal {
        use rustix::process::Signal;
        match self {
            Self::Term => Signal::TERM,
            Self::Kill => Signal::KILL,
            Self::Int => Signal::INT,
            Self::Hup => Signal::HUP,
            Self::Cont => Signal::CONT,
            Self::Usr1 => Signal::USR1,
            Self::Usr2 => Signal::USR2,
        }
    }
}

/// How to start one child process. Build with [`ProcessSpec::new`] and the chained setters, or fill
/// the public fields directly. Its `Debug` output omits argument and environment values (they may be
/// private).
pub struct ProcessSpec {
    /// Program to execute; a bare name is looked up on the `PATH` of the child environment.
    pub program: PathBuf,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    /// Environment variables set for the child (after `env_clear`, when set).
    pub env: Vec<(OsString, OsString)>,
    /// Start from an empty environment instead of inheriting the parent's.
    pub env_clear: bool,
    /// Working directory; must exist.
    pub cwd: Option<PathBuf>,
    /// File receiving stdout (created 0600, parent dirs 0700). `None` discards stdout.
    pub stdout_path: Option<PathBuf>,
    /// File receiving stderr (created 0600, parent dirs 0700). `None` discards stderr.
    pub stderr_path: Option<PathBuf>,
    /// Bytes written per captured stream; the rest is drained and discarded.
    pub capture_bytes_max: u64,
    /// Limits the child gets: inherited when this process already holds every one of them
    /// ([`adopt_limits`](super::adopt_limits); the child is then started by `posix_spawn`),
    /// else set in the child between `fork` and `exec`.
    pub rlimits: Vec<ResourceLimit>,
    /// Default delay between `SIGTERM` and `SIGKILL` (at most [`GRACE_MS_MAX`]).
    pub grace: Duration,
    /// A descriptor to appear in the child at the given number (> 2), without close-on-exec. The
    /// parent's copy is closed right after spawning. Use a target number that is open in the parent
    /// at spawn time (fd 3 always is in a Tokio program): a free number could be taken by the
    /// standard library's internal exec-error pipe, and an exec failure would then look like a
    /// started child that exits at once instead of a spawn error.
    pub inherit_fd: Option<(OwnedFd, RawFd)>,
}

impl fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("program", &self.program)
            .field("args_count", &self.args.len())
            .field("env_count", &self.env.len())
            .field("env_clear", &self.env_clear)
            .field("cwd", &self.cwd)
            .field("stdout_path", &self.stdout_path)
            .field("stderr_path", &self.stderr_path)
            .field("capture_bytes_max", &self.capture_bytes_max)
            .field("rlimits", &self.rlimits)
            .field("grace", &self.grace)
            .field(
                "inherit_fd_target",
                &self.inherit_fd.as_ref().map(|(_, target)| *target),
            )
            .finish()
    }
}

impl ProcessSpec {
    /// A spec for `program` with defaults: no args, inherited environment, output discarded,
    /// [`CAPTURE_BYTES_MAX_DEFAULT`], no limits, [`GRACE_MS_DEFAULT`].
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            cwd: None,
            stdout_path: None,
            stderr_path: None,
            capture_bytes_max: CAPTURE_BYTES_MAX_DEFAULT,
            rlimits: Vec::new(),
            grace: Duration::from_millis(GRACE_MS_DEFAULT),
            inherit_fd: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts from an empty environment when `clear` is true.
    pub fn env_clear(mut self, clear: bool) -> Self {
        self.env_clear = clear;
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Captures stdout into `path`.
    pub fn stdout_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout_path = Some(path.into());
        self
    }

    /// Captures stderr into `path`.
    pub fn stderr_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stderr_path = Some(path.into());
        self
    }

    /// Sets the per-stream capture bound in bytes.
    pub fn capture_bytes_max(mut self, bytes: u64) -> Self {
        self.capture_bytes_max = bytes;
        self
    }

    /// Adds a resource limit (`None` = unlimited).
    pub fn rlimit(mut self, resource: RlimitResource, soft: Option<u64>, hard: Option<u64>) -> Self {
        self.rlimits.push(ResourceLimit { resource, soft, hard });
        self
    }

    /// Sets the default termination grace.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Makes `fd` appear as descriptor `target` (> 2) in the child.
    pub fn inherit_fd(mut self, fd: OwnedFd, target: RawFd) -> Self {
        self.inherit_fd = Some((fd, target));
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ProcessError> {
        let invalid = |msg: &str| Err(ProcessError::InvalidSpec(msg.to_owned()));
        if self.program.as_os_str().is_empty() {
            return invalid("program is empty");
        }
        if self.capture_bytes_max > CAPTURE_BYTES_MAX_LIMIT {
            return invalid("capture_bytes_max exceeds CAPTURE_BYTES_MAX_LIMIT");
        }
        if self.grace > Duration::from_millis(GRACE_MS_MAX) {
            return invalid("grace exceeds GRACE_MS_MAX");
        }
        if let Some(dir) = &self.cwd
            && !dir.is_dir()
        {
            return invalid("working directory does not exist or is not a directory");
        }
        if let Some((_, target)) = &self.inherit_fd
            && *target <= 2
        {
            return invalid("inherit_fd target must be greater than 2 (stdio is managed)");
        }
        self.validate_rlimits()
    }

    fn validate_rlimits(&self) -> Result<(), ProcessError> {
        if self.rlimits.len() > RLIMITS_COUNT_MAX {
            return Err(ProcessError::InvalidSpec(
                "too many rlimits (RLIMITS_COUNT_MAX)".to_owned(),
            ));
        }
        for limit in &self.rlimits {
            let soft_above_hard = match (limit.soft, limit.hard) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(soft), Some(hard)) => soft > hard,
            };
            if soft_above_hard {
                let msg = format!("rlimit {:?}: soft limit above hard limit", limit.resource);
                return Err(ProcessError::InvalidSpec(msg));
            }
        }
        Ok(())
    }
}
