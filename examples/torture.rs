//! Torture: a mixed workload on the real `pi-workflows` binary and the real Node runner while
//! the server, runner processes and their shell children are SIGKILLed at seeded random
//! moments; invariants are checked after every crash and restart and at the end.
//!
//! ```sh
//! cargo build --release --locked --bins --examples && npm --prefix packages/pi-workflows run build
//! target/release/examples/torture --points 1000 --seed 7        # a full run
//! target/release/examples/torture --points 40 --seed 1 --json   # quick, one JSON document
//! ```
//!
//! The binary is `--bin PATH`, else `pi-workflows` next to this example's directory
//! (`target/<profile>/`). It runs on a fresh state directory under /tmp with
//! `PI_WORKFLOWS_MAX_WORKERS=--workers` (3) and its own agent and config directories.
//!
//! Workload (the `torture-*.workflow.ts` fixtures of tests/fixtures/workflows; the workflow
//! name tags each run's kind): compute chains; shell steps with an idempotent and a manual
//! effect that append a line with the engine's effect key to a recorder file (the external
//! system); checkpoints answered with `checkpoint answer` (the continuation run carries on);
//! protected decisions answered with `decision answer` or left to their 3 s default; an
//! included workflow with an effect under its mount path; declared settings changed with
//! `run settings --set` / `--patch`. Meanwhile the harness pauses and resumes, cancels,
//! restarts finished runs, resumes runs parked for review, reviews every ambiguous effect
//! (`run review`: `--applied` when the recorder has its key, else `--retry` or `--failed`),
//! and keeps two subscribers (`view <id> --json`, `runs --watch --json`) that it kills and
//! restarts freely. Every command goes through the CLI, like a user's.
//!
//! Kill points (`--points`, the schedule is `--seed`'s): after a random delay, or when an
//! effect is applying (aimed), one target is SIGKILLed: the server (restarted with `server
//! start`, or by whichever CLI command comes first: the CLI starts it on demand), the server
//! again while it starts (`server run`, killed a few ms after its spawn: store open or
//! recovery), a runner process (a child of the server running `runner-main`), or a shell
//! child of a runner. Each crash's phase is recorded: `store open` (before the server lease),
//! `recovery` (lease taken, not serving yet), `serving`, or `mid-effect` (serving, with an
//! effect `applying` in the database at the kill, read read-only).
//!
//! Checked (the database read read-only in one snapshot; docs/RELIABILITY.md "Torture"):
//! `state verify`'s invariants; nothing acknowledged lost (runner message receipts, run
//! revisions, and every command the CLI answered as accepted); effects against the recorder
//! (see `check_effects` for the exact rule); each node visit committed at most once; at most
//! one active runner epoch per run, none of an older server once one is ready; no process of
//! an ended runner epoch alive (its group, its registered children, anything carrying its
//! `PI_WORKFLOWS_CHILD_MARK`), and no runner or resolver that is not the live server's child;
//! after the last point every run is driven to an end within `--drain-secs`, none failed, and
//! after `server stop` no process of the run is left.
//!
//! Exit status: 0 with no violation, 1 with any (each printed with the seed and the point
//! index; the schedule replays with the same `--seed`, the timing of real processes does not),
//! 2 when it could not run at all.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{Value, json};

/// The environment entry every process of one torture run carries (the CLI, the server and
/// what the server starts inherit it: it is not a `PI_WORKFLOWS_*` internal).
const LAB_ENV: &str = "PIW_TORTURE_LAB";
const CHILD_MARK_ENV: &str = "PI_WORKFLOWS_CHILD_MARK";
/// A process of an ended runner epoch is a violation once seen alive this long after the end.
const SURVIVOR_GRACE_MS: i64 = 5_000;
/// After `server stop`, processes of the run may take this long to go.
const FINAL_SURVIVOR_WAIT: Duration = Duration::from_secs(30);
/// The decision default of torture-decide (`onTimeout.afterMs`).
const DECISION_DEFAULT_MS: u64 = 3_000;
/// A CLI call that takes longer than this is killed (the CLI's own longest wait is 90 s).
const CLI_TIMEOUT: Duration = Duration::from_secs(100);
/// How long an early kill waits at most for CLI calls in flight (which could start a server).
const GATE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(about = "SIGKILL the pi-workflows server, runners and shells under a mixed workload; check the invariants")]
struct Args {
    /// Kill points (a full run is 1,000 or more).
    #[arg(long, default_value_t = 40)]
    points: usize,
    /// Seed of the kill schedule and of the workload's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The pi-workflows binary (default: next to this example's directory).
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// Print one JSON document on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Runners at once (`PI_WORKFLOWS_MAX_WORKERS`).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Unfinished runs the workload keeps while the points last.
    #[arg(long, default_value_t = 6)]
    active: usize,
    /// Shortest pause before a kill point, in ms.
    #[arg(long, default_value_t = 300)]
    min_delay_ms: u64,
    /// Longest pause before a kill point, in ms.
    #[arg(long, default_value_t = 2_000)]
    max_delay_ms: u64,
    /// After the last point, every run must end within this many seconds.
    #[arg(long, default_value_t = 240)]
    drain_secs: u64,
    /// Keep the state directory (its path is printed).
    #[arg(long)]
    keep: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match torture(args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(err) => {
            eprintln!("torture: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic choices

/// xorshift64*, seeded through splitmix64 (so seeds 0, 1, 2 … give unrelated streams).
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

// ---------------------------------------------------------------------------------------
// The lab: one state directory, the CLI, the database, /proc

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Chain,
    Effects,
    Gate,
    Decide,
    Include,
    Tuned,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Chain,
        Kind::Effects,
        Kind::Gate,
        Kind::Decide,
        Kind::Include,
        Kind::Tuned,
    ];
    /// How often each kind is started (same order as `ALL`).
    const WEIGHTS: [u64; 6] = [2, 3, 2, 2, 2, 2];

    fn file(self) -> &'static str {
        match self {
            Kind::Chain => "torture-chain",
            Kind::Effects => "torture-effects",
            Kind::Gate => "torture-gate",
            Kind::Decide => "torture-decide",
            Kind::Include => "torture-outer",
            Kind::Tuned => "torture-tuned",
        }
    }

    fn of_workflow(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.file() == name)
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Chain => "compute chain",
            Kind::Effects => "idempotent + manual effect",
            Kind::Gate => "checkpoint + manual effect",
            Kind::Decide => "protected decision",
            Kind::Include => "include + idempotent effect",
            Kind::Tuned => "settings changes",
        }
    }
}

struct Lab {
    bin: PathBuf,
    root: PathBuf,
    state: PathBuf,
    project: PathBuf,
    recorder: PathBuf,
    fixtures: PathBuf,
    /// The value of `LAB_ENV` (the root directory's path).
    mark: String,
    workers: usize,
    boot_id: String,
}

struct CliOut {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl CliOut {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }

    fn json(&self) -> Option<Value> {
        let line = self.stdout.lines().rev().find(|line| !line.trim().is_empty())?;
        serde_json::from_str(line).ok()
    }
}

impl Lab {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(&self.project)
            .stdin(Stdio::null())
            .env_remove("PI_WORKFLOWS_RUNNER")
            .env_remove("PI_WORKFLOWS_TEST_SCRIPT")
            .env("PI_CODING_AGENT_DIR", self.root.join("agent"))
            .env("PI_WORKFLOWS_CONFIG_DIR", self.root.join("config"))
            .env("PI_WORKFLOWS_MAX_WORKERS", self.workers.to_string())
            .env("PI_WORKFLOWS_IDLE_EXIT_MS", "3600000")
            .env(LAB_ENV, &self.mark);
        command
    }

    /// Run one CLI command to its end (killed after `CLI_TIMEOUT`).
    fn cli(&self, args: &[&str]) -> CliOut {
        let child = self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) => {
                return CliOut {
                    code: None,
                    stdout: String::new(),
                    stderr: format!("spawn: {err}"),
                };
            }
        };
        let pid = child.id() as i32;
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(child.wait_with_output());
        });
        let output = match receive.recv_timeout(CLI_TIMEOUT) {
            Ok(output) => output,
            Err(_) => {
                sigkill(pid);
                receive.recv().unwrap_or_else(|_| Err(std::io::Error::other("lost")))
            }
        };
        match output {
            Ok(output) => CliOut {
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            },
            Err(err) => CliOut {
                code: None,
                stdout: String::new(),
                stderr: err.to_string(),
            },
        }
    }

    fn db(&self) -> anyhow::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(self.state.join("state.sqlite"), flags)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(conn)
    }

    /// The live server's pid (from its lock file), if that process runs and is this run's
    /// `server run` (a pid reused since is never signalled).
    fn server_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.state.join("server/server.lock")).ok()?;
        let pid: i32 = text.split_whitespace().next()?.parse().ok()?;
        let ours = std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
            environ
                .split(|byte| *byte == 0)
                .any(|item| item == self.lab_entry().as_bytes())
        });
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let serves = cmdline
            .windows(b"server\0run".len())
            .any(|window| window == b"server\0run");
        (ours && serves && alive(pid)).then_some(pid)
    }

    fn lab_entry(&self) -> String {
        format!("{LAB_ENV}={}", self.mark)
    }

    fn socket_inode(&self) -> Option<u64> {
        std::fs::metadata(self.state.join("server/server.sock"))
            .ok()
            .map(|meta| meta.ino())
    }

    fn identity(&self, pid: i32, start: u64) -> String {
        format!("{}:{pid}:{start}", self.boot_id)
    }

    fn tail_log(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.state.join("logs/server.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

fn locate_binary(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let binary = match explicit {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe()?;
            let dir = exe.parent().and_then(Path::parent).context("examples dir")?;
            dir.join("pi-workflows")
        }
    };
    if !binary.is_file() {
        bail!(
            "{} is missing; build it (`cargo build --release --locked --bins --examples`) or pass --bin",
            binary.display()
        );
    }
    Ok(binary.canonicalize()?)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

fn sigkill(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).is_ok()
}

/// `/proc/<pid>/stat`: state, ppid, pgrp, start time (ticks).
fn proc_stat(pid: i32) -> Option<(char, i32, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(1)?.parse().ok()?,
        fields.get(2)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// Runs (a zombie does not: its descriptors, lock and socket are gone).
fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|(state, ..)| !matches!(state, 'Z' | 'X'))
}

/// Clock ticks (1/100 s, Linux's `USER_HZ` for /proc) since boot: the unit of a process's start time.
fn uptime_ticks() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |seconds| seconds * 100.0)
}

/// Some thread of the process still runs. A SIGKILLed server's leader shows as a zombie
/// while its other threads still exit (for some 10 ms), holding its files and so its lock.
fn any_thread_alive(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rfind(')')
                .and_then(|end| stat[end + 1..].split_whitespace().next())
                .is_some_and(|state| !matches!(state, "Z" | "X"))
        })
    })
}

/// Wait until every thread of `pid` is gone (its descriptors closed, its locks released).
fn wait_dead(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) || any_thread_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// A live process of this torture run.
#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    start: u64,
    cmdline: String,
    /// Its `PI_WORKFLOWS_CHILD_MARK` (the log stem of the child of the server it descends from).
    mark: Option<String>,
}

impl Proc {
    fn is_runner(&self) -> bool {
        self.cmdline.contains("runner-main")
    }
}

