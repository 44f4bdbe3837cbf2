//! Starting a spec's program: `posix_spawn` when the child needs nothing done between fork and
//! `exec` that a spawn attribute cannot express, `fork` with a `pre_exec` hook otherwise.
//!
//! Why two ways: `fork` copies the parent's page tables and makes the parent's next write to each
//! of its pages fault once (copy on write); in a server that starts a child per unit of work that
//! was about a tenth of its CPU. glibc's `posix_spawn` runs the child on the parent's memory
//! (`CLONE_VM | CLONE_VFORK`) until it execs, so none of that happens. It can place descriptors,
//! change directory, start a process group and reset signals, but not set resource limits: a spec
//! whose limits the parent already holds (see [`adopt_limits`]) needs none set, and takes it.
//!
//! Architecture Invariant: both ways give the child the same thing: stdin `/dev/null`, stdout and
//! stderr a pipe or `/dev/null`, the inherited descriptor at its number without close-on-exec, a
//! new process group, an empty signal mask and `SIGPIPE` at its default, the spec's environment.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::io::fcntl_dupfd_cloexec;
use rustix::pipe::{PipeFlags, pipe_with};

use super::error::ProcessError;
use super::spec::{ProcessSpec, ResourceLimit};
use super::sys;

/// Descriptors a file action may take as its source are moved at least this high first, above
/// every target (0–2, and the usual inherited 3), so no action overwrites a later one's source.
const SPAWN_SOURCE_FD_MIN: RawFd = 10;
/// `PATH` entries searched for a bare program name, at most.
const PATH_ENTRIES_MAX: usize = 256;
/// The search path when the child's environment has no `PATH` (what `execvp` assumes).
const PATH_DEFAULT: &str = "/bin:/usr/bin";

/// A started child: its pid and the parent's ends of its output pipes.
pub(crate) struct Started {
    pub(crate) pid: i32,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
}

/// Sets the calling process's own limits to `limits`, so that children asking for the same limits
/// inherit them and start by `posix_spawn`. Lowering a hard limit cannot be undone.
pub fn adopt_limits(limits: &[ResourceLimit]) -> Result<(), ProcessError> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    for limit in limits {
        sys::set_limit(limit).map_err(|e| ProcessError::os(me, "setrlimit", e))?;
    }
    Ok(())
}

/// Starts the spec's program; the inherited descriptor is consumed (the parent's copy closed).
pub(crate) fn start(spec: &mut ProcessSpec, stdout: bool, stderr: bool) -> Result<Started, ProcessError> {
    let inherit = spec.inherit_fd.take();
    let started = if limits_held(&spec.rlimits) {
        spawn_posix(spec, stdout, stderr, inherit.as_ref())
    } else {
        fork_exec(spec, stdout, stderr, inherit.as_ref())
    };
    drop(inherit);
    started.map_err(|error| spawn_error(&spec.program, error))
}

/// Whether this process already holds every limit (a child inherits them, so none is set).
fn limits_held(limits: &[ResourceLimit]) -> bool {
    limits.iter().all(|limit| {
        let held = rustix::process::getrlimit(limit.resource.to_rustix());
        held.current == limit.soft && held.maximum == limit.hard
    })
}

fn spawn_error(program: &Path, error: io::Error) -> ProcessError {
    let program = program.display().to_string();
    match error.raw_os_error() {
        Some(libc::ENOENT) => ProcessError::NotFound { program },
        Some(libc::EACCES) => ProcessError::PermissionDenied { program },
        _ => ProcessError::Spawn { program, source: error },
    }
}

fn fork_exec(
    spec: &ProcessSpec,
    stdout: bool,
    stderr: bool,
    inherit: Option<&(OwnedFd, RawFd)>,
) -> io::Result<Started> {
    let mut command = Command::new(&spec.program);
    command.args(&spec.args).process_group(0).stdin(Stdio::null());
    command.stdout(if stdout { Stdio::piped() } else { Stdio::null() });
    command.stderr(if stderr { Stdio::piped() } else { Stdio::null() });
    if spec.env_clear {
        command.env_clear();
    }
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &spec.cwd {
        command.current_dir(dir);
    }
    let limits = spec.rlimits.clone();
    let fds = inherit.map(|(fd, target)| (fd.as_raw_fd(), *target));
    // SAFETY: the closure only issues async-signal-safe system calls (dup2, fcntl, setrlimit) on
    // data prepared before fork (a resource's number is a plain match); it neither allocates nor
    // takes locks.
    unsafe {
        command.pre_exec(move || sys::child_pre_exec(&limits, fds));
    }
    let mut child = command.spawn()?;
    Ok(Started {
        pid: i32::try_from(child.id()).unwrap_or(i32::MAX),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
    })
}

