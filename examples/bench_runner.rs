//! Benchmark: durable runner steps through the real server and the scripted test runner,
//! next to raw SQLite commits per second measured in the same run on the same filesystem
//! (both WAL + `synchronous = FULL`), and the time from a server crash to a resumed runner.
//!
//! `cargo build --release && cargo run --release --example bench_runner`
//!
//! Figures printed, all measured in this run on fresh state directories under /tmp:
//! - raw: `BEGIN IMMEDIATE; INSERT; COMMIT` on a plain table, one caller (the baseline);
//! - step latency p50/p99, time per step and steps/s, 1 runner (`PI_WORKFLOWS_MAX_WORKERS=1`,
//!   sequential 10-step runs) and 4 concurrent runners (`PI_WORKFLOWS_MAX_WORKERS=4`, 4
//!   queued runs), each sequential (one message in flight) and pipelined (up to 16 pure
//!   results in flight). A step is one pure node: one `node.finished` with its start fields,
//!   answered only after its protected write committed; its latency runs from sending it to
//!   its answer, as the runner measures it (`timing-file=` script directive). Steps/s counts
//!   steps over the time at least one runner was stepping (admission ticks and runner
//!   start-up between runs excluded); time per step is its inverse; the ratio divides
//!   steps/s by raw commits/s;
//! - crash-to-resume: SIGKILL of a server with a live run, then `server start` at once, until
//!   a runner of a newer generation of that run recorded `ready` (`run_workers.ready_at`),
//!   measured from the SIGKILL on the same wall clock.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use pi_workflows::store::runs::{self, ExecutionMode, NewRun};
use pi_workflows::store::{Store, SystemClock};
use rusqlite::{Connection, OpenFlags};

const RAW_COMMITS: usize = 3_000;
/// 1 runner: sequential runs of the 10-step compute workflow.
const SINGLE_RUNS: usize = 20;
const SINGLE_STEPS: u64 = 10;
/// 4 concurrent runners, one long run each.
const CONCURRENT_RUNNERS: usize = 4;
const CONCURRENT_STEPS: u64 = 250;
/// Pure steps a pipelining runner sends ahead of their answers.
const PIPELINE_WINDOW: usize = 16;
/// Crashes measured (each on the same long run, one after the other).
const CRASHES: usize = 5;
const CRASH_SCRIPT: &str = "steps=200,step-delay-ms=20";
const WAIT: Duration = Duration::from_secs(60);

fn main() -> anyhow::Result<()> {
    let binaries = Binaries::locate()?;
    println!(
        "bench_runner: server {}, runner {}",
        binaries.server.display(),
        binaries.runner.display()
    );

    let raw_dir = tempfile::Builder::new().prefix("piwbr").tempdir_in("/tmp")?;
    let raw_elapsed = measure_raw(&raw_dir.path().join("raw.sqlite"), RAW_COMMITS)?;
    let raw_rate = RAW_COMMITS as f64 / raw_elapsed.as_secs_f64();
    println!(
        "{:<40} {raw_rate:>9.0} /s  ({:.1} µs each)",
        "raw SQLite commits (WAL, FULL)",
        raw_elapsed.as_secs_f64() * 1e6 / RAW_COMMITS as f64
    );

    for pipeline in [1, PIPELINE_WINDOW] {
        let mode = if pipeline == 1 { "sequential" } else { "pipelined" };
        let single = measure_steps(&binaries, 1, SINGLE_RUNS, SINGLE_STEPS, pipeline)?;
        single.report(
            &format!("1 runner, {SINGLE_RUNS} runs × {SINGLE_STEPS} steps, {mode}"),
            raw_rate,
        );
        let concurrent = measure_steps(
            &binaries,
            CONCURRENT_RUNNERS,
            CONCURRENT_RUNNERS,
            CONCURRENT_STEPS,
            pipeline,
        )?;
        concurrent.report(
            &format!("{CONCURRENT_RUNNERS} runners × {CONCURRENT_STEPS} steps, {mode}"),
            raw_rate,
        );
    }

    let resumes = measure_crash_to_resume(&binaries, CRASHES)?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<40} p50 {:>6.0} ms  max {:>6.0} ms  ({} crashes; samples {:?} ms)",
        "crash-to-resume (SIGKILL → new ready)",
        ms(percentile(&resumes, 50)),
        ms(percentile(&resumes, 100)),
        resumes.len(),
        resumes.iter().map(|d| ms(*d).round() as i64).collect::<Vec<_>>()
    );
    Ok(())
}

struct Binaries {
    server: PathBuf,
    runner: PathBuf,
}