/// Every live process carrying `LAB_ENV=<mark>`.
fn scan(mark: &str) -> Vec<Proc> {
    let wanted = format!("{LAB_ENV}={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut ours = false;
        let mut child_mark = None;
        for item in environ.split(|byte| *byte == 0) {
            if item == wanted.as_bytes() {
                ours = true;
            } else if let Some(value) = item.strip_prefix(format!("{CHILD_MARK_ENV}=").as_bytes()) {
                child_mark = Some(String::from_utf8_lossy(value).into_owned());
            }
        }
        if !ours {
            continue;
        }
        let Some((state, ppid, pgrp, start)) = proc_stat(pid) else {
            continue;
        };
        if matches!(state, 'Z' | 'X') {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        found.push(Proc {
            pid,
            ppid,
            pgrp,
            start,
            cmdline,
            mark: child_mark,
        });
    }
    found
}

// ---------------------------------------------------------------------------------------
// The recorder (the external system) and what the harness was told

#[derive(Debug, Clone, Default)]
struct Applied {
    count: u32,
    contracts: BTreeSet<String>,
    nodes: BTreeSet<String>,
    pids: Vec<String>,
}

/// The recorder file, read incrementally: one line `<contract> <key> <tag> <node> <pid>` per
/// application of an effect.
#[derive(Default)]
struct Recorder {
    offset: u64,
    partial: String,
    lines: u64,
    malformed: Vec<String>,
    entries: HashMap<String, Applied>,
}

impl Recorder {
    fn refresh(&mut self, path: &Path) {
        let Ok(mut file) = std::fs::File::open(path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return;
        }
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            let fields: Vec<&str> = line.split_whitespace().collect();
            self.lines += 1;
            match fields.as_slice() {
                [contract, key, _tag, node, pid] => {
                    let entry = self.entries.entry(key.to_string()).or_default();
                    entry.count += 1;
                    entry.contracts.insert(contract.to_string());
                    entry.nodes.insert(node.to_string());
                    entry.pids.push(pid.to_string());
                }
                _ => self.malformed.push(line.trim_end().to_string()),
            }
        }
    }

    fn count(&self, key: &str) -> u32 {
        self.entries.get(key).map_or(0, |entry| entry.count)
    }
}

/// A command the CLI answered as accepted: it must be durable.
#[derive(Debug, Clone)]
enum Ack {
    Start {
        run: String,
    },
    Restart {
        from: String,
        run: String,
    },
    Checkpoint {
        run: String,
        continuation: String,
    },
    Decision {
        run: String,
        choice: String,
    },
    Settings {
        run: String,
        change: i64,
    },
    Control {
        op: &'static str,
        run: String,
    },
    Review {
        run: String,
        effect: String,
        resolution: &'static str,
    },
}

impl Ack {
    /// The `host_commands` operation and run it is stored under.
    fn command(&self) -> (&'static str, &str) {
        match self {
            Ack::Start { run } => ("run.start", run),
            Ack::Restart { from, .. } => ("run.restart", from),
            Ack::Checkpoint { run, .. } => ("checkpoint.answer", run),
            Ack::Decision { run, .. } => ("decision.answer", run),
            Ack::Settings { run, .. } => ("run.changeSettings", run),
            Ack::Control { op, run } => (op, run),
            Ack::Review { run, .. } => ("effect.recover", run),
        }
    }
}

/// One review of an ambiguous effect, with what the recorder showed when it was decided.
#[derive(Debug, Clone)]
struct Review {
    effect: String,
    key: String,
    contract: String,
    resolution: &'static str,
    seen: u32,
}

/// The gate early kills close: while it is held no CLI call starts, so none can start a
/// server of its own between the kill and the `server run` that is killed while it starts.
#[derive(Default)]
struct Gate {
    held: AtomicBool,
    inflight: AtomicUsize,
}