fn spawn_posix(
    spec: &ProcessSpec,
    stdout: bool,
    stderr: bool,
    inherit: Option<&(OwnedFd, RawFd)>,
) -> io::Result<Started> {
    let env = child_env(spec);
    let path = resolve_program(&spec.program, env.get(OsStr::new("PATH")).map(OsString::as_os_str))?;
    let path = c_string(path.into_os_string())?;
    let argv = std::iter::once(spec.program.as_os_str())
        .chain(spec.args.iter().map(OsString::as_os_str))
        .map(|arg| c_string(arg.to_owned()))
        .collect::<io::Result<Vec<_>>>()?;
    let envp = env
        .into_iter()
        .map(|(mut key, value)| {
            key.push("=");
            key.push(value);
            c_string(key)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let null = above(rustix::fs::open(
        "/dev/null",
        OFlags::RDWR | OFlags::CLOEXEC,
        Mode::empty(),
    )?)?;
    let (stdout_read, stdout_write) = optional_pipe(stdout)?;
    let (stderr_read, stderr_write) = optional_pipe(stderr)?;
    // Always a copy above its target: `dup2` onto its own number would keep close-on-exec set.
    let channel = inherit
        .map(|(fd, target)| {
            Ok::<_, io::Error>((fcntl_dupfd_cloexec(fd, SPAWN_SOURCE_FD_MIN.max(target + 1))?, *target))
        })
        .transpose()?;
    let mut actions = FileActions::new()?;
    actions.dup2(&null, 0)?;
    actions.dup2(stdout_write.as_ref().unwrap_or(&null), 1)?;
    actions.dup2(stderr_write.as_ref().unwrap_or(&null), 2)?;
    if let Some((fd, target)) = &channel {
        actions.dup2(fd, *target)?;
    }
    if let Some(dir) = &spec.cwd {
        actions.chdir(&c_string(dir.clone().into_os_string())?)?;
    }
    let attributes = Attributes::new()?;
    let pid = attributes.spawn(&path, &actions, &argv, &envp)?;
    Ok(Started {
        pid,
        stdout: stdout_read,
        stderr: stderr_read,
    })
}

/// The child's environment: the spec's entries over the parent's (or alone after `env_clear`);
/// a later entry for the same name wins, as with `std::process::Command`.
fn child_env(spec: &ProcessSpec) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = if spec.env_clear {
        BTreeMap::new()
    } else {
        std::env::vars_os().collect()
    };
    env.extend(spec.env.iter().cloned());
    env
}

/// The file to execute: a name with a slash as given, a bare name looked up on the child's `PATH`
/// (the parent's when the child has none), as `std::process::Command` does.
fn resolve_program(program: &Path, child_path: Option<&OsStr>) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_owned());
    }
    let parent_path = std::env::var_os("PATH");
    let search = child_path
        .or(parent_path.as_deref())
        .unwrap_or(OsStr::new(PATH_DEFAULT));
    std::env::split_paths(search)
        .take(PATH_ENTRIES_MAX)
        .map(|dir| dir.join(program))
        .find(|candidate| rustix::fs::access(candidate, rustix::fs::Access::EXEC_OK).is_ok() && candidate.is_file())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

fn c_string(value: OsString) -> io::Result<CString> {
    CString::new(value.into_vec()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in an argument, the environment or a path",
        )
    })
}

fn optional_pipe(wanted: bool) -> io::Result<(Option<OwnedFd>, Option<OwnedFd>)> {
    if !wanted {
        return Ok((None, None));
    }
    let (read, write) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok((Some(read), Some(above(write)?)))
}

/// `fd` (close-on-exec), moved to a number of at least [`SPAWN_SOURCE_FD_MIN`] if below it.
fn above(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= SPAWN_SOURCE_FD_MIN {
        return Ok(fd);
    }
    Ok(fcntl_dupfd_cloexec(&fd, SPAWN_SOURCE_FD_MIN)?)
}

/// `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        let mut actions = std::mem::MaybeUninit::uninit();
        // SAFETY: init writes a valid object into the uninitialised memory or fails.
        check(unsafe { libc::posix_spawn_file_actions_init(actions.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        Ok(Self(unsafe { actions.assume_init() }))
    }

    fn dup2(&mut self, source: &OwnedFd, target: RawFd) -> io::Result<()> {
        // SAFETY: a valid actions object; the numbers are only recorded here.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, source.as_raw_fd(), target) })
    }

    fn chdir(&mut self, dir: &CString) -> io::Result<()> {
        // SAFETY: a valid actions object; glibc copies the path.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, dir.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// `posix_spawnattr_t` for a new process group, an empty signal mask and `SIGPIPE` at its default
/// (a Rust program ignores `SIGPIPE`, and an ignored signal stays ignored across `exec`).
struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    fn new() -> io::Result<Self> {
        let mut attributes = std::mem::MaybeUninit::uninit();
        // SAFETY: init writes a valid object into the uninitialised memory or fails.
        check(unsafe { libc::posix_spawnattr_init(attributes.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        let mut this = Self(unsafe { attributes.assume_init() });
        this.configure()?;
        Ok(this)
    }

    fn configure(&mut self) -> io::Result<()> {
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        // SAFETY: sigset_t is plain data filled by sigemptyset/sigaddset; the attribute object is valid.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut default: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut default);
            libc::sigaddset(&mut default, libc::SIGPIPE);
            check(libc::posix_spawnattr_setflags(&mut self.0, flags as libc::c_short))?;
            check(libc::posix_spawnattr_setpgroup(&mut self.0, 0))?;
            check(libc::posix_spawnattr_setsigmask(&mut self.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut self.0, &default))
        }
    }

    fn spawn(&self, path: &CString, actions: &FileActions, argv: &[CString], envp: &[CString]) -> io::Result<i32> {
        let argv = null_terminated(argv);
        let envp = null_terminated(envp);
        let mut pid: libc::pid_t = 0;
        // SAFETY: every pointer is valid for the call (the strings outlive it; both arrays end in
        // NULL); glibc reports an exec failure as the return value and reaps that child itself.
        check(unsafe {
            libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions.0,
                &self.0,
                argv.as_ptr(),
                envp.as_ptr(),
            )
        })?;
        Ok(pid)
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// posix_spawn functions return an error number instead of setting `errno`.
fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}
