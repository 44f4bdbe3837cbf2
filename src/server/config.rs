//! The server's configuration, read from the environment once at start. Every limit a user
//! can set is checked here, with an error that names the variable and its range.
//!
//! Architecture Invariant: this file imports no sibling but `ownership` (paths); the parts
//! of the tree get the values they need from here, never from the environment themselves.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::ownership::ServerPaths;
use crate::store::retention;

/// Environment variable naming the file descriptor on which `server start` waits for
/// "ready"; set only by `server start`.
pub const READY_FD_ENV: &str = "PI_WORKFLOWS_READY_FD";
pub const IDLE_EXIT_ENV: &str = "PI_WORKFLOWS_IDLE_EXIT_MS";
/// Default idle period before exit.
pub const IDLE_EXIT_MS_DEFAULT: u64 = 5 * 60 * 1_000;
pub const RUNNER_ENV: &str = "PI_WORKFLOWS_RUNNER";
pub const MAX_WORKERS_ENV: &str = "PI_WORKFLOWS_MAX_WORKERS";
pub const RUNNER_READY_ENV: &str = "PI_WORKFLOWS_RUNNER_READY_MS";
pub const MAX_WORKERS_DEFAULT: usize = 4;
/// A generous bound on capacity: each runner is an OS process.
pub const MAX_WORKERS_LIMIT: usize = 256;
pub const RUNNER_READY_MS_DEFAULT: u64 = 10_000;
pub const WARM_RUNNERS_ENV: &str = "PI_WORKFLOWS_WARM_RUNNERS";
/// `off` starts every Node runner the plain way, without the pool's startup snapshot
/// (`runners/snapshot.rs`); `on` (the default) uses one once it is built and checked.
pub const RUNNER_SNAPSHOT_ENV: &str = "PI_WORKFLOWS_RUNNER_SNAPSHOT";
pub const RUNNER_MEMORY_ENV: &str = "PI_WORKFLOWS_RUNNER_MEMORY_MB";
pub const RUNNER_MEMORY_MB_DEFAULT: u64 = 4_096;
/// The smallest memory bound a runner may be given (Node itself needs ~50 MiB).
pub const RUNNER_MEMORY_MB_MIN: u64 = 64;
pub const RUNNER_PING_ENV: &str = "PI_WORKFLOWS_RUNNER_PING_MS";
pub const RUNNER_PING_MS_DEFAULT: u64 = 2_000;
pub const RUNNER_UNRESPONSIVE_ENV: &str = "PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS";
pub const RUNNER_UNRESPONSIVE_MS_DEFAULT: u64 = 10_000;
/// Bounds of both liveness settings.
pub const RUNNER_LIVENESS_MS_MIN: u64 = 100;
pub const RUNNER_LIVENESS_MS_MAX: u64 = 10 * 60 * 1_000;
/// A runner silent this long is stalled: stopped, its claim given up, its run reclaimed.
pub const RUNNER_STALLED_ENV: &str = "PI_WORKFLOWS_RUNNER_STALLED_MS";
/// Long enough that only a stopped or wedged event loop reaches it, not a slow step.
pub const RUNNER_STALLED_MS_DEFAULT: u64 = 5 * 60 * 1_000;
/// The longest stall bound that may be set (at least the unresponsive bound).
pub const RUNNER_STALLED_MS_MAX: u64 = 60 * 60 * 1_000;
/// How often the reclaimer looks for running rows whose claim expired.
pub const RECLAIM_INTERVAL_ENV: &str = "PI_WORKFLOWS_RECLAIM_INTERVAL_MS";
pub const RECLAIM_INTERVAL_MS_DEFAULT: u64 = 5_000;
pub const RECLAIM_INTERVAL_MS_MIN: u64 = 100;
/// A look less often than a claim lives would leave expired runs for more than a lease.
pub const RECLAIM_INTERVAL_MS_MAX: u64 = crate::store::claims::RUN_CLAIM_LEASE_MS as u64;
/// Warm runners kept at most (`PI_WORKFLOWS_WARM_RUNNERS`, default 1 with the Node runner).
pub const WARM_RUNNERS_MAX: usize = 4;
/// After the last take, how long runs count as arriving, so the warm pool keeps its demand
/// target (`runners/pool.rs`).
pub const WARM_DEMAND_ENV: &str = "PI_WORKFLOWS_WARM_DEMAND_MS";
pub const WARM_DEMAND_MS_DEFAULT: u64 = 5_000;
pub const WARM_DEMAND_MS_MIN: u64 = 100;
/// Longer would keep idle processes (tens of MiB each) around long after the work stopped.
pub const WARM_DEMAND_MS_MAX: u64 = 10 * 60 * 1_000;
/// `PI_WORKFLOWS_RETENTION_DAYS`: days finished runs are kept (default 30), or `off`.
pub const RETENTION_ENV: &str = "PI_WORKFLOWS_RETENTION_DAYS";