impl Gate {
    fn enter(&self) -> GateGuard<'_> {
        loop {
            while self.held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.inflight.fetch_add(1, Ordering::SeqCst);
            if !self.held.load(Ordering::SeqCst) {
                return GateGuard(self);
            }
            self.inflight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Close the gate and wait (bounded) until no call is in flight.
    fn hold(&self) -> bool {
        self.held.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + GATE_WAIT;
        while self.inflight.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

struct GateGuard<'a>(&'a Gate);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one check found: (subject, text); a subject is reported once.
#[derive(Default)]
struct Findings(Vec<(String, String)>);

impl Findings {
    fn push(&mut self, text: String) {
        self.0.push((text.clone(), text));
    }

    fn keyed(&mut self, subject: String, text: String) {
        self.0.push((subject, text));
    }

    fn extend(&mut self, texts: impl IntoIterator<Item = String>) {
        for text in texts {
            self.push(text);
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
struct Found {
    seed: u64,
    point: usize,
    when: String,
    what: String,
}

/// CLI commands the workload sent, by operation: sent, accepted.
#[derive(Debug, Default, Clone)]
struct Counters {
    commands: BTreeMap<&'static str, (u64, u64)>,
    subscriber_starts: u64,
    subscriber_kills: u64,
}

struct Shared {
    lab: Lab,
    seed: u64,
    gate: Gate,
    draining: AtomicBool,
    quit: AtomicBool,
    point: AtomicUsize,
    acks: Mutex<Vec<Ack>>,
    recorder: Mutex<Recorder>,
    reviews: Mutex<Vec<Review>>,
    counters: Mutex<Counters>,
    violations: Mutex<Vec<Found>>,
    /// Subjects already reported (a finding that persists is reported at its first check).
    reported: Mutex<HashSet<String>>,
    subscriber_lines: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn violation(&self, when: &str, what: String) {
        self.violation_of(what.clone(), when, what);
    }

    fn violation_of(&self, subject: String, when: &str, what: String) {
        if !lock(&self.reported).insert(subject) {
            return;
        }
        let point = self.point.load(Ordering::SeqCst);
        eprintln!("torture: VIOLATION (seed {}, point {point}) {when}: {what}", self.seed);
        lock(&self.violations).push(Found {
            seed: self.seed,
            point,
            when: when.to_string(),
            what,
        });
    }

    /// A CLI call of the workload (through the gate), counted by `op`.
    fn call(&self, op: &'static str, args: &[&str]) -> CliOut {
        let out = {
            let _guard = self.gate.enter();
            self.lab.cli(args)
        };
        let mut counters = lock(&self.counters);
        let entry = counters.commands.entry(op).or_default();
        entry.0 += 1;
        if out.ok() {
            entry.1 += 1;
        }
        out
    }

    fn ack(&self, ack: Ack) {
        lock(&self.acks).push(ack);
    }
}

// ---------------------------------------------------------------------------------------
// The workload

/// One unfinished run as the driver reads it.
#[derive(Debug, Clone)]
struct RunRow {
    id: String,
    kind: Option<Kind>,
    status: String,
    queue: String,
    paused: bool,
    detail: String,
    pending: Option<String>,
    ambiguous: i64,
    updated_at: i64,
}

fn unfinished_runs(conn: &Connection) -> rusqlite::Result<Vec<RunRow>> {
    let mut statement = conn.prepare_cached(
        "SELECT r.run_id, r.workflow_name, r.status, q.status, r.paused, ifnull(r.status_detail, ''),
                (SELECT i.kind FROM interactive_requests i WHERE i.run_id = r.run_id AND i.status = 'pending' LIMIT 1),
                (SELECT count(*) FROM effects e WHERE e.run_id = r.run_id AND e.status = 'ambiguous' AND e.owner = 'runner'),
                q.updated_at
         FROM runs r JOIN run_queue q ON q.run_id = r.run_id WHERE r.finished_at IS NULL ORDER BY r.created_at",
    )?;
    let rows = statement.query_map([], |row| {
        let workflow: String = row.get(1)?;
        Ok(RunRow {
            id: row.get(0)?,
            kind: Kind::of_workflow(&workflow),
            status: row.get(2)?,
            queue: row.get(3)?,
            paused: row.get::<_, i64>(4)? == 1,
            detail: row.get(5)?,
            pending: row.get(6)?,
            ambiguous: row.get(7)?,
            updated_at: row.get(8)?,
        })
    })?;
    rows.collect()
}

/// What the driver means to do with one run, chosen when it first sees it waiting or paused.
#[derive(Debug, Default)]
struct Plan {
    answer_at: Option<Instant>,
    /// `Some(None)`: leave the decision to its default.
    decision: Option<Option<(&'static str, Option<String>)>>,
    resume_at: Option<Instant>,
}

struct Driver {
    shared: Arc<Shared>,
    rng: Rng,
    plans: HashMap<String, Plan>,
    started: u64,
    seen: HashSet<String>,
    finished: Vec<String>,
    restarted: HashSet<String>,
    conn: Option<Connection>,
}

impl Driver {
    fn run(mut self) {
        while !self.shared.quit.load(Ordering::SeqCst) {
            if let Err(err) = self.tick() {
                // A read can fail while the server is created or replaced: try again.
                self.conn = None;
                if !self.shared.quit.load(Ordering::SeqCst) {
                    eprintln!("torture: driver: {err:#}");
                }
            }
            let pause = self.rng.range(80, 220);
            std::thread::sleep(Duration::from_millis(pause));
        }
    }

    fn rows(&mut self) -> anyhow::Result<Vec<RunRow>> {
        if self.conn.is_none() {
            self.conn = Some(self.shared.lab.db()?);
        }
        let conn = self.conn.as_ref().expect("connection");
        Ok(unfinished_runs(conn)?)
    }

    fn tick(&mut self) -> anyhow::Result<()> {
        let rows = self.rows()?;
        let draining = self.shared.draining.load(Ordering::SeqCst);
        let live: HashSet<String> = rows.iter().map(|row| row.id.clone()).collect();
        for id in self.seen.iter() {
            if !live.contains(id) {
                self.finished.push(id.clone());
            }
        }
        self.seen.retain(|id| live.contains(id));
        self.plans.retain(|id, _| live.contains(id));
        for row in &rows {
            self.seen.insert(row.id.clone());
            if self.shared.quit.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.handle(row, draining);
        }
        if !draining {
            self.disrupt(&rows);
            if rows.len() < self.target() {
                self.start_one();
            }
        }
        Ok(())
    }

    fn target(&self) -> usize {
        ACTIVE_TARGET.load(Ordering::SeqCst)
    }

    fn handle(&mut self, row: &RunRow, draining: bool) {
        let now = Instant::now();
        // Parked with an ambiguous effect (after a crash, a pause or a cancel of its runner):
        // nothing resumes it before a review.
        if row.ambiguous > 0 && row.queue == "parked" {
            self.review(row);
            return;
        }
        if row.paused {
            let plan = self.plans.entry(row.id.clone()).or_default();
            let resume_at = *plan.resume_at.get_or_insert(now + Duration::from_millis(1_000));
            if draining || now >= resume_at {
                self.resume(&row.id);
            }
            return;
        }
        match (row.status.as_str(), row.queue.as_str(), row.pending.as_deref()) {
            ("waiting", _, Some("checkpoint")) => {
                let delay = self.rng.range(100, 1_500);
                let plan = self.plans.entry(row.id.clone()).or_default();
                let answer_at = *plan.answer_at.get_or_insert(now + Duration::from_millis(delay));
                if draining || now >= answer_at {
                    let approved = draining || self.rng.chance(0.85);
                    let answer = json!({"approved": approved, "n": self.rng.below(1_000)}).to_string();
                    let out = self.shared.call(
                        "checkpoint.answer",
                        &["checkpoint", "answer", &row.id, &answer, "--json"],
                    );
                    if out.ok() {
                        let continuation = out
                            .json()
                            .and_then(|doc| doc["continuationRunId"].as_str().map(str::to_string));
                        match continuation {
                            Some(continuation) => self.shared.ack(Ack::Checkpoint {
                                run: row.id.clone(),
                                continuation,
                            }),
                            None => self.shared.violation(
                                "checkpoint answer",
                                format!(
                                    "run {} answered without a continuation run: {}",
                                    row.id,
                                    out.stdout.trim()
                                ),
                            ),
                        }
                    }
                }
            }
            ("waiting", _, Some("decision")) => {
                let answer_now = self.rng.chance(0.6);
                let choice = match self.rng.below(10) {
                    0..=4 => ("go", None),
                    5..=6 => ("hold", None),
                    _ => ("revise", Some(format!("revise-{}", self.rng.below(1_000)))),
                };
                let delay = self.rng.range(100, DECISION_DEFAULT_MS - 600);
                let plan = self.plans.entry(row.id.clone()).or_default();
                let decision = plan
                    .decision
                    .get_or_insert_with(|| answer_now.then_some(choice))
                    .clone();
                let answer_at = *plan.answer_at.get_or_insert(now + Duration::from_millis(delay));
                let Some((choice, text)) = decision else {
                    return;
                };
                if now >= answer_at {
                    let mut args = vec!["decision", "answer", row.id.as_str(), choice];
                    if let Some(text) = text.as_deref() {
                        args.push(text);
                    }
                    args.push("--json");
                    let out = self.shared.call("decision.answer", &args);
                    if out.ok() {
                        self.shared.ack(Ack::Decision {
                            run: row.id.clone(),
                            choice: choice.to_string(),
                        });
                    }
                    // Answered once: accepted, or refused (expired, settled, paused).
                    if let Some(plan) = self.plans.get_mut(&row.id) {
                        plan.decision = Some(None);
                    }
                }
            }
            ("running", "parked", _) | ("queued", "parked", _) => {
                // Parked for review (a crashed runner, no progress, an effect reviewed) — or
                // at a boundary, which recovery requeues at once: resume it if it stays.
                let stale = now_ms() - row.updated_at > 3_000;
                if row.detail != "boundary" || stale {
                    self.resume(&row.id);
                }
            }
            _ => {}
        }
    }

    fn resume(&mut self, run: &str) {
        let out = self.shared.call("run.resume", &["run", "resume", run, "--json"]);
        if out.ok() {
            self.shared.ack(Ack::Control {
                op: "run.resume",
                run: run.to_string(),
            });
            self.plans.remove(run);
        }
    }

    /// Review every ambiguous effect of a parked run like an operator: the recorder (the
    /// external system) has its key → `--applied`; else `--retry` (or `--failed`).
    fn review(&mut self, row: &RunRow) {
        let effects: Vec<(String, String, String)> = match self.conn.as_ref().map(|conn| {
            conn.prepare_cached(
                "SELECT effect_id, idempotency_key, recovery FROM effects
                 WHERE run_id = ?1 AND status = 'ambiguous' AND owner = 'runner'",
            )
            .and_then(|mut statement| {
                statement
                    .query_map([&row.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
        }) {
            Some(Ok(effects)) => effects,
            _ => return,
        };
        for (effect, key, contract) in effects {
            let seen = {
                let mut recorder = lock(&self.shared.recorder);
                recorder.refresh(&self.shared.lab.recorder);
                recorder.count(&key)
            };
            let resolution = if seen > 0 {
                "applied"
            } else if self.rng.chance(0.75) {
                "retry"
            } else {
                "failed"
            };
            let mut args = vec![
                "run".to_string(),
                "review".to_string(),
                row.id.clone(),
                "--effect".to_string(),
                effect.clone(),
                format!("--{resolution}"),
            ];
            match resolution {
                "applied" => args.extend(["--result".to_string(), r#"{"exitCode":0,"reviewed":true}"#.to_string()]),
                "failed" => args.extend(["--note".to_string(), "torture: not in the recorder".to_string()]),
                _ => {}
            }
            args.push("--json".to_string());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = self.shared.call("effect.recover", &refs);
            if out.ok() {
                self.shared.ack(Ack::Review {
                    run: row.id.clone(),
                    effect: effect.clone(),
                    resolution,
                });
                lock(&self.shared.reviews).push(Review {
                    effect,
                    key,
                    contract,
                    resolution,
                    seen,
                });
            }
        }
        self.resume(&row.id);
    }

    /// Pauses, cancels, settings changes and restarts, at random.
    fn disrupt(&mut self, rows: &[RunRow]) {
        let movable: Vec<&RunRow> = rows.iter().filter(|row| !row.paused).collect();
        if self.rng.chance(0.06)
            && let Some(row) = self.rng.pick(&movable)
        {
            let id = row.id.clone();
            let out = self.shared.call("run.pause", &["run", "pause", &id, "--json"]);
            if out.ok() {
                self.shared.ack(Ack::Control {
                    op: "run.pause",
                    run: id.clone(),
                });
                let resume = self.rng.range(300, 3_000);
                self.plans.entry(id).or_default().resume_at = Some(Instant::now() + Duration::from_millis(resume));
            }
        }
        if self.rng.chance(0.015)
            && let Some(row) = self.rng.pick(&movable)
        {
            let id = row.id.clone();
            let out = self.shared.call("run.cancel", &["run", "cancel", &id, "--json"]);
            if out.ok() {
                self.shared.ack(Ack::Control {
                    op: "run.cancel",
                    run: id,
                });
            }
        }
        let tuned: Vec<&RunRow> = rows.iter().filter(|row| row.kind == Some(Kind::Tuned)).collect();
        if self.rng.chance(0.25)
            && let Some(row) = self.rng.pick(&tuned)
        {
            let id = row.id.clone();
            self.change_settings(&id);
        }
        if self.rng.chance(0.05) {
            let candidates: Vec<String> = self
                .finished
                .iter()
                .filter(|id| !self.restarted.contains(*id))
                .cloned()
                .collect();
            if let Some(id) = self.rng.pick(&candidates).cloned() {
                self.restarted.insert(id.clone());
                let out = self.shared.call("run.restart", &["run", "restart", &id, "--json"]);
                if out.ok() {
                    match out.json().and_then(|doc| doc["runId"].as_str().map(str::to_string)) {
                        Some(run) => self.shared.ack(Ack::Restart { from: id, run }),
                        None => self.shared.violation(
                            "run restart",
                            format!("restart of {id} answered without a run ID: {}", out.stdout.trim()),
                        ),
                    }
                }
            }
        }
    }

    fn change_settings(&mut self, run: &str) {
        let current: Option<i64> = self.conn.as_ref().and_then(|conn| {
            conn.query_row(
                "SELECT change_number FROM run_settings WHERE run_id = ?1",
                [run],
                |row| row.get(0),
            )
            .optional()
            .ok()
            .flatten()
        });
        let mut args: Vec<String> = vec!["run".into(), "settings".into(), run.to_string()];
        match self.rng.below(4) {
            0 | 1 => args.extend(["--set".into(), format!("/step={}", self.rng.range(1, 99))]),
            2 => args.extend([
                "--patch".into(),
                json!([{"op": "add", "path": "/labels/-", "value": format!("l{}", self.rng.below(100))}]).to_string(),
            ]),
            _ => args.extend([
                "--set".into(),
                format!("/mode={}", if self.rng.chance(0.5) { "slow" } else { "fast" }),
            ]),
        }
        if let Some(current) = current
            && self.rng.chance(0.3)
        {
            args.extend(["--expect".into(), current.to_string()]);
        }
        args.push("--json".into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.shared.call("run.changeSettings", &refs);
        if out.ok() {
            match out.json().and_then(|doc| doc["changeNumber"].as_i64()) {
                Some(change) => self.shared.ack(Ack::Settings {
                    run: run.to_string(),
                    change,
                }),
                None => self.shared.violation(
                    "run settings",
                    format!(
                        "settings change of {run} answered without a change number: {}",
                        out.stdout.trim()
                    ),
                ),
            }
        }
    }

    fn start_one(&mut self) {
        let total: u64 = Kind::WEIGHTS.iter().sum();
        let mut roll = self.rng.below(total);
        let mut kind = Kind::Chain;
        for (candidate, weight) in Kind::ALL.into_iter().zip(Kind::WEIGHTS) {
            if roll < weight {
                kind = candidate;
                break;
            }
            roll -= weight;
        }
        self.started += 1;
        let tag = format!("s{}-{}", self.shared.seed, self.started);
        let seconds = |ms: u64| format!("{}.{:03}", ms / 1_000, ms % 1_000);
        let input = json!({
            "tag": tag,
            "recorder": self.shared.lab.recorder.to_string_lossy(),
            "pre": seconds(self.rng.range(50, 600)),
            "post": seconds(self.rng.range(50, 600)),
            "stepMs": self.rng.range(50, 300),
        })
        .to_string();
        let file = self.shared.lab.fixtures.join(format!("{}.workflow.ts", kind.file()));
        let file = file.to_string_lossy().into_owned();
        let out = self
            .shared
            .call("run.start", &["run", "start", &file, "--input-json", &input, "--json"]);
        if out.ok() {
            match out.json().and_then(|doc| doc["runId"].as_str().map(str::to_string)) {
                Some(run) => self.shared.ack(Ack::Start { run }),
                None => self.shared.violation(
                    "run start",
                    format!("a start answered without a run ID: {}", out.stdout.trim()),
                ),
            }
        }
    }
}

static ACTIVE_TARGET: AtomicUsize = AtomicUsize::new(6);

/// Two subscribers (`runs --watch --json`, `view <id> --json`), killed and restarted freely.
fn subscribers(shared: Arc<Shared>, mut rng: Rng) {
    let mut watch: Option<Child> = None;
    let mut view: Option<Child> = None;
    let mut next_kill = Instant::now() + Duration::from_millis(rng.range(500, 4_000));
    let spawn = |args: &[&str]| -> Option<Child> {
        let _guard = shared.gate.enter();
        let mut child = shared
            .lab
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take()?;
        let reader = Arc::clone(&shared);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if line.is_err() {
                    break;
                }
                reader.subscriber_lines.fetch_add(1, Ordering::Relaxed);
            }
        });
        lock(&shared.counters).subscriber_starts += 1;
        // The CLI connects (and may start a server) right away: stay in the gate meanwhile.
        std::thread::sleep(Duration::from_millis(150));
        Some(child)
    };
    let exited = |child: &mut Option<Child>| match child {
        Some(process) => !matches!(process.try_wait(), Ok(None)),
        None => true,
    };
    while !shared.quit.load(Ordering::SeqCst) {
        if exited(&mut watch) {
            watch = spawn(&["runs", "--watch", "--json"]);
        }
        if exited(&mut view) {
            let target = shared
                .lab
                .db()
                .ok()
                .and_then(|conn| unfinished_runs(&conn).ok())
                .and_then(|rows| rng.pick(&rows).map(|row| row.id.clone()));
            if let Some(run) = target {
                view = spawn(&["view", &run, "--json"]);
            }
        }
        if Instant::now() >= next_kill {
            next_kill = Instant::now() + Duration::from_millis(rng.range(500, 4_000));
            let victim = if rng.chance(0.5) { &mut watch } else { &mut view };
            if let Some(process) = victim.as_mut() {
                sigkill(process.id() as i32);
                let _ = process.wait();
                lock(&shared.counters).subscriber_kills += 1;
            }
            *victim = None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for mut process in [watch, view].into_iter().flatten() {
        sigkill(process.id() as i32);
        let _ = process.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Kills

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Target {
    Server,
    ServerStarting,
    Runner,
    WarmRunner,
    Shell,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Server => "server",
            Target::ServerStarting => "server while starting",
            Target::Runner => "runner (running a run)",
            Target::WarmRunner => "runner (warm, no run yet)",
            Target::Shell => "shell child of a runner",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Phase {
    StoreOpen,
    Recovery,
    Serving,
    MidEffect,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::StoreOpen => "store open",
            Phase::Recovery => "recovery",
            Phase::Serving => "serving",
            Phase::MidEffect => "mid-effect",
        }
    }
}

#[derive(Debug, Clone)]
struct Crash {
    target: Target,
    phase: Phase,
}

/// One server outage: the first server SIGKILL of a point, and the runs it interrupted.
#[derive(Debug, Clone)]
struct Outage {
    killed_at_ms: i64,
    interrupted: Vec<String>,
}

/// A runner SIGKILL and the run it served.
#[derive(Debug, Clone)]
struct RunnerKill {
    killed_at_ms: i64,
    run: String,
}

struct Killer {
    shared: Arc<Shared>,
    rng: Rng,
    crashes: Vec<Crash>,
    outages: Vec<Outage>,
    runner_kills: Vec<RunnerKill>,
    restart_ms: Vec<f64>,
    missed_early: u64,
    /// `server start` calls that failed (each retried).
    restart_failures: u64,
    aimed: u64,
    fallbacks: u64,
}

impl Killer {
    fn lab(&self) -> &Lab {
        &self.shared.lab
    }

    /// `server start` until it answers (a CLI of the workload may have started it first).
    fn restart(&mut self, killed: Instant) -> bool {
        for _ in 0..5 {
            let out = self.lab().cli(&["server", "start"]);
            if out.ok() {
                self.restart_ms.push(killed.elapsed().as_secs_f64() * 1e3);
                return true;
            }
            let servers: Vec<String> = scan(&self.lab().mark)
                .into_iter()
                .filter(|proc| proc.cmdline.contains("server run"))
                .map(|proc| format!("{} (parent {})", proc.pid, proc.ppid))
                .collect();
            let started = Instant::now();
            eprintln!(
                "torture: server start failed ({:?}, {} failed restarts so far): {}; servers now: {servers:?}; log tail:\n{}",
                out.code,
                self.restart_failures + 1,
                out.stderr.trim(),
                self.lab().tail_log(8)
            );
            self.restart_failures += 1;
            std::thread::sleep(Duration::from_millis(200).saturating_sub(started.elapsed()));
        }
        false
    }

    /// Whether an effect is `applying` in the database now (read-only).
    fn applying(&self, epoch: Option<&str>) -> bool {
        let Ok(conn) = self.lab().db() else {
            return false;
        };
        let sql = match epoch {
            None => "SELECT count(*) FROM effects WHERE status = 'applying' AND owner = 'runner'",
            Some(_) => {
                "SELECT count(*) FROM effects e JOIN run_workers w ON w.run_id = e.run_id
                 WHERE e.status = 'applying' AND e.owner = 'runner' AND w.runner_epoch = ?1"
            }
        };
        let count: rusqlite::Result<i64> = match epoch {
            None => conn.query_row(sql, [], |row| row.get(0)),
            Some(epoch) => conn.query_row(sql, [epoch], |row| row.get(0)),
        };
        count.is_ok_and(|count| count > 0)
    }

    fn active_runs(&self) -> Vec<String> {
        let Ok(conn) = self.lab().db() else {
            return Vec::new();
        };
        let rows = conn
            .prepare("SELECT run_id FROM run_queue WHERE status IN ('starting', 'running')")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            });
        rows.unwrap_or_default()
    }

    fn lease_generation(&self) -> i64 {
        self.lab()
            .db()
            .ok()
            .and_then(|conn| {
                conn.query_row(
                    "SELECT generation FROM leases WHERE resource_type = 'server'",
                    [],
                    |row| row.get(0),
                )
                .ok()
            })
            .unwrap_or(0)
    }

    /// SIGKILL the serving server; the outage it starts (if it is the point's first).
    fn kill_server(&mut self, outage: &mut Option<Outage>) -> Option<Instant> {
        let pid = self.lab().server_pid()?;
        sigkill(pid);
        let killed = Instant::now();
        let killed_at_ms = now_ms();
        if !wait_dead(pid, Duration::from_secs(30)) {
            self.shared.violation(
                "server kill",
                format!("the server {pid} is still alive 30 s after SIGKILL"),
            );
        }
        let phase = if self.applying(None) {
            Phase::MidEffect
        } else {
            Phase::Serving
        };
        self.crashes.push(Crash {
            target: Target::Server,
            phase,
        });
        if outage.is_none() {
            *outage = Some(Outage {
                killed_at_ms,
                interrupted: self.active_runs(),
            });
        }
        Some(killed)
    }

    /// `server run` killed a few ms after its spawn (store open or recovery); the workload's
    /// CLI calls wait at the gate meanwhile, so none starts a server of its own.
    fn kill_starting(&mut self) -> bool {
        let held = self.shared.gate.hold();
        let mut outage = None;
        self.kill_server(&mut outage);
        let generation = self.lease_generation();
        let socket = self.lab().socket_inode();
        let child = self
            .lab()
            .command(&["server", "run"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            self.shared.gate.release();
            return false;
        };
        // The lease is taken some 4 ms after the spawn: a few kills land before it (the lock,
        // the store's open), more in recovery, some once it serves.
        let wait = match self.rng.below(10) {
            0..=3 => self.rng.range(0, 4),
            4..=6 => self.rng.range(4, 20),
            _ => self.rng.range(20, 150),
        };
        std::thread::sleep(Duration::from_millis(wait));
        let early_exit = matches!(child.try_wait(), Ok(Some(_)));
        sigkill(child.id() as i32);
        let _ = child.wait();
        let killed = Instant::now();
        if early_exit || !held {
            // Another server held the lock (a CLI call started one): nothing was killed while starting.
            self.missed_early += 1;
            let servers: Vec<String> = scan(&self.lab().mark)
                .into_iter()
                .filter(|proc| proc.cmdline.contains("server run"))
                .map(|proc| format!("{} (parent {})", proc.pid, proc.ppid))
                .collect();
            eprintln!(
                "torture: early kill missed (gate held: {held}, exited early: {early_exit}); servers now: {servers:?}"
            );
        } else {
            let phase = if self.lab().socket_inode() != socket && self.lab().socket_inode().is_some() {
                if self.applying(None) {
                    Phase::MidEffect
                } else {
                    Phase::Serving
                }
            } else if self.lease_generation() > generation {
                Phase::Recovery
            } else {
                Phase::StoreOpen
            };
            self.crashes.push(Crash {
                target: Target::ServerStarting,
                phase,
            });
        }
        let ready = self.restart(killed);
        self.shared.gate.release();
        if let Some(outage) = outage {
            self.outages.push(outage);
        }
        ready
    }

    /// A runner process: a child of the server running `runner-main`; its epoch, if assigned.
    fn runners(&self, procs: &[Proc]) -> Vec<(Proc, Option<(String, String)>)> {
        let Some(server) = self.lab().server_pid() else {
            return Vec::new();
        };
        let epochs: HashMap<String, (String, String)> = self
            .lab()
            .db()
            .ok()
            .and_then(|conn| {
                let mut statement = conn
                    .prepare(
                        "SELECT process_start_identity, runner_epoch, run_id FROM run_workers
                         WHERE status IN ('starting', 'ready') AND process_start_identity IS NOT NULL",
                    )
                    .ok()?;
                let rows = statement
                    .query_map([], |row| Ok((row.get::<_, String>(0)?, (row.get(1)?, row.get(2)?))))
                    .ok()?;
                Some(rows.filter_map(Result::ok).collect())
            })
            .unwrap_or_default();
        procs
            .iter()
            .filter(|proc| proc.ppid == server && proc.is_runner())
            .map(|proc| {
                let epoch = epochs.get(&self.lab().identity(proc.pid, proc.start)).cloned();
                (proc.clone(), epoch)
            })
            .collect()
    }

    fn kill_runner(&mut self) -> bool {
        let procs = scan(&self.lab().mark);
        let runners = self.runners(&procs);
        let assigned: Vec<&(Proc, Option<(String, String)>)> =
            runners.iter().filter(|(_, epoch)| epoch.is_some()).collect();
        let warm: Vec<&(Proc, Option<(String, String)>)> =
            runners.iter().filter(|(_, epoch)| epoch.is_none()).collect();
        let choice = if !assigned.is_empty() && (warm.is_empty() || self.rng.chance(0.85)) {
            self.rng.pick(&assigned).copied()
        } else {
            self.rng.pick(&warm).copied()
        };
        let Some((proc, epoch)) = choice.cloned() else {
            return false;
        };
        let phase = match &epoch {
            Some((epoch, _)) if self.applying(Some(epoch)) => Phase::MidEffect,
            _ => Phase::Serving,
        };
        if !sigkill(proc.pid) {
            return false;
        }
        let target = match &epoch {
            Some((_, run)) => {
                self.runner_kills.push(RunnerKill {
                    killed_at_ms: now_ms(),
                    run: run.clone(),
                });
                Target::Runner
            }
            None => Target::WarmRunner,
        };
        self.crashes.push(Crash { target, phase });
        true
    }

    fn kill_shell(&mut self) -> bool {
        let procs = scan(&self.lab().mark);
        let runner_pids: HashSet<i32> = procs
            .iter()
            .filter(|proc| proc.is_runner())
            .map(|proc| proc.pid)
            .collect();
        let shells: Vec<&Proc> = procs
            .iter()
            .filter(|proc| runner_pids.contains(&proc.ppid) && !proc.is_runner())
            .collect();
        let Some(shell) = self.rng.pick(&shells).copied() else {
            return false;
        };
        if !sigkill(shell.pid) {
            return false;
        }
        self.crashes.push(Crash {
            target: Target::Shell,
            phase: Phase::MidEffect,
        });
        true
    }

    /// Wait for an effect to be applying (at most `within`); whether one is.
    fn aim(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.applying(None) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(15));
        }
        false
    }

    /// One kill point; whether a server is known ready afterwards (its startup recovery done).
    fn point(&mut self, min_delay: u64, max_delay: u64) -> bool {
        let delay = self.rng.range(min_delay, max_delay);
        let aimed = self.rng.chance(0.3);
        let roll = self.rng.below(100);
        std::thread::sleep(Duration::from_millis(if aimed { min_delay } else { delay }));
        if aimed && self.aim(Duration::from_millis(max_delay)) {
            self.aimed += 1;
        }
        let mut outage = None;
        let (done, mut ready) = match roll {
            0..=9 => (true, self.kill_starting()),
            10..=44 => (false, false),
            45..=79 => (self.kill_runner(), true),
            _ => (self.kill_shell() || self.kill_runner(), true),
        };
        if !done {
            if roll >= 45 {
                self.fallbacks += 1;
            }
            // No server to kill (it died and nobody restarted it yet): start it anyway.
            let killed = self.kill_server(&mut outage).unwrap_or_else(Instant::now);
            ready = self.restart(killed);
        }
        if let Some(outage) = outage {
            self.outages.push(outage);
        }
        ready
    }
}

// ---------------------------------------------------------------------------------------
// The checker

#[derive(Debug)]
struct Suspect {
    first_seen_ms: i64,
    what: String,
    reported: bool,
}

#[derive(Default)]
struct Checker {
    receipts: HashSet<(String, String)>,
    revisions: HashMap<String, i64>,
    suspects: HashMap<String, Suspect>,
    /// Warm runner log stems (their children's `PI_WORKFLOWS_CHILD_MARK`) → runner epoch.
    stems: HashMap<String, String>,
    /// Applied effects already matched with the recorder (final: checked once).
    confirmed: HashSet<String>,
    checks: u64,
    check_ms_total: f64,
    check_ms_max: f64,
}

#[derive(Debug)]
struct EffectRow {
    id: String,
    run: String,
    effect_type: String,
    key: String,
    recovery: String,
    status: String,
    result_hash: Option<String>,
    node_path: Option<String>,
    visit: Option<i64>,
}

#[derive(Debug)]
struct AttemptRow {
    number: i64,
    /// The run's claim generation the attempt was reserved under.
    generation: i64,
    outcome: Option<String>,
    review: Option<String>,
}

fn strings(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare(sql)?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    rows.collect()
}

fn count(conn: &Connection, sql: &str) -> rusqlite::Result<i64> {
    conn.query_row(sql, [], |row| row.get(0))
}

fn blob_json(conn: &Connection, hash: &str) -> Option<Value> {
    let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
    let bytes: Vec<u8> = conn
        .query_row(
            "SELECT content FROM blobs WHERE blob_hash = ?1 LIMIT 1",
            [hash],
            |row| row.get(0),
        )
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

impl Checker {
    /// Everything that must hold at any moment (the server alive or not); `ready`: a server
    /// has finished its startup recovery since the last crash. `full`: also SQLite's
    /// integrity and foreign-key checks.
    fn check(&mut self, shared: &Shared, when: &str, ready: bool, full: bool) {
        self.checks += 1;
        let started = Instant::now();
        let mut found = Findings::default();
        if let Err(err) = self.check_into(shared, ready, full, &mut found) {
            found.push(format!("the check could not read the database: {err:#}"));
        }
        for (subject, what) in found.0 {
            shared.violation_of(subject, when, what);
        }
        let took = started.elapsed().as_secs_f64() * 1e3;
        self.check_ms_total += took;
        self.check_ms_max = self.check_ms_max.max(took);
    }

    fn check_into(&mut self, shared: &Shared, ready: bool, full: bool, found: &mut Findings) -> anyhow::Result<()> {
        let lab = &shared.lab;
        // What the harness knows before the snapshot must be in it.
        let acks = lock(&shared.acks).clone();
        let before: HashMap<String, u32> = {
            let mut recorder = lock(&shared.recorder);
            recorder.refresh(&lab.recorder);
            recorder
                .entries
                .iter()
                .map(|(key, applied)| (key.clone(), applied.count))
                .collect()
        };
        let conn = lab.db()?;
        conn.execute_batch("BEGIN")?;
        if full {
            let report = pi_workflows::store::verify::verify(&conn)?;
            if report.integrity != ["ok"] {
                found.push(format!("integrity check: {:?}", report.integrity));
            }
            if report.foreign_key_violations != 0 {
                found.push(format!("{} foreign key violations", report.foreign_key_violations));
            }
        }
        for violation in pi_workflows::store::verify::lifecycle_violations(&conn)? {
            found.keyed(
                format!("verify {}", violation.invariant),
                format!("state verify: {}: {} rows", violation.invariant, violation.rows),
            );
        }
        let mut zero = |what: &str, sql: &str| -> anyhow::Result<()> {
            let rows = count(&conn, sql)?;
            if rows != 0 {
                found.keyed(what.to_string(), format!("{what}: {rows}"));
            }
            Ok(())
        };
        zero(
            "runs with more than one active runner epoch",
            "SELECT count(*) FROM (SELECT run_id FROM run_workers WHERE status IN ('starting', 'ready')
             GROUP BY run_id HAVING count(*) > 1)",
        )?;
        zero(
            "node visits committed more than once",
            "SELECT count(*) FROM (SELECT 1 FROM node_attempts WHERE status = 'completed'
             GROUP BY run_id, node_path, visit HAVING count(*) > 1)",
        )?;
        if ready {
            zero(
                "active runner epochs of an older server after its recovery",
                "SELECT count(*) FROM run_workers WHERE status IN ('starting', 'ready')
                 AND server_epoch < (SELECT generation FROM leases WHERE resource_type = 'server')",
            )?;
        }
        self.check_durable(&conn, &acks, found)?;
        self.check_effects(&conn, &before, shared, found)?;
        let epochs = self.epochs(&conn)?;
        conn.execute_batch("COMMIT")?;
        self.check_processes(lab, &epochs, lab.server_pid(), found);
        Ok(())
    }

    /// Nothing acknowledged lost: receipts and revisions never go back, acknowledged commands
    /// are stored with their effect.
    fn check_durable(&mut self, conn: &Connection, acks: &[Ack], found: &mut Findings) -> anyhow::Result<()> {
        let mut statement = conn.prepare("SELECT runner_epoch, message_id FROM runner_messages")?;
        let receipts: HashSet<(String, String)> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let lost = self.receipts.difference(&receipts).count();
        if lost > 0 {
            // Reported each time: a lost receipt is not seen again.
            let sample: Vec<_> = self.receipts.difference(&receipts).take(3).collect();
            found.push(format!("{lost} runner message receipts lost, e.g. {sample:?}"));
        }
        self.receipts = receipts;
        let mut statement = conn.prepare("SELECT run_id, revision FROM runs")?;
        let revisions: HashMap<String, i64> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (run, revision) in &self.revisions {
            match revisions.get(run) {
                None => found.push(format!("run {run} (revision {revision}) disappeared")),
                Some(now) if now < revision => {
                    found.push(format!("run {run} went back from revision {revision} to {now}"))
                }
                _ => {}
            }
        }
        self.revisions = revisions;

        // Acknowledged commands: each stored as an accepted receipt (counted per operation and
        // run), with its effect.
        let mut statement = conn.prepare(
            "SELECT operation, ifnull(run_id, ''), count(*) FROM host_commands WHERE outcome = 'accepted'
             GROUP BY operation, run_id",
        )?;
        let stored: HashMap<(String, String), i64> = statement
            .query_map([], |row| Ok(((row.get(0)?, row.get(1)?), row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut expected: HashMap<(String, String), i64> = HashMap::new();
        for ack in acks {
            let (op, run) = ack.command();
            *expected.entry((op.to_string(), run.to_string())).or_default() += 1;
        }
        for ((op, run), count) in &expected {
            let have = stored.get(&(op.clone(), run.clone())).copied().unwrap_or(0);
            if have < *count {
                found.keyed(
                    format!("receipts {op} {run}"),
                    format!("{count} acknowledged {op} of run {run}, {have} accepted receipts stored"),
                );
            }
        }
        for ack in acks {
            let problem = match ack {
                Ack::Start { run } => (!exists(conn, "SELECT 1 FROM runs WHERE run_id = ?1", [run])?)
                    .then(|| format!("acknowledged run {run} is not in the database")),
                Ack::Restart { from, run } => (!exists(
                    conn,
                    "SELECT 1 FROM runs WHERE run_id = ?1 AND parent_run_id = ?2 AND origin = 'restart'",
                    [run, from],
                )?)
                .then(|| format!("acknowledged restart {run} of {from} is not in the database")),
                Ack::Checkpoint { run, continuation } => (!exists(
                    conn,
                    "SELECT 1 FROM runs c JOIN runs p ON p.run_id = c.parent_run_id
                     WHERE c.run_id = ?1 AND c.parent_run_id = ?2 AND c.origin = 'continuation'
                       AND p.status = 'completed' AND p.status_detail = 'continued'",
                    [continuation, run],
                )?)
                .then(|| {
                    format!("acknowledged checkpoint answer of {run} (continuation {continuation}) is not durable")
                }),
                Ack::Decision { run, choice } => {
                    let responses = {
                        let mut statement = conn.prepare_cached(
                            "SELECT s.response_hash FROM human_decision_resolutions s
                             JOIN human_decisions d ON d.decision_id = s.decision_id
                             WHERE d.run_id = ?1 AND s.provenance = 'human' AND s.outcome = 'accepted'",
                        )?;
                        statement
                            .query_map([run], |row| row.get::<_, Option<String>>(0))?
                            .collect::<rusqlite::Result<Vec<_>>>()?
                    };
                    let ours = responses.iter().flatten().any(|hash| {
                        blob_json(conn, hash).is_some_and(|response| response["choice"] == choice.as_str())
                    });
                    (!ours).then(|| format!("acknowledged decision answer {choice} of {run} did not win"))
                }
                Ack::Settings { run, change } => (!exists(
                    conn,
                    "SELECT 1 FROM run_setting_changes WHERE run_id = ?1 AND change_number = ?2 AND actor = 'human'",
                    rusqlite::params![run, change],
                )?)
                .then(|| format!("acknowledged settings change {change} of {run} is not in the database")),
                Ack::Control { op: "run.cancel", run } => (!exists(
                    conn,
                    "SELECT 1 FROM runs WHERE run_id = ?1 AND finished_at IS NOT NULL",
                    [run],
                )?)
                .then(|| format!("acknowledged cancel of {run}, and the run is not terminal")),
                Ack::Control { .. } => None,
                Ack::Review { effect, resolution, .. } => (!exists(
                    conn,
                    "SELECT 1 FROM effect_attempts WHERE effect_id = ?1 AND review = ?2",
                    rusqlite::params![effect, resolution],
                )?)
                .then(|| format!("acknowledged review {resolution} of effect {effect} is not in the database")),
            };
            found.extend(problem);
        }
        Ok(())
    }

    /// Effects against the recorder (the external system), in one snapshot; `before` is the
    /// recorder read just before it, so every line it holds was reserved in the snapshot.
    ///
    /// The rule: every application carries the key of a reserved effect, of its node and
    /// contract; an effect is applied at most once per granted attempt (attempt n > 1 only
    /// after attempt n − 1 was interrupted — idempotent only — or reviewed `retry`); a manual
    /// effect is never interrupted (an uncertain attempt is `ambiguous`) and, since the
    /// harness retries only what the recorder does not have, is applied at most once; a
    /// node visit has one key; an effect `applied` by a shell that exited 0, or reviewed
    /// `applied`, is in the recorder; an `applying` effect's open attempt belongs to an
    /// active runner epoch.
    fn check_effects(
        &mut self,
        conn: &Connection,
        before: &HashMap<String, u32>,
        shared: &Shared,
        found: &mut Findings,
    ) -> anyhow::Result<()> {
        let mut statement = conn.prepare(
            "SELECT e.effect_id, e.run_id, e.effect_type, e.idempotency_key, e.recovery, e.status, e.result_hash,
                    a.node_path, a.visit
             FROM effects e LEFT JOIN node_attempts a ON a.attempt_id = e.attempt_id WHERE e.owner = 'runner'",
        )?;
        let effects: Vec<EffectRow> = statement
            .query_map([], |row| {
                Ok(EffectRow {
                    id: row.get(0)?,
                    run: row.get(1)?,
                    effect_type: row.get(2)?,
                    key: row.get(3)?,
                    recovery: row.get(4)?,
                    status: row.get(5)?,
                    result_hash: row.get(6)?,
                    node_path: row.get(7)?,
                    visit: row.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut statement = conn.prepare(
            "SELECT t.effect_id, t.attempt_number, t.lease_generation, t.outcome, t.review FROM effect_attempts t
             JOIN effects e ON e.effect_id = t.effect_id WHERE e.owner = 'runner' ORDER BY t.effect_id, t.attempt_number",
        )?;
        let mut attempts: HashMap<String, Vec<AttemptRow>> = HashMap::new();
        for row in statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                AttemptRow {
                    number: row.get(1)?,
                    generation: row.get(2)?,
                    outcome: row.get(3)?,
                    review: row.get(4)?,
                },
            ))
        })? {
            let (effect, attempt) = row?;
            attempts.entry(effect).or_default().push(attempt);
        }
        let mut statement =
            conn.prepare("SELECT run_id, generation FROM run_workers WHERE status IN ('starting', 'ready')")?;
        let active: HashSet<(String, i64)> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let by_key: HashMap<&str, &EffectRow> = effects.iter().map(|effect| (effect.key.as_str(), effect)).collect();
        // Read again inside the snapshot: whatever the snapshot calls applied is in the file now.
        let (malformed, lines) = {
            let mut recorder = lock(&shared.recorder);
            recorder.refresh(&shared.lab.recorder);
            (recorder.malformed.clone(), recorder.entries.clone())
        };
        if !malformed.is_empty() {
            found.push(format!("malformed recorder lines: {malformed:?}"));
        }
        for (key, times) in before {
            let Some(effect) = by_key.get(key.as_str()) else {
                found.push(format!("effect key {key} applied {times}× without a reservation"));
                continue;
            };
            let granted = attempts.get(&effect.id).map_or(0, Vec::len) as u32;
            if *times > granted {
                found.keyed(
                    format!("granted {}", effect.id),
                    format!(
                        "{} effect {} ({key}) applied {times}× with {granted} granted attempt(s)",
                        effect.recovery, effect.id
                    ),
                );
            }
            if effect.recovery == "manual" && *times > 1 {
                found.keyed(
                    format!("twice {}", effect.id),
                    format!("manual effect {} ({key}) applied {times}×", effect.id),
                );
            }
            if let Some(applied) = lines.get(key) {
                let node = effect.node_path.clone().unwrap_or_default();
                let contract = match effect.recovery.as_str() {
                    "manual" => "manual",
                    _ => "idempotent",
                };
                if applied.nodes.iter().any(|line_node| *line_node != node)
                    || applied.contracts.iter().any(|line| line != contract)
                {
                    found.push(format!(
                        "effect key {key} of node {node} ({contract}) applied as {:?} {:?}",
                        applied.nodes, applied.contracts
                    ));
                }
            }
        }
        let mut keys_of_visit: HashMap<(&str, &str, &str, i64), HashSet<&str>> = HashMap::new();
        for effect in &effects {
            let list = attempts.get(&effect.id).map(Vec::as_slice).unwrap_or(&[]);
            for pair in list.windows(2) {
                let (previous, next) = (&pair[0], &pair[1]);
                let reviewed_retry = previous.review.as_deref() == Some("retry");
                let interrupted = previous.outcome.as_deref() == Some("interrupted");
                let allowed = match effect.recovery.as_str() {
                    "manual" => reviewed_retry,
                    _ => reviewed_retry || interrupted,
                };
                if !allowed || next.number != previous.number + 1 {
                    found.push(format!(
                        "{} effect {} got attempt {} after attempt {} ended {:?} (review {:?})",
                        effect.recovery, effect.id, next.number, previous.number, previous.outcome, previous.review
                    ));
                }
            }
            if effect.recovery == "manual"
                && list
                    .iter()
                    .any(|attempt| attempt.outcome.as_deref() == Some("interrupted"))
            {
                found.push(format!(
                    "manual effect {} has an interrupted attempt (uncertain, so it must be ambiguous)",
                    effect.id
                ));
            }
            let open: Vec<&AttemptRow> = list.iter().filter(|attempt| attempt.outcome.is_none()).collect();
            match (effect.status.as_str(), open.as_slice()) {
                ("applying", [attempt]) if active.contains(&(effect.run.clone(), attempt.generation)) => {}
                ("applying", [attempt]) => found.push(format!(
                    "effect {} is applying under claim generation {} of run {}, which no active runner epoch holds",
                    effect.id, attempt.generation, effect.run
                )),
                ("applying", _) => found.push(format!(
                    "effect {} is applying with {} open attempts",
                    effect.id,
                    open.len()
                )),
                (status, [_, ..]) => found.push(format!("effect {} is {status} with an open attempt", effect.id)),
                _ => {}
            }
            if let (Some(node), Some(visit)) = (effect.node_path.as_deref(), effect.visit) {
                keys_of_visit
                    .entry((effect.run.as_str(), effect.effect_type.as_str(), node, visit))
                    .or_default()
                    .insert(effect.key.as_str());
            }
            if effect.status == "applied" && !self.confirmed.contains(&effect.id) {
                let reviewed = list.iter().any(|attempt| attempt.review.as_deref() == Some("applied"));
                let exited_zero = effect
                    .result_hash
                    .as_deref()
                    .and_then(|hash| blob_json(conn, hash))
                    .is_some_and(|receipt| receipt["exitCode"] == 0);
                let times = lines.get(&effect.key).map_or(0, |applied| applied.count);
                if (reviewed || exited_zero) && times == 0 {
                    found.push(format!(
                        "effect {} ({}) is applied in the store ({}) but not in the recorder",
                        effect.id,
                        effect.key,
                        if reviewed { "reviewed applied" } else { "exit 0" }
                    ));
                }
                self.confirmed.insert(effect.id.clone());
            }
        }
        for ((run, effect_type, node, visit), keys) in keys_of_visit {
            if keys.len() > 1 {
                found.push(format!(
                    "run {run} node {node} visit {visit} ({effect_type}) has {} effect keys",
                    keys.len()
                ));
            }
        }
        // A review said "not there" (retry/failed): the recorder must not have it since.
        for review in lock(&shared.reviews).iter() {
            let times = lines.get(&review.key).map_or(0, |applied| applied.count);
            if review.contract == "manual" && review.resolution != "applied" && times > review.seen + 1 {
                found.keyed(
                    format!("reviewed {}", review.effect),
                    format!(
                        "manual effect {} reviewed {} with {} application(s), now {times}",
                        review.effect, review.resolution, review.seen
                    ),
                );
            }
        }
        Ok(())
    }

    /// Runner epochs: identity → (epoch, ended at), and the stems of warm runners assigned.
    fn epochs(&mut self, conn: &Connection) -> anyhow::Result<Epochs> {
        let mut statement =
            conn.prepare("SELECT runner_epoch, pid, process_start_identity, finished_at FROM run_workers")?;
        let mut epochs = Epochs::default();
        for row in statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, Option<i64>>(3)?,
            ))
        })? {
            let (epoch, pid, identity, finished) = row?;
            if let Some(identity) = &identity {
                epochs.by_identity.insert(identity.clone(), epoch.clone());
            }
            if let (Some(finished), Some(pid), Some(identity)) = (finished, pid, identity) {
                epochs
                    .ended_groups
                    .push((epoch.clone(), pid as i32, identity, finished));
            }
            epochs.status.insert(epoch, finished);
        }
        let mut statement = conn.prepare(
            "SELECT p.runner_epoch, p.pid, p.process_start_identity, w.finished_at FROM runner_processes p
             JOIN run_workers w ON w.runner_epoch = p.runner_epoch WHERE w.finished_at IS NOT NULL",
        )?;
        for row in statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, i64>(3)?,
            ))
        })? {
            let (epoch, pid, identity, finished) = row?;
            epochs.ended_groups.push((epoch, pid as i32, identity, finished));
        }
        Ok(epochs)
    }

    /// No process of an ended runner epoch outlives it by more than the grace: not the
    /// runner, not a member of its group or of a group it registered, nothing carrying its mark.
    fn check_processes(&mut self, lab: &Lab, epochs: &Epochs, server: Option<i32>, found: &mut Findings) {
        let procs = scan(&lab.mark);
        for proc in procs.iter().filter(|proc| proc.is_runner()) {
            if let (Some(stem), Some(epoch)) = (
                proc.mark.as_ref(),
                epochs.by_identity.get(&lab.identity(proc.pid, proc.start)),
            ) {
                self.stems.insert(stem.clone(), epoch.clone());
            }
        }
        let now = now_ms();
        // Only a process that started before its epoch ended survived it (a pid reused since
        // can lead a new group with the same number).
        let ticks_now = uptime_ticks();
        let started_before = |proc: &Proc, finished: i64| -> bool {
            let finished_ticks = ticks_now - (now - finished).max(0) as f64 / 10.0;
            (proc.start as f64) <= finished_ticks + 1.0
        };
        let mut current: HashMap<String, (String, i64)> = HashMap::new();
        for (epoch, pid, identity, finished) in &epochs.ended_groups {
            for proc in procs
                .iter()
                .filter(|proc| (proc.pgrp == *pid || proc.pid == *pid) && started_before(proc, *finished))
            {
                // A reused pid leads a new group of its own: not this epoch's.
                let leader = procs.iter().find(|candidate| candidate.pid == *pid);
                if leader.is_some_and(|leader| lab.identity(leader.pid, leader.start) != *identity) {
                    continue;
                }
                current.insert(
                    lab.identity(proc.pid, proc.start),
                    (
                        format!(
                            "process {} ({}) of group {pid} of ended runner epoch {epoch}",
                            proc.pid,
                            proc.cmdline.trim()
                        ),
                        *finished,
                    ),
                );
            }
        }
        for proc in &procs {
            let Some(stem) = proc.mark.as_ref() else { continue };
            let epoch = self.stems.get(stem).cloned().unwrap_or_else(|| stem.clone());
            if let Some(Some(finished)) = epochs.status.get(&epoch)
                && started_before(proc, *finished)
            {
                current.insert(
                    lab.identity(proc.pid, proc.start),
                    (
                        format!(
                            "process {} ({}) marked {stem} of ended runner epoch {epoch}",
                            proc.pid,
                            proc.cmdline.trim()
                        ),
                        *finished,
                    ),
                );
            }
        }
        // A runner or resolver the live server does not own (an older server's, left behind).
        if let Some(server) = server {
            for proc in procs
                .iter()
                .filter(|proc| (proc.is_runner() || proc.cmdline.contains("resolver-main")) && proc.ppid != server)
            {
                current.entry(lab.identity(proc.pid, proc.start)).or_insert((
                    format!(
                        "process {} ({}) is not a child of the live server {server}",
                        proc.pid,
                        proc.cmdline.trim()
                    ),
                    i64::MAX,
                ));
            }
        }
        self.suspects.retain(|identity, _| current.contains_key(identity));
        for (identity, (what, finished)) in current {
            let suspect = self.suspects.entry(identity).or_insert(Suspect {
                first_seen_ms: now,
                what,
                reported: false,
            });
            // Since its epoch ended, or (no epoch) since it was first seen.
            let since = if finished == i64::MAX {
                suspect.first_seen_ms
            } else {
                finished
            };
            if !suspect.reported
                && now - since > SURVIVOR_GRACE_MS
                && now - suspect.first_seen_ms > SURVIVOR_GRACE_MS / 2
            {
                suspect.reported = true;
                found.push(format!("{} is alive {} ms later", suspect.what, now - since));
            }
        }
    }
}

#[derive(Default)]
struct Epochs {
    by_identity: HashMap<String, String>,
    /// Epoch → finished_at (None while active).
    status: HashMap<String, Option<i64>>,
    /// (epoch, group leader pid, its start identity, finished_at) of every ended epoch's
    /// runner and of every process it registered.
    ended_groups: Vec<(String, i32, String, i64)>,
}

fn exists(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(params, |_| Ok(()))
        .optional()?
        .is_some())
}

// ---------------------------------------------------------------------------------------
// The run

fn torture(args: Args) -> anyhow::Result<bool> {
    if args.min_delay_ms > args.max_delay_ms {
        bail!("--min-delay-ms is above --max-delay-ms");
    }
    let bin = locate_binary(args.bin.clone())?;
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workflows");
    if !fixtures.join("torture-chain.workflow.ts").is_file() {
        bail!("the torture fixtures are missing under {}", fixtures.display());
    }
    let dir = tempfile::Builder::new().prefix("piwt").tempdir_in("/tmp")?;
    let root = dir.path().to_path_buf();
    let lab = Lab {
        bin,
        state: root.join("state"),
        project: root.join("project"),
        recorder: root.join("recorder"),
        fixtures,
        mark: root.to_string_lossy().into_owned(),
        workers: args.workers.max(1),
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
            .trim()
            .to_string(),
        root,
    };
    std::fs::create_dir_all(&lab.project)?;
    std::fs::write(&lab.recorder, "")?;
    ACTIVE_TARGET.store(args.active.max(1), Ordering::SeqCst);
    eprintln!(
        "torture: {} points, seed {}, {} ({} workers), state {}",
        args.points,
        args.seed,
        lab.bin.display(),
        lab.workers,
        lab.state.display()
    );
    let started = Instant::now();
    let out = lab.cli(&["server", "start"]);
    if !out.ok() {
        bail!(
            "the first server start failed: {}\n{}",
            out.stderr.trim(),
            lab.tail_log(20)
        );
    }
    let shared = Arc::new(Shared {
        lab,
        seed: args.seed,
        gate: Gate::default(),
        draining: AtomicBool::new(false),
        quit: AtomicBool::new(false),
        point: AtomicUsize::new(0),
        acks: Mutex::new(Vec::new()),
        recorder: Mutex::new(Recorder::default()),
        reviews: Mutex::new(Vec::new()),
        counters: Mutex::new(Counters::default()),
        violations: Mutex::new(Vec::new()),
        reported: Mutex::new(HashSet::new()),
        subscriber_lines: AtomicU64::new(0),
    });
    let driver = Driver {
        shared: Arc::clone(&shared),
        rng: Rng::new(args.seed, 2),
        plans: HashMap::new(),
        started: 0,
        seen: HashSet::new(),
        finished: Vec::new(),
        restarted: HashSet::new(),
        conn: None,
    };
    let driver = std::thread::spawn(move || driver.run());
    let watchers = {
        let shared = Arc::clone(&shared);
        let rng = Rng::new(args.seed, 3);
        std::thread::spawn(move || subscribers(shared, rng))
    };
    let mut killer = Killer {
        shared: Arc::clone(&shared),
        rng: Rng::new(args.seed, 1),
        crashes: Vec::new(),
        outages: Vec::new(),
        runner_kills: Vec::new(),
        restart_ms: Vec::new(),
        missed_early: 0,
        restart_failures: 0,
        aimed: 0,
        fallbacks: 0,
    };
    let mut checker = Checker::default();
    checker.check(&shared, "start", true, true);

    for point in 1..=args.points {
        shared.point.store(point, Ordering::SeqCst);
        let ready = killer.point(args.min_delay_ms, args.max_delay_ms);
        checker.check(&shared, "after the kill and restart", ready, point % 50 == 0);
        if point % 10 == 0 || point == args.points {
            let runs = count(&shared.lab.db()?, "SELECT count(*) FROM runs").unwrap_or(0);
            eprintln!(
                "torture: point {point}/{} · {} crashes · {runs} runs · {} violations · {:.0} s",
                args.points,
                killer.crashes.len(),
                lock(&shared.violations).len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let points_done = started.elapsed();

    // Drain: no more kills or disruptions; answer, review and resume until every run ended.
    shared.point.store(args.points + 1, Ordering::SeqCst);
    shared.draining.store(true, Ordering::SeqCst);
    if shared.lab.server_pid().is_none() {
        killer.restart(Instant::now());
    }
    let deadline = Instant::now() + Duration::from_secs(args.drain_secs);
    let mut last_check = Instant::now();
    loop {
        let unfinished = count(&shared.lab.db()?, "SELECT count(*) FROM runs WHERE finished_at IS NULL")?;
        if unfinished == 0 || Instant::now() > deadline {
            break;
        }
        if shared.lab.server_pid().is_none() {
            killer.restart(Instant::now());
        }
        if last_check.elapsed() > Duration::from_secs(10) {
            checker.check(&shared, "while draining", true, false);
            last_check = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let drain = started.elapsed() - points_done;
    checker.check(&shared, "after draining", true, true);
    shared.quit.store(true, Ordering::SeqCst);
    let _ = driver.join();
    let _ = watchers.join();

    let conn = shared.lab.db()?;
    for stuck in strings(
        &conn,
        "SELECT r.run_id || ' ' || r.workflow_name || ' ' || r.status || '/' || q.status || ' ' ||
                ifnull(r.status_detail, '-') || (CASE WHEN r.paused = 1 THEN ' paused' ELSE '' END)
         FROM runs r JOIN run_queue q ON q.run_id = r.run_id WHERE r.finished_at IS NULL",
    )? {
        shared.violation("at the end", format!("run not driven to an end: {stuck}"));
    }
    for failed in strings(
        &conn,
        "SELECT r.run_id || ' ' || r.workflow_name || ' ' || r.status || ' ' || ifnull(r.status_detail, '-') || ' ' ||
                ifnull((SELECT CAST(content AS TEXT) FROM blobs b WHERE b.blob_hash = r.error_hash LIMIT 1), '')
         FROM runs r WHERE r.status IN ('failed', 'timed_out')",
    )? {
        shared.violation("at the end", format!("the workload never fails a run, but: {failed}"));
    }
    drop(conn);

    let stop = shared.lab.cli(&["server", "stop"]);
    if !stop.ok() {
        shared.violation("at the end", format!("server stop failed: {}", stop.stderr.trim()));
    }
    let survivors_deadline = Instant::now() + FINAL_SURVIVOR_WAIT;
    let mut survivors = scan(&shared.lab.mark);
    while !survivors.is_empty() && Instant::now() < survivors_deadline {
        std::thread::sleep(Duration::from_millis(100));
        survivors = scan(&shared.lab.mark);
    }
    for proc in &survivors {
        shared.violation(
            "after server stop",
            format!(
                "process {} ({}) of this run is still alive",
                proc.pid,
                proc.cmdline.trim()
            ),
        );
    }
    checker.check(&shared, "after server stop", false, true);
    let conn = shared.lab.db()?;
    let active = count(
        &conn,
        "SELECT count(*) FROM run_workers WHERE status IN ('starting', 'ready')",
    )?;
    if active != 0 {
        shared.violation("after server stop", format!("{active} runner epochs still active"));
    }
    let applying = count(&conn, "SELECT count(*) FROM effects WHERE status = 'applying'")?;
    if applying != 0 {
        shared.violation("after server stop", format!("{applying} effects still applying"));
    }
    let report = Report::build(&args, &shared, &killer, &checker, &conn, points_done, drain)?;
    drop(conn);
    if args.json {
        // The document on stdout; the table still on stderr, for a person watching.
        println!("{}", serde_json::to_string_pretty(&report.json)?);
        eprint!("{}", report.table);
    } else {
        print!("{}", report.table);
    }
    let clean = lock(&shared.violations).is_empty();
    if args.keep || !clean {
        let kept = dir.keep();
        eprintln!("torture: state kept in {}", kept.display());
    }
    Ok(clean)
}

// ---------------------------------------------------------------------------------------
// The report

struct Report {
    json: Value,
    table: String,
}

fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[index.min(sorted.len() - 1)])
}

fn summary(samples: &[f64]) -> Value {
    json!({
        "samples": samples.len(),
        "p50Ms": percentile(samples, 50.0).map(|v| (v * 10.0).round() / 10.0),
        "p90Ms": percentile(samples, 90.0).map(|v| (v * 10.0).round() / 10.0),
        "maxMs": percentile(samples, 100.0).map(|v| (v * 10.0).round() / 10.0),
    })
}

fn ms(value: Option<f64>) -> String {
    value.map_or("-".to_string(), |v| format!("{v:.0} ms"))
}

/// The first event of `kind` of `run` after `after`, before `before`, unless a command of the
/// harness for the run (a review, a resume: a `host_commands` row) came first. (Startup
/// recovery's requeue of a run parked at a boundary is a `run.resumed` event of its own.)
fn first_event(conn: &Connection, run: &str, kind: &str, after: i64, before: i64, client_ok: bool) -> Option<i64> {
    let at: Option<i64> = conn
        .query_row(
            "SELECT min(created_at) FROM events WHERE run_id = ?1 AND event_type = ?2 AND created_at > ?3 AND created_at < ?4",
            rusqlite::params![run, kind, after, before],
            |row| row.get(0),
        )
        .ok()
        .flatten();
    let at = at?;
    if client_ok {
        return Some(at);
    }
    let client: Option<i64> = conn
        .query_row(
            "SELECT min(created_at) FROM host_commands WHERE run_id = ?1 AND created_at > ?2",
            rusqlite::params![run, after],
            |row| row.get(0),
        )
        .ok()
        .flatten();
    match client {
        Some(client) if client <= at => None,
        _ => Some(at),
    }
}

impl Report {
    fn build(
        args: &Args,
        shared: &Shared,
        killer: &Killer,
        checker: &Checker,
        conn: &Connection,
        points_done: Duration,
        drain: Duration,
    ) -> anyhow::Result<Report> {
        // Crashes by phase and by target.
        let mut by_phase: BTreeMap<&str, u64> = BTreeMap::new();
        let mut by_target: BTreeMap<&str, u64> = BTreeMap::new();
        let mut matrix: BTreeMap<(Target, Phase), u64> = BTreeMap::new();
        for crash in &killer.crashes {
            *by_phase.entry(crash.phase.label()).or_default() += 1;
            *by_target.entry(crash.target.label()).or_default() += 1;
            *matrix.entry((crash.target, crash.phase)).or_default() += 1;
        }
        // Runs by kind and outcome.
        let mut statement =
            conn.prepare("SELECT workflow_name, origin, status, ifnull(status_detail, '') FROM runs")?;
        let mut runs: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut kinds: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for row in statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
            ))
        })? {
            let (workflow, origin, status, detail) = row?;
            let kind = Kind::of_workflow(&workflow).map_or(workflow.clone(), |kind| kind.label().to_string());
            let outcome = match (status.as_str(), detail.as_str()) {
                ("completed", "continued") => "continued".to_string(),
                (status, _) => status.to_string(),
            };
            *runs.entry((kind.clone(), outcome.clone())).or_default() += 1;
            *kinds
                .entry(kind)
                .or_default()
                .entry(format!("origin {origin}"))
                .or_default() += 1;
        }
        // Decisions by how they were settled, and runs by origin.
        let mut statement = conn.prepare(
            "SELECT provenance, count(*) FROM human_decision_resolutions GROUP BY provenance ORDER BY provenance",
        )?;
        let decisions: BTreeMap<String, i64> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut statement = conn.prepare("SELECT origin, count(*) FROM runs GROUP BY origin ORDER BY origin")?;
        let origins: BTreeMap<String, i64> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        // Effects.
        let mut statement = conn.prepare(
            "SELECT recovery, status, count(*) FROM effects WHERE owner = 'runner' GROUP BY recovery, status",
        )?;
        let mut effects: BTreeMap<(String, String), i64> = BTreeMap::new();
        for row in statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get(2)?))
        })? {
            let (recovery, status, n) = row?;
            effects.insert((recovery, status), n);
        }
        let reviews: Vec<Review> = lock(&shared.reviews).clone();
        let mut reviewed: BTreeMap<(String, &str), u64> = BTreeMap::new();
        for review in &reviews {
            *reviewed
                .entry((review.contract.clone(), review.resolution))
                .or_default() += 1;
        }
        let ever_ambiguous = count(
            conn,
            "SELECT count(DISTINCT t.effect_id) FROM effect_attempts t JOIN effects e ON e.effect_id = t.effect_id
             WHERE e.owner = 'runner' AND t.outcome = 'ambiguous'",
        )?;
        let interrupted = count(
            conn,
            "SELECT count(*) FROM effect_attempts t JOIN effects e ON e.effect_id = t.effect_id
             WHERE e.owner = 'runner' AND t.outcome = 'interrupted'",
        )?;
        let (recorder_lines, repeated_keys, repeats) = {
            let recorder = lock(&shared.recorder);
            let repeated: Vec<&Applied> = recorder.entries.values().filter(|applied| applied.count > 1).collect();
            (
                recorder.lines,
                repeated.len(),
                repeated.iter().map(|applied| u64::from(applied.count - 1)).sum::<u64>(),
            )
        };
        // Crash-to-resume: a server SIGKILL → the interrupted run running again / its next
        // node committed (events), before the next outage and before any command of the harness.
        let mut running_again = Vec::new();
        let mut next_node = Vec::new();
        for (index, outage) in killer.outages.iter().enumerate() {
            let next = killer.outages.get(index + 1).map_or(i64::MAX, |next| next.killed_at_ms);
            for run in &outage.interrupted {
                if let Some(at) = first_event(conn, run, "run.running", outage.killed_at_ms, next, false) {
                    running_again.push((at - outage.killed_at_ms) as f64);
                }
                if let Some(at) = first_event(conn, run, "node.finished", outage.killed_at_ms, next, false) {
                    next_node.push((at - outage.killed_at_ms) as f64);
                }
            }
        }
        let mut runner_again = Vec::new();
        for kill in &killer.runner_kills {
            let next = killer
                .outages
                .iter()
                .map(|outage| outage.killed_at_ms)
                .find(|at| *at > kill.killed_at_ms)
                .unwrap_or(i64::MAX);
            if let Some(at) = first_event(conn, &kill.run, "run.running", kill.killed_at_ms, next, true) {
                runner_again.push((at - kill.killed_at_ms) as f64);
            }
        }
        let counters = lock(&shared.counters).clone();
        let violations: Vec<Found> = lock(&shared.violations).clone();
        let acks = lock(&shared.acks).len();

        let json = json!({
            "seed": args.seed,
            "points": args.points,
            "binary": shared.lab.bin.display().to_string(),
            "workers": shared.lab.workers,
            "pointsSeconds": (points_done.as_secs_f64() * 10.0).round() / 10.0,
            "drainSeconds": (drain.as_secs_f64() * 10.0).round() / 10.0,
            "crashes": {
                "total": killer.crashes.len(),
                "byPhase": by_phase,
                "byTarget": by_target,
                "aimedAtAnApplyingEffect": killer.aimed,
                "earlyKillsMissed": killer.missed_early,
                "serverStartFailures": killer.restart_failures,
                "fallbacksToTheServer": killer.fallbacks,
            },
            "runs": runs.iter().map(|((kind, outcome), n)| json!({"kind": kind, "outcome": outcome, "runs": n})).collect::<Vec<_>>(),
            "origins": kinds,
            "runsByOrigin": origins,
            "decisionsBy": decisions,
            "effects": {
                "byContractAndStatus": effects.iter().map(|((recovery, status), n)| json!({"recovery": recovery, "status": status, "effects": n})).collect::<Vec<_>>(),
                "everAmbiguous": ever_ambiguous,
                "interruptedAttempts": interrupted,
                "reviews": reviewed.iter().map(|((contract, resolution), n)| json!({"recovery": contract, "resolution": resolution, "reviews": n})).collect::<Vec<_>>(),
                "recorderLines": recorder_lines,
                "keysAppliedMoreThanOnce": repeated_keys,
                "repeatedApplications": repeats,
            },
            "crashToResume": {
                "serverKillToRunRunning": summary(&running_again),
                "serverKillToNextNodeCommitted": summary(&next_node),
                "serverKillToServerReady": summary(&killer.restart_ms),
                "runnerKillToRunRunningWithTheHarnessResume": summary(&runner_again),
            },
            "commands": counters.commands.iter().map(|(op, (sent, accepted))| json!({"operation": op, "sent": sent, "accepted": accepted})).collect::<Vec<_>>(),
            "acknowledged": acks,
            "checks": checker.checks,
            "checkMsMean": ((checker.check_ms_total / checker.checks.max(1) as f64) * 10.0).round() / 10.0,
            "checkMsMax": (checker.check_ms_max * 10.0).round() / 10.0,
            "subscribers": {
                "started": counters.subscriber_starts,
                "killed": counters.subscriber_kills,
                "linesRead": shared.subscriber_lines.load(Ordering::Relaxed),
            },
            "outages": killer.outages.iter().map(|outage| json!({"killedAtMs": outage.killed_at_ms, "interrupted": outage.interrupted})).collect::<Vec<_>>(),
            "violations": violations,
        });

        let mut t = String::new();
        use std::fmt::Write as _;
        let _ = writeln!(
            t,
            "\ntorture: seed {} · {} kill points in {:.0} s, drained in {:.0} s · {} · {} workers",
            args.seed,
            args.points,
            points_done.as_secs_f64(),
            drain.as_secs_f64(),
            shared.lab.bin.display(),
            shared.lab.workers
        );
        let _ = writeln!(
            t,
            "\n{} crashes ({} aimed at an applying effect; {} early kills missed, {} fallbacks to the server; {} failed server starts, retried)",
            killer.crashes.len(),
            killer.aimed,
            killer.missed_early,
            killer.fallbacks,
            killer.restart_failures
        );
        let phases = [Phase::StoreOpen, Phase::Recovery, Phase::Serving, Phase::MidEffect];
        let _ = writeln!(
            t,
            "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "target \\ phase", "store open", "recovery", "serving", "mid-effect", "total"
        );
        for target in [
            Target::Server,
            Target::ServerStarting,
            Target::Runner,
            Target::WarmRunner,
            Target::Shell,
        ] {
            let cells: Vec<u64> = phases
                .iter()
                .map(|phase| matrix.get(&(target, *phase)).copied().unwrap_or(0))
                .collect();
            let _ = writeln!(
                t,
                "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8}",
                target.label(),
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells.iter().sum::<u64>()
            );
        }
        let totals: Vec<u64> = phases
            .iter()
            .map(|phase| by_phase.get(phase.label()).copied().unwrap_or(0))
            .collect();
        let _ = writeln!(
            t,
            "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "total",
            totals[0],
            totals[1],
            totals[2],
            totals[3],
            killer.crashes.len()
        );
        let outcomes = ["completed", "continued", "cancelled", "failed", "timed_out"];
        let _ = writeln!(t, "\nruns by kind and outcome");
        let _ = writeln!(
            t,
            "  {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
            "kind", "completed", "continued", "cancelled", "failed", "timed_out", "other", "total"
        );
        let mut all_kinds: Vec<String> = runs.keys().map(|(kind, _)| kind.clone()).collect();
        all_kinds.dedup();
        for kind in &all_kinds {
            let get = |outcome: &str| runs.get(&(kind.clone(), outcome.to_string())).copied().unwrap_or(0);
            let total: u64 = runs.iter().filter(|((k, _), _)| k == kind).map(|(_, n)| n).sum();
            let known: u64 = outcomes.iter().map(|outcome| get(outcome)).sum();
            let _ = writeln!(
                t,
                "  {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
                kind,
                get("completed"),
                get("continued"),
                get("cancelled"),
                get("failed"),
                get("timed_out"),
                total - known,
                total
            );
        }
        let line = |counts: &BTreeMap<String, i64>| -> String {
            counts
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(t, "  runs by origin: {}", line(&origins));
        let _ = writeln!(t, "  decisions settled by: {}", line(&decisions));
        let _ = writeln!(t, "\neffects (runner)");
        let _ = writeln!(
            t,
            "  {:<11} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8}",
            "recovery", "applied", "rejected", "cancelled", "ambiguous", "pending", "total"
        );
        for recovery in ["idempotent", "manual"] {
            let get = |status: &str| {
                effects
                    .get(&(recovery.to_string(), status.to_string()))
                    .copied()
                    .unwrap_or(0)
            };
            let total: i64 = effects.iter().filter(|((r, _), _)| r == recovery).map(|(_, n)| n).sum();
            let _ = writeln!(
                t,
                "  {:<11} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8}",
                recovery,
                get("applied"),
                get("rejected"),
                get("cancelled"),
                get("ambiguous"),
                get("pending"),
                total
            );
        }
        let review_line: Vec<String> = reviewed
            .iter()
            .map(|((contract, resolution), n)| format!("{contract} {resolution} {n}"))
            .collect();
        let _ = writeln!(
            t,
            "  ever ambiguous {ever_ambiguous}, interrupted attempts {interrupted}, reviewed: {}",
            if review_line.is_empty() {
                "none".to_string()
            } else {
                review_line.join(", ")
            }
        );
        let _ = writeln!(
            t,
            "  recorder: {recorder_lines} applications, {repeated_keys} keys applied again ({repeats} repeats, same key)"
        );
        let _ = writeln!(t, "\ncrash to resume");
        for (what, samples) in [
            ("server SIGKILL → run running again", &running_again),
            ("server SIGKILL → next node committed", &next_node),
            ("server SIGKILL → server ready", &killer.restart_ms),
            ("runner SIGKILL → running (with resume)", &runner_again),
        ] {
            let _ = writeln!(
                t,
                "  {:<40} p50 {:>8}  p90 {:>8}  max {:>8}  ({} samples)",
                what,
                ms(percentile(samples, 50.0)),
                ms(percentile(samples, 90.0)),
                ms(percentile(samples, 100.0)),
                samples.len()
            );
        }
        let sent: u64 = counters.commands.values().map(|(sent, _)| sent).sum();
        let accepted: u64 = counters.commands.values().map(|(_, accepted)| accepted).sum();
        let per_op: Vec<String> = counters
            .commands
            .iter()
            .map(|(op, (sent, accepted))| format!("{op} {accepted}/{sent}"))
            .collect();
        let _ = writeln!(
            t,
            "\ncommands: {accepted} of {sent} accepted ({}); {acks} acknowledged and checked; {} checks (mean {:.0} ms, max {:.0} ms)",
            per_op.join(", "),
            checker.checks,
            checker.check_ms_total / checker.checks.max(1) as f64,
            checker.check_ms_max
        );
        let _ = writeln!(
            t,
            "subscribers: {} started, {} killed, {} lines read",
            counters.subscriber_starts,
            counters.subscriber_kills,
            shared.subscriber_lines.load(Ordering::Relaxed)
        );
        if violations.is_empty() {
            let _ = writeln!(t, "\nviolations: none");
        } else {
            let _ = writeln!(t, "\nviolations: {}", violations.len());
            for found in &violations {
                let _ = writeln!(
                    t,
                    "  seed {} point {} ({}): {}",
                    found.seed, found.point, found.when, found.what
                );
            }
        }
        Ok(Report { json, table: t })
    }
}
