//! Starting a workflow child (a runner or a source resolver): its own process group, the
//! private channel on fd 3, bounded user-only captures, no core dumps, the server's
//! environment less its internals. The caller hands the started process to the one actor
//! that owns it.
//!
//! Architecture Invariant: a child never inherits the server's stdio, and its channel is
//! never its stdout (workflow code prints).

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::Resource;
use supervisors::process::{ProcessChild, ProcessError, ProcessSpec, ResourceLimit, RlimitResource, spawn};

use super::config::{Program, RunnerSettings};
use crate::protocol::runner::RUNNER_CHANNEL_FD;

/// SIGTERM-to-SIGKILL grace of a child's process group.
pub const CHILD_GRACE_MS: u64 = 5_000;
/// Captured child output per stream.
pub const CHILD_CAPTURE_BYTES_MAX: u64 = 1024 * 1024;
/// Open files a child (and what it starts) may hold at once; never above the server's own
/// hard limit (a child cannot be given more than its parent has).
pub const CHILD_OPEN_FILES_MAX: u64 = 16_384;
/// Tasks of this user (processes and threads: Linux counts both) a child may bring the
/// count to: a fork bomb stops there, while a busy desktop's thousands of browser and IDE
/// threads leave ample room. The kernel does not enforce it for root.
pub const CHILD_PROCESSES_MAX: u64 = 32_768;

/// Every child is started with `PI_WORKFLOWS_CHILD_MARK=<its log stem>`, inherited by what
/// it starts: when its work ends, processes that escaped its process group and still carry
/// the mark (a detached `setsid` child, a double fork) are found and stopped.
pub const CHILD_MARK_ENV: &str = "PI_WORKFLOWS_CHILD_MARK";

/// Where a child started as `log_stem` captures its stdout and stderr (operators look there):
/// `<logs_dir>/<log_stem>.out` and `.err`.
pub fn capture_paths(logs_dir: &Path, log_stem: &str) -> (PathBuf, PathBuf) {
    (
        logs_dir.join(format!("{log_stem}.out")),
        logs_dir.join(format!("{log_stem}.err")),
    )
}

/// The environment entry that marks the descendants of the child started as `log_stem`.
pub fn child_mark(log_stem: &str) -> String {
    format!("{CHILD_MARK_ENV}={log_stem}")
}

/// The server's own variables a child may see (its shell steps and headless agents need the
/// Pi binary, the Node for Pi and the Node the user chose); every other `PI_WORKFLOWS_*` is the server's internal
/// configuration or a test hook, withheld.
const CHILD_INTERNAL_ENV_ALLOWED: &[&str] = &["PI_WORKFLOWS_PI_BIN", "PI_WORKFLOWS_PI_NODE", "PI_WORKFLOWS_NODE"];
/// The scripted test runner's script: passed only to a custom runner program
/// (`PI_WORKFLOWS_RUNNER`), never to the Node runner.
const TEST_SCRIPT_ENV: &str = "PI_WORKFLOWS_TEST_SCRIPT";
const INTERNAL_ENV_PREFIX: &str = "PI_WORKFLOWS_";

/// Whether a child inherits the server's variable `name`: everything of the user's
/// environment (a shell step sees what it would see in the shell that started the server),
/// except the server's internals and what `PI_WORKFLOWS_ENV_DENY` withholds.
fn inherited(name: &str, settings: &RunnerSettings) -> bool {
    if settings.env_deny.iter().any(|rule| rule.matches(name)) {
        return false;
    }
    if !name.starts_with(INTERNAL_ENV_PREFIX) {
        return true;
    }
    CHILD_INTERNAL_ENV_ALLOWED.contains(&name) || (name == TEST_SCRIPT_ENV && settings.custom_runner)
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("could not create the child's channel: {0}")]
    Channel(#[from] std::io::Error),
    #[error("could not start {program}: {source}")]
    Process {
        program: String,
        #[source]
        source: ProcessError,
    },
}

/// glibc's allocator as a Node runner starts fastest: transparent huge pages for its heap
/// (`hugetlb=1`: malloc advises them), and blocks up to 16 MiB from that heap rather than
/// mappings of their own (`mmap_threshold`; glibc's own adaptive threshold reaches 32 MiB).
/// Why: a snapshot runner reads its ~5 MB startup snapshot into a fresh buffer and copies it
/// out again, and in 4 KiB pages each page costs a fault; a start's minor faults go from
/// ~5,000 to ~2,300 and its CPU from ~31 to ~25 ms (docs/PERFORMANCE.md, twenty-fourth round),
/// for ~4 MiB more resident memory while it runs.
pub const RUNNER_MALLOC_TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=16777216";
/// glibc reads its tunables from this variable when a process starts.
pub const GLIBC_TUNABLES_ENV: &str = "GLIBC_TUNABLES";
/// Set beside [`RUNNER_MALLOC_TUNABLES`] when the server added them: the runner then removes
/// both before a workflow's code runs, so its steps see the user's environment
/// (`runner/environment.ts`).
pub const TUNABLES_ADDED_ENV: &str = "PI_WORKFLOWS_TUNABLES_ADDED";