pub const FIRST_REQUEST_ENV: &str = "PI_WORKFLOWS_CONNECTION_FIRST_REQUEST_MS";
/// How long a new connection may take to send its first request.
pub const FIRST_REQUEST_MS_DEFAULT: u64 = 10_000;
/// The same for a connection in the reserve (it only may ask for status or a stop).
pub const RESERVED_FIRST_REQUEST_MS: u64 = 2_000;
pub const CONNECTION_IDLE_ENV: &str = "PI_WORKFLOWS_CONNECTION_IDLE_MS";
/// How long a connection without a subscription may stay silent between requests.
pub const CONNECTION_IDLE_MS_DEFAULT: u64 = 5 * 60 * 1_000;
/// The longest either connection deadline may be set to.
pub const CONNECTION_DEADLINE_MS_MAX: u64 = 24 * 60 * 60 * 1_000;

pub const RESOLVE_TIMEOUT_ENV: &str = "PI_WORKFLOWS_RESOLVE_TIMEOUT_MS";
/// How long one resolution may take (loading a large workflow tree included).
pub const RESOLVE_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// The longest resolve timeout that may be set: the CLI waits 90 s for `run.start`.
pub const RESOLVE_TIMEOUT_MS_MAX: u64 = 80_000;

/// A child program and its arguments.
pub type Program = (PathBuf, Vec<OsString>);

pub struct ServerConfig {
    pub paths: ServerPaths,
    pub idle_exit: Duration,
    pub json_logs: bool,
    pub runner: RunnerSettings,
    /// The served source resolver (`resolver-main.js --serve`), when the package is found.
    pub resolver: Option<Program>,
    /// Days finished run trees are kept (`PI_WORKFLOWS_RETENTION_DAYS`); `None`: no sweep.
    pub retention_days: Option<i64>,
    pub connection_deadlines: ConnectionDeadlines,
    /// How long a workflow may take to load in a resolver before its process is killed.
    pub resolve_timeout: Duration,
    /// How often the reclaimer looks for expired running rows (`PI_WORKFLOWS_RECLAIM_INTERVAL_MS`).
    pub reclaim_interval: Duration,
}

/// How long a client connection may stay silent.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionDeadlines {
    /// From `hello` to the first request.
    pub first_request: Duration,
    /// Between requests, while the connection holds no subscription.
    pub idle: Duration,
    /// From `hello` to the first request of a connection in the reserve.
    pub reserved_first_request: Duration,
}