impl Binaries {
    /// The binaries next to this example's directory (target/<profile>/).
    fn locate() -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .context("unexpected example location")?;
        let binaries = Self {
            server: profile_dir.join("pi-workflows"),
            runner: profile_dir.join("pi-workflows-test-runner"),
        };
        for binary in [&binaries.server, &binaries.runner] {
            if !binary.exists() {
                bail!("{} is missing; run `cargo build --release` first", binary.display());
            }
        }
        Ok(binaries)
    }
}

fn measure_raw(path: &Path, commits: usize) -> anyhow::Result<Duration> {
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT;",
    )?;
    let started = Instant::now();
    for index in 0..commits {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (body) VALUES (?1)")?
            .execute([format!("row {index}")])?;
        conn.execute_batch("COMMIT")?;
    }
    Ok(started.elapsed())
}

/// One state directory with a server (stopped on drop, also on an error path).
struct Bench<'a> {
    binaries: &'a Binaries,
    dir: tempfile::TempDir,
    script: String,
    max_workers: usize,
}

impl<'a> Bench<'a> {
    fn new(binaries: &'a Binaries, runs: usize, script: &str, max_workers: usize) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("piwbr").tempdir_in("/tmp")?;
        queue_runs(dir.path(), runs)?;
        Ok(Self {
            binaries,
            dir,
            script: script.to_string(),
            max_workers,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server(&self, args: &[&str]) -> anyhow::Result<()> {
        let output = Command::new(&self.binaries.server)
            .arg("--state-dir")
            .arg(self.dir.path())
            .args(args)
            .env("PI_WORKFLOWS_RUNNER", &self.binaries.runner)
            .env("PI_WORKFLOWS_TEST_SCRIPT", &self.script)
            .env("PI_WORKFLOWS_MAX_WORKERS", self.max_workers.to_string())
            .output()?;
        if !output.status.success() {
            bail!("server {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(())
    }

    fn db(&self) -> anyhow::Result<Connection> {
        Ok(Connection::open_with_flags(
            self.path("state.sqlite"),
            OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?)
    }

    fn count(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(self.db()?.query_row(sql, [], |row| row.get(0))?)
    }

    /// Poll (read-only) until `sql` counts at least `target` rows.
    fn wait_for(&self, what: &str, sql: &str, target: i64) -> anyhow::Result<()> {
        let deadline = Instant::now() + WAIT;
        while self.count(sql)? < target {
            if Instant::now() > deadline {
                bail!("timed out waiting until {what}\n{}", self.diagnostics());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// The end of the server log and of every runner's stderr, for an error message.
    fn diagnostics(&self) -> String {
        let tail = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        let mut out = format!("server log:\n{}", tail(&self.path("logs/server.log")));
        if let Ok(entries) = std::fs::read_dir(self.path("logs/runners")) {
            for entry in entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "err"))
            {
                out.push_str(&format!("\n{}:\n{}", entry.path().display(), tail(&entry.path())));
            }
        }
        out
    }

    fn server_pid(&self) -> anyhow::Result<i32> {
        let text = std::fs::read_to_string(self.path("server/server.lock"))?;
        text.trim().parse().context("server.lock holds no pid")
    }
}

impl Drop for Bench<'_> {
    fn drop(&mut self) {
        let _ = self.server(&["server", "stop"]);
    }
}

fn queue_runs(dir: &Path, count: usize) -> anyhow::Result<()> {
    let store = Store::open(&dir.join("state.sqlite"), Arc::new(SystemClock))?;
    for index in 0..count {
        let new_run = NewRun {
            run_id: format!("run-{index:03}"),
            workflow_name: "scripted".to_string(),
            project_path: String::new(),
            parent_run_id: None,
            root_run_id: None,
            definition_digest: "sha256:scripted".to_string(),
            origin: Default::default(),
            workflow_source_json: "{}".to_string(),
            input_hash: "0".repeat(64),
            execution: ExecutionMode::Headless,
        };
        store.write(move |tx| runs::queue_run(tx, &new_run))?;
    }
    Ok(())
}

/// One completed step as the runner timed it.
struct Step {
    runner_epoch: String,
    start_us: u128,
    wall_us: u128,
}

struct StepFigures {
    steps: usize,
    p50_us: u128,
    p99_us: u128,
    /// Steps over the time at least one runner was stepping.
    steps_per_second: f64,
    /// Wall time from `server start` until every run completed (admission included).
    total: Duration,
}

impl StepFigures {
    fn report(&self, label: &str, raw_rate: f64) {
        println!(
            "{label:<48} latency p50 {:.3} ms  p99 {:.3} ms  per step {:.3} ms  {:>6.0} steps/s  ratio steps/raw = {:.2}  ({} steps, {:.1} s total)",
            self.p50_us as f64 / 1e3,
            self.p99_us as f64 / 1e3,
            1e3 / self.steps_per_second,
            self.steps_per_second,
            self.steps_per_second / raw_rate,
            self.steps,
            self.total.as_secs_f64()
        );
    }
}

fn measure_steps(
    binaries: &Binaries,
    max_workers: usize,
    runs: usize,
    steps: u64,
    pipeline: usize,
) -> anyhow::Result<StepFigures> {
    let dir = tempfile::Builder::new().prefix("piwbt").tempdir_in("/tmp")?;
    let timing_file = dir.path().join("steps");
    let script = format!(
        "steps={steps},pipeline={pipeline},timing-file={}",
        timing_file.display()
    );
    let bench = Bench::new(binaries, runs, &script, max_workers)?;
    let started = Instant::now();
    bench.server(&["server", "start"])?;
    bench.wait_for(
        "every run completed",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
        runs as i64,
    )?;
    let total = started.elapsed();
    bench.server(&["server", "stop"])?;

    let text = std::fs::read_to_string(&timing_file)?;
    let samples = text.lines().map(parse_step).collect::<anyhow::Result<Vec<Step>>>()?;
    let expected = runs * steps as usize;
    if samples.len() != expected {
        bail!("expected {expected} timed steps, found {}", samples.len());
    }
    let mut walls: Vec<u128> = samples.iter().map(|step| step.wall_us).collect();
    walls.sort_unstable();
    let pick = |percent: usize| walls[(walls.len() - 1) * percent / 100];
    Ok(StepFigures {
        steps: samples.len(),
        p50_us: pick(50),
        p99_us: pick(99),
        steps_per_second: samples.len() as f64 / stepping_time(&samples).as_secs_f64(),
        total,
    })
}

fn parse_step(line: &str) -> anyhow::Result<Step> {
    let mut fields = line.split_whitespace();
    let mut next = || fields.next().with_context(|| format!("short timing line {line:?}"));
    Ok(Step {
        runner_epoch: next()?.to_string(),
        start_us: next()?.parse()?,
        wall_us: next()?.parse()?,
    })
}

/// The union of every runner's stepping window (first step start to last step end).
fn stepping_time(samples: &[Step]) -> Duration {
    let mut windows: std::collections::BTreeMap<&str, (u128, u128)> = std::collections::BTreeMap::new();
    for step in samples {
        let end = step.start_us + step.wall_us;
        let window = windows
            .entry(step.runner_epoch.as_str())
            .or_insert((step.start_us, end));
        window.0 = window.0.min(step.start_us);
        window.1 = window.1.max(end);
    }
    let mut intervals: Vec<(u128, u128)> = windows.into_values().collect();
    intervals.sort_unstable();
    let (mut total, mut covered_to) = (0u128, 0u128);
    for (start, end) in intervals {
        let start = start.max(covered_to);
        if end > start {
            total += end - start;
            covered_to = end;
        }
    }
    Duration::from_micros(total as u64)
}

fn measure_crash_to_resume(binaries: &Binaries, crashes: usize) -> anyhow::Result<Vec<Duration>> {
    let bench = Bench::new(binaries, 1, CRASH_SCRIPT, 1)?;
    bench.server(&["server", "start"])?;
    let mut samples = Vec::with_capacity(crashes);
    for _ in 0..crashes {
        bench.wait_for(
            "a runner is ready",
            "SELECT count(*) FROM run_workers WHERE status = 'ready'",
            1,
        )?;
        let generation = bench.count("SELECT max(generation) FROM run_workers WHERE status = 'ready'")?;
        // The current runner is live and has made progress (a few steps after its ready).
        bench.wait_for(
            "the runner made progress",
            &format!(
                "SELECT count(*) FROM node_attempts WHERE status = 'completed' AND lease_generation = {generation}"
            ),
            3,
        )?;
        let pid = bench.server_pid()?;
        let killed_at_ms = unix_ms();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)?;
        wait_until_dead(pid)?;
        bench.server(&["server", "start"])?;
        let sql = format!("SELECT count(*) FROM run_workers WHERE generation > {generation} AND ready_at IS NOT NULL");
        bench.wait_for("a runner of a newer generation is ready", &sql, 1)?;
        let ready_at: i64 = bench.db()?.query_row(
            &format!("SELECT min(ready_at) FROM run_workers WHERE generation > {generation} AND ready_at IS NOT NULL"),
            [],
            |row| row.get(0),
        )?;
        let elapsed_ms = u64::try_from(ready_at - killed_at_ms).context("ready before the kill")?;
        samples.push(Duration::from_millis(elapsed_ms));
    }
    bench.server(&["server", "stop"])?;
    Ok(samples)
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// The killed server is gone (a zombie counts as gone: it holds no lock and no socket).
fn wait_until_dead(pid: i32) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
            });
        if matches!(state, None | Some('Z' | 'X')) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the killed server {pid} did not go away");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn percentile(samples: &[Duration], percent: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[(sorted.len() - 1) * percent / 100]
}