/// Start `program` with a private channel on its fd 3; returns the child and the server's
/// end of the channel. Captures go to `<logs_dir>/<log_stem>.out|.err`; `cwd` is the project
/// when known (a warm runner changes there itself once launched).
pub fn spawn_with_channel(
    settings: &RunnerSettings,
    program: &Program,
    log_stem: &str,
    cwd: Option<PathBuf>,
) -> Result<(ProcessChild, StdUnixStream), SpawnError> {
    spawn_paired(settings, program, log_stem, cwd, &[])
}

/// [`spawn_with_channel`] for a runner: the package's Node runner also gets
/// [`RUNNER_MALLOC_TUNABLES`], unless the user's environment sets glibc's tunables itself (a
/// custom runner program gets nothing added).
pub fn spawn_runner_with_channel(
    settings: &RunnerSettings,
    program: &Program,
    log_stem: &str,
    cwd: Option<PathBuf>,
) -> Result<(ProcessChild, StdUnixStream), SpawnError> {
    let tuned = !settings.custom_runner && std::env::var_os(GLIBC_TUNABLES_ENV).is_none();
    let added: &[(&str, &str)] = if tuned {
        &[(GLIBC_TUNABLES_ENV, RUNNER_MALLOC_TUNABLES), (TUNABLES_ADDED_ENV, "1")]
    } else {
        &[]
    };
    spawn_paired(settings, program, log_stem, cwd, added)
}

fn spawn_paired(
    settings: &RunnerSettings,
    program: &Program,
    log_stem: &str,
    cwd: Option<PathBuf>,
    added_env: &[(&str, &str)],
) -> Result<(ProcessChild, StdUnixStream), SpawnError> {
    let (parent_end, child_end) = StdUnixStream::pair()?;
    let mut spec = process_spec(settings, program, log_stem, cwd, Some(child_end.into()));
    for (name, value) in added_env {
        spec = spec.env(name, value);
    }
    Ok((start(spec, program)?, parent_end))
}

/// Start `program` as a helper of the server's own (no channel, the server's directory),
/// with every child's group, limits, environment and captures.
pub fn spawn_helper(settings: &RunnerSettings, program: &Program, log_stem: &str) -> Result<ProcessChild, SpawnError> {
    start(process_spec(settings, program, log_stem, None, None), program)
}

fn start(spec: ProcessSpec, program: &Program) -> Result<ProcessChild, SpawnError> {
    spawn(spec).map_err(|source| SpawnError::Process {
        program: program_name(program),
        source,
    })
}

/// `limit`, but never above this process's own hard limit of `resource`.
fn bounded(resource: Resource, limit: u64) -> u64 {
    rustix::process::getrlimit(resource)
        .maximum
        .map_or(limit, |hard| hard.min(limit))
}

/// The limits every child gets: no core dump (one could hold workflow data), at most
/// [`CHILD_OPEN_FILES_MAX`] open files and [`CHILD_PROCESSES_MAX`] tasks of the user.
fn child_limits() -> [ResourceLimit; 3] {
    let open_files = bounded(Resource::Nofile, CHILD_OPEN_FILES_MAX);
    let processes = bounded(Resource::Nproc, CHILD_PROCESSES_MAX);
    let limit = |resource, value| ResourceLimit {
        resource,
        soft: Some(value),
        hard: Some(value),
    };
    [
        limit(RlimitResource::Core, 0),
        limit(RlimitResource::Nofile, open_files),
        limit(RlimitResource::Nproc, processes),
    ]
}

/// Gives the server itself the limits of its children, once at start: a child then inherits
/// them and starts by `posix_spawn`, which costs the server far less than a `fork` (no page
/// table copy, no copy-on-write faults after it). The server gains no core dump (its memory
/// holds payloads too); its own files and tasks stay far below these bounds.
pub fn adopt_child_limits() -> Result<(), ProcessError> {
    supervisors::process::adopt_limits(&child_limits())
}

/// The program's file name only: a path could name a private directory.
fn program_name(program: &Program) -> String {
    program.0.file_name().map_or_else(
        || "the child program".to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn process_spec(
    settings: &RunnerSettings,
    program: &Program,
    log_stem: &str,
    cwd: Option<PathBuf>,
    channel: Option<std::os::fd::OwnedFd>,
) -> ProcessSpec {
    let (stdout, stderr) = capture_paths(&settings.logs_dir, log_stem);
    let mut spec = ProcessSpec::new(&program.0)
        .args(program.1.iter().cloned())
        .env_clear(true)
        .stdout_to(stdout)
        .stderr_to(stderr)
        .capture_bytes_max(CHILD_CAPTURE_BYTES_MAX)
        .grace(Duration::from_millis(CHILD_GRACE_MS));
    if let Some(channel) = channel {
        spec = spec.inherit_fd(channel, RUNNER_CHANNEL_FD);
    }
    spec.rlimits.extend(child_limits());
    if let Some(dir) = cwd.filter(|dir| dir.is_dir()) {
        spec = spec.cwd(dir);
    }
    for (name, value) in std::env::vars_os() {
        if name.to_str().is_some_and(|name| inherited(name, settings)) {
            spec = spec.env(name, value);
        }
    }
    spec.env(crate::package::CACHE_DIR_ENV, &settings.cache_dir)
        .env(CHILD_MARK_ENV, log_stem)
}