/// How runners are launched and how many may run at once.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// The runner program and its arguments (`PI_WORKFLOWS_RUNNER`, else the package's
    /// Node runner); without one, queued runs wait.
    pub program: Option<Program>,
    /// Execution capacity (`PI_WORKFLOWS_MAX_WORKERS`, default 4), pending launches included.
    pub max_workers: usize,
    /// How long a runner has to send `runner.ready`.
    pub ready_timeout: Duration,
    /// Where child stdout/stderr are captured (user-only).
    pub logs_dir: PathBuf,
    /// The bundle cache runners share with the CLI's resolver (`PI_WORKFLOWS_CACHE_DIR`).
    pub cache_dir: PathBuf,
    /// Runner processes kept started ahead of need while idle (`PI_WORKFLOWS_WARM_RUNNERS`).
    pub warm_runners: usize,
    /// How long after the last take runs count as arriving (`PI_WORKFLOWS_WARM_DEMAND_MS`).
    pub warm_demand_window: Duration,
    /// How often a live runner is pinged (`PI_WORKFLOWS_RUNNER_PING_MS`).
    pub ping_interval: Duration,
    /// A runner silent this long shows as unresponsive (`PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS`).
    pub unresponsive_after: Duration,
    /// A runner silent this long is stalled (`PI_WORKFLOWS_RUNNER_STALLED_MS`): its group is
    /// killed, its claim given up and its run left to the reclaimer. At least
    /// `unresponsive_after`.
    pub stalled_after: Duration,
    /// A runner process resident above this is stopped (`PI_WORKFLOWS_RUNNER_MEMORY_MB`);
    /// `None`: no bound.
    pub memory_bytes_max: Option<u64>,
    /// Variables withheld from children (`PI_WORKFLOWS_ENV_DENY`).
    pub env_deny: Vec<EnvRule>,
    /// The runner is a custom program (`PI_WORKFLOWS_RUNNER`: the tests' scripted runner),
    /// which alone gets its test script.
    pub custom_runner: bool,
    /// Whether the pool may start Node runners from a startup snapshot (`PI_WORKFLOWS_RUNNER_SNAPSHOT`).
    pub runner_snapshot: bool,
}

/// One `PI_WORKFLOWS_ENV_DENY` entry: a variable name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvRule {
    Name(String),
    Prefix(String),
}

impl EnvRule {
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::Name(exact) => name == exact,
            Self::Prefix(prefix) => name.starts_with(prefix.as_str()),
        }
    }
}

/// `PI_WORKFLOWS_ENV_DENY`: variables (comma-separated; `NAME` or `PREFIX*`) the server
/// withholds from the children it starts.
pub const ENV_DENY_ENV: &str = "PI_WORKFLOWS_ENV_DENY";
/// Rules at most, and the longest rule.
pub const ENV_DENY_RULES_MAX: usize = 256;
pub const ENV_DENY_RULE_BYTES_MAX: usize = 256;

fn env_deny() -> anyhow::Result<Vec<EnvRule>> {
    let Ok(text) = std::env::var(ENV_DENY_ENV) else {
        return Ok(Vec::new());
    };
    let rules: Vec<EnvRule> = text
        .split(',')
        .map(str::trim)
        .filter(|rule| !rule.is_empty())
        .map(|rule| {
            let name = rule.strip_suffix('*').unwrap_or(rule);
            let valid = !name.is_empty()
                && rule.len() <= ENV_DENY_RULE_BYTES_MAX
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                anyhow::bail!(
                    "{ENV_DENY_ENV} holds {rule:?}: use comma-separated variable names or prefixes ending in `*`"
                );
            }
            Ok(match rule.ends_with('*') {
                true => EnvRule::Prefix(name.to_string()),
                false => EnvRule::Name(name.to_string()),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    if rules.len() > ENV_DENY_RULES_MAX {
        anyhow::bail!(
            "{ENV_DENY_ENV} holds {} rules; at most {ENV_DENY_RULES_MAX}",
            rules.len()
        );
    }
    Ok(rules)
}

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .with_context(|| format!("{name} must be a non-negative integer, not {text:?}")),
        Err(_) => Ok(default),
    }
}

impl ServerConfig {
    pub fn from_env(paths: ServerPaths) -> anyhow::Result<Self> {
        let idle_exit_ms = env_number(IDLE_EXIT_ENV, IDLE_EXIT_MS_DEFAULT)?;
        let json_logs = std::env::var("PI_WORKFLOWS_LOG_JSON").is_ok_and(|value| value == "1");
        let max_workers = env_number(MAX_WORKERS_ENV, MAX_WORKERS_DEFAULT as u64)? as usize;
        if !(1..=MAX_WORKERS_LIMIT).contains(&max_workers) {
            anyhow::bail!("{MAX_WORKERS_ENV} must be between 1 and {MAX_WORKERS_LIMIT}, not {max_workers}");
        }
        // One warm runner by default with the Node runner; a custom runner program (tests'
        // scripted runner) starts on demand unless asked otherwise.
        let custom_runner = std::env::var_os(RUNNER_ENV).is_some_and(|value| !value.is_empty());
        let warm_runners = env_number(WARM_RUNNERS_ENV, u64::from(!custom_runner))? as usize;
        if warm_runners > WARM_RUNNERS_MAX {
            anyhow::bail!("{WARM_RUNNERS_ENV} must be between 0 and {WARM_RUNNERS_MAX}, not {warm_runners}");
        }
        let resolver = crate::package::node_program("resolver-main.js")
            .ok()
            .map(|program| (program.node.clone(), [program.args(), vec!["--serve".into()]].concat()));
        let unresponsive_after = liveness_ms(RUNNER_UNRESPONSIVE_ENV, RUNNER_UNRESPONSIVE_MS_DEFAULT)?;
        let runner = RunnerSettings {
            ping_interval: liveness_ms(RUNNER_PING_ENV, RUNNER_PING_MS_DEFAULT)?,
            unresponsive_after,
            stalled_after: stalled_after(unresponsive_after)?,
            memory_bytes_max: runner_memory_bytes_max()?,
            env_deny: env_deny()?,
            custom_runner,
            runner_snapshot: !custom_runner && runner_snapshot()?,
            warm_runners,
            warm_demand_window: warm_demand_window()?,
            program: runner_program(),
            max_workers,
            ready_timeout: Duration::from_millis(env_number(RUNNER_READY_ENV, RUNNER_READY_MS_DEFAULT)?),
            logs_dir: paths.logs_dir.join("runners"),
            cache_dir: paths.cache_dir.clone(),
        };
        Ok(Self {
            paths,
            idle_exit: Duration::from_millis(idle_exit_ms),
            json_logs,
            runner,
            resolver,
            retention_days: retention_days()?,
            connection_deadlines: connection_deadlines()?,
            resolve_timeout: resolve_timeout()?,
            reclaim_interval: reclaim_interval()?,
        })
    }
}

/// `PI_WORKFLOWS_RUNNER_STALLED_MS`: from the unresponsive bound to an hour.
fn stalled_after(unresponsive_after: Duration) -> anyhow::Result<Duration> {
    let ms = env_number(RUNNER_STALLED_ENV, RUNNER_STALLED_MS_DEFAULT)?;
    let min = unresponsive_after.as_millis() as u64;
    if !(min..=RUNNER_STALLED_MS_MAX).contains(&ms) {
        anyhow::bail!(
            "{RUNNER_STALLED_ENV} must be between {RUNNER_UNRESPONSIVE_ENV} ({min} ms) and {RUNNER_STALLED_MS_MAX} ms, not {ms}"
        );
    }
    Ok(Duration::from_millis(ms))
}

fn warm_demand_window() -> anyhow::Result<Duration> {
    let ms = env_number(WARM_DEMAND_ENV, WARM_DEMAND_MS_DEFAULT)?;
    if !(WARM_DEMAND_MS_MIN..=WARM_DEMAND_MS_MAX).contains(&ms) {
        anyhow::bail!("{WARM_DEMAND_ENV} must be between {WARM_DEMAND_MS_MIN} and {WARM_DEMAND_MS_MAX} ms, not {ms}");
    }
    Ok(Duration::from_millis(ms))
}

fn reclaim_interval() -> anyhow::Result<Duration> {
    let ms = env_number(RECLAIM_INTERVAL_ENV, RECLAIM_INTERVAL_MS_DEFAULT)?;
    if !(RECLAIM_INTERVAL_MS_MIN..=RECLAIM_INTERVAL_MS_MAX).contains(&ms) {
        anyhow::bail!(
            "{RECLAIM_INTERVAL_ENV} must be between {RECLAIM_INTERVAL_MS_MIN} and {RECLAIM_INTERVAL_MS_MAX} ms, not {ms}"
        );
    }
    Ok(Duration::from_millis(ms))
}

/// `PI_WORKFLOWS_RUNNER_MEMORY_MB`: megabytes (at least 64), or `off`.
fn runner_memory_bytes_max() -> anyhow::Result<Option<u64>> {
    let megabytes = match std::env::var(RUNNER_MEMORY_ENV) {
        Err(_) => RUNNER_MEMORY_MB_DEFAULT,
        Ok(value) if value == "off" => return Ok(None),
        Ok(value) => value
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|mb| *mb >= RUNNER_MEMORY_MB_MIN && *mb <= u64::MAX >> 20)
            .with_context(|| format!("{RUNNER_MEMORY_ENV} must be a number of megabytes from {RUNNER_MEMORY_MB_MIN}, or `off`, not {value:?}"))?,
    };
    Ok(Some(megabytes << 20))
}

fn liveness_ms(name: &str, default: u64) -> anyhow::Result<Duration> {
    let ms = env_number(name, default)?;
    if !(RUNNER_LIVENESS_MS_MIN..=RUNNER_LIVENESS_MS_MAX).contains(&ms) {
        anyhow::bail!("{name} must be between {RUNNER_LIVENESS_MS_MIN} and {RUNNER_LIVENESS_MS_MAX} ms, not {ms}");
    }
    Ok(Duration::from_millis(ms))
}

fn resolve_timeout() -> anyhow::Result<Duration> {
    let ms = env_number(RESOLVE_TIMEOUT_ENV, RESOLVE_TIMEOUT_MS_DEFAULT)?;
    if !(1..=RESOLVE_TIMEOUT_MS_MAX).contains(&ms) {
        anyhow::bail!("{RESOLVE_TIMEOUT_ENV} must be between 1 and {RESOLVE_TIMEOUT_MS_MAX} ms, not {ms}");
    }
    Ok(Duration::from_millis(ms))
}

fn connection_deadlines() -> anyhow::Result<ConnectionDeadlines> {
    let bounded = |name: &str, default: u64| -> anyhow::Result<Duration> {
        let ms = env_number(name, default)?;
        if !(1..=CONNECTION_DEADLINE_MS_MAX).contains(&ms) {
            anyhow::bail!("{name} must be between 1 and {CONNECTION_DEADLINE_MS_MAX} ms, not {ms}");
        }
        Ok(Duration::from_millis(ms))
    };
    let first_request = bounded(FIRST_REQUEST_ENV, FIRST_REQUEST_MS_DEFAULT)?;
    Ok(ConnectionDeadlines {
        first_request,
        idle: bounded(CONNECTION_IDLE_ENV, CONNECTION_IDLE_MS_DEFAULT)?,
        reserved_first_request: first_request.min(Duration::from_millis(RESERVED_FIRST_REQUEST_MS)),
    })
}

/// `PI_WORKFLOWS_RUNNER` (a program taking no arguments, e.g. the scripted test runner),
/// else the package's Node runner. Without either, queued runs wait (logged at start).
fn runner_program() -> Option<Program> {
    if let Some(program) = std::env::var_os(RUNNER_ENV).filter(|value| !value.is_empty()) {
        return Some((program.into(), Vec::new()));
    }
    match crate::package::node_program("runner-main.js") {
        Ok(program) => Some((program.node.clone(), program.args())),
        Err(err) => {
            tracing::warn!(error = %err, "no runner program: queued runs wait");
            None
        }
    }
}

/// `PI_WORKFLOWS_RUNNER_SNAPSHOT`: `on` (the default) or `off`.
fn runner_snapshot() -> anyhow::Result<bool> {
    match std::env::var(RUNNER_SNAPSHOT_ENV) {
        Err(_) => Ok(true),
        Ok(value) if value == "on" => Ok(true),
        Ok(value) if value == "off" => Ok(false),
        Ok(value) => anyhow::bail!("{RUNNER_SNAPSHOT_ENV}={value} is neither `on` nor `off`"),
    }
}

/// The retention period from the environment: `None` disables the automatic sweep.
pub fn retention_days() -> anyhow::Result<Option<i64>> {
    match std::env::var(RETENTION_ENV) {
        Err(_) => Ok(Some(retention::RETENTION_DAYS_DEFAULT)),
        Ok(value) if value == "off" => Ok(None),
        Ok(value) => match value.parse::<i64>() {
            Ok(days) if (1..=retention::RETENTION_DAYS_MAX).contains(&days) => Ok(Some(days)),
            _ => anyhow::bail!(
                "{RETENTION_ENV}={value} is not a number of days from 1 to {} or `off`",
                retention::RETENTION_DAYS_MAX
            ),
        },
    }
}
