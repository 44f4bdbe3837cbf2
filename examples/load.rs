//! Load and fairness benchmark: one unrelated client's latency while the server is busy with
//! everything else at once, next to the same probe on the same server when it is idle.
//!
//! `cargo build --release && cargo run --release --example load`
//!
//! The server binary is `$PI_WORKFLOWS_BIN`, else `pi-workflows` next to this example's
//! directory (`target/<profile>/`); the runner is `$PI_WORKFLOWS_TEST_RUNNER`, else the
//! scripted `pi-workflows-test-runner` there (`steps=3`: three pure compute nodes a run).
//! It prints figures and asserts nothing about time.
//!
//! 1. Baseline: a server on a fresh state directory (`PI_WORKFLOWS_MAX_WORKERS=4`) with one
//!    completed run, `probe`; the probe client alternates `run.status` and `view.run.get`
//!    of `probe` (2 ms apart) for a few seconds.
//! 2. Load: the server is stopped, 1,000 runs of the 3-step workflow are queued, and it
//!    starts again with capacity 4. While it works through them: 50 subscribers (25
//!    `view.runs.watch`, 25 `view.run.watch` of the first runs) read every event; one
//!    client sends bad frames in a loop (garbage, a line above 1 MiB, non-canonical JSON,
//!    invalid envelopes, a non-request message, a partial line), reconnecting each time
//!    and checking the server closes that connection; the probe client measures as in the
//!    baseline; the server's VmRSS is sampled from /proc.
//! 3. Socket exhaustion: with the subscribers and the probe still connected, idle
//!    connections are opened up to and past the server's limit (256 + a reserve of 8 for
//!    `server.status` / `server.stop`). Counted: connections served (`hello`), reserved ones
//!    (a `run.status` there is refused `tooManyConnections`, `server.status` answered), and
//!    refused ones (closed before `hello`) with how long the refusal took. The probe runs
//!    meanwhile; then the idle connections close and a new client must get in again.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use pi_workflows::client::Client;
use pi_workflows::protocol::{FRAME_BYTES_MAX, JsonObject, Operation, Outcome};
use pi_workflows::store::{Store, SystemClock, blobs, runs};

const RUNS: usize = 1_000;
const CAPACITY: usize = 4;
const STEPS: usize = 3;
const SUBSCRIBERS: usize = 50;
const BASELINE: Duration = Duration::from_secs(5);
/// The load phase ends when every run completed, or after this long.
const LOAD_MAX: Duration = Duration::from_secs(600);
const FULL_PROBE: Duration = Duration::from_secs(3);
/// The server's limits (`server::clients::listener`): served, plus the reserve.
const CONNECTIONS_MAX: usize = pi_workflows::server::clients::listener::CONNECTIONS_MAX;
const CONNECTIONS_RESERVE: usize = pi_workflows::server::clients::listener::CONNECTIONS_RESERVE;
/// Idle connections opened past the limit.
const EXCESS: usize = 40;
const PROBE_PAUSE: Duration = Duration::from_millis(2);
const PROBE_RUN: &str = "probe";
const WAIT: Duration = Duration::from_secs(60);

fn main() -> anyhow::Result<()> {
    let binaries = Binaries::locate()?;
    println!(
        "load: server {}, runner {}",
        binaries.server.display(),
        binaries.runner.display()
    );
    let dir = tempfile::Builder::new().prefix("piwload").tempdir_in("/tmp")?;
    let server = Server {
        binaries: &binaries,
        state: dir.path().to_path_buf(),
    };

    // 1. Baseline: the probe alone on an idle server.
    queue(server.state(), &[PROBE_RUN.to_string()])?;
    server.start()?;
    let mut probe = Client::connect(&server.socket())?;
    wait_completed(&mut probe, PROBE_RUN)?;
    let baseline = probe_for(&mut probe, BASELINE, None)?;
    let idle_rss = server.rss_kib()?;
    drop(probe);
    server.stop()?;

    // 2. Load.
    let run_ids: Vec<String> = (0..RUNS).map(|index| format!("load-{index:04}")).collect();
    queue(server.state(), &run_ids)?;
    let started = Instant::now();
    server.start()?;
    let stop = Arc::new(AtomicBool::new(false));
    let subscribers = Subscribers::start(&server.socket(), &run_ids, &stop)?;
    let bad = BadClient::start(server.socket(), &stop);
    let rss = RssSampler::start(server.pid()?, &stop);
    let mut probe = Client::connect(&server.socket())?;
    let done = |probe: &mut Client| completed_count(probe).map(|count| count > RUNS as u64);
    let loaded = probe_for(&mut probe, LOAD_MAX, Some(&done))?;
    let load_elapsed = started.elapsed();
    let completed = completed_count(&mut probe)?.saturating_sub(1);
    bad.stop_and_join();
    let bad = bad.figures();

    // 3. Socket exhaustion, with the subscribers and the probe still connected.
    let exhaustion = exhaust(&server.socket(), &mut probe)?;
    let after_full = probe_for(&mut probe, Duration::from_secs(1), None)?;
    stop.store(true, Ordering::SeqCst);
    let events = subscribers.join();
    let rss = rss.join();
    drop(probe);
    server.stop()?;

    // The report.
    println!();
    println!(
        "load phase: {completed} of {RUNS} runs × {STEPS} steps completed in {:.1} s ({:.0} runs/s) with capacity {CAPACITY}",
        load_elapsed.as_secs_f64(),
        completed as f64 / load_elapsed.as_secs_f64()
    );
    println!(
        "subscribers: {SUBSCRIBERS} ({} view.runs.watch, {} view.run.watch of runs spread over the queue), {} events read, {} transport errors",
        SUBSCRIBERS.div_ceil(2),
        SUBSCRIBERS / 2,
        events.events,
        events.errors
    );
    println!(
        "bad client: {} connections ({:.0}/s), {} closed by the server, {} answered then closed, {} left open (5 s), {} hello missing",
        bad.connections,
        bad.connections as f64 / load_elapsed.as_secs_f64(),
        bad.closed,
        bad.answered,
        bad.open,
        bad.no_hello
    );
    for (kind, count) in &bad.kinds {
        println!("  {kind:<22} {count}");
    }
    println!();
    println!(
        "{:<34} {:>12} {:>12} {:>12} {:>8}",
        "figure", "baseline", "load", "full sockets", "ratio"
    );
    let row = |name: &str, base: f64, load: f64, full: Option<f64>, unit: &str| {
        let full = full.map_or_else(|| "-".to_string(), |value| format!("{value:.2} {unit}"));
        println!(
            "{name:<34} {:>12} {:>12} {full:>12} {:>8.2}",
            format!("{base:.2} {unit}"),
            format!("{load:.2} {unit}"),
            load / base
        );
    };
    for (label, op) in [("run.status", 0), ("view.run.get", 1)] {
        for p in [50.0, 99.0] {
            row(
                &format!("{label} p{p:.0}"),
                baseline.percentile(op, p),
                loaded.percentile(op, p),
                Some(exhaustion.probe.percentile(op, p)),
                "ms",
            );
        }
        row(
            &format!("{label} max"),
            baseline.percentile(op, 100.0),
            loaded.percentile(op, 100.0),
            Some(exhaustion.probe.percentile(op, 100.0)),
            "ms",
        );
    }
    row(
        "probe requests",
        baseline.count() as f64,
        loaded.count() as f64,
        Some(exhaustion.probe.count() as f64),
        "",
    );
    row(
        "server VmRSS (idle / max / end)",
        idle_rss as f64 / 1024.0,
        rss.max_kib as f64 / 1024.0,
        Some(rss.last_kib as f64 / 1024.0),
        "MiB",
    );
    println!(
        "  target: p99 ≤ 20 ms under load; load p99 run.status {:.2} ms, view.run.get {:.2} ms",
        loaded.percentile(0, 99.0),
        loaded.percentile(1, 99.0)
    );
    println!();
    println!(
        "socket exhaustion: limit {CONNECTIONS_MAX} + reserve {CONNECTIONS_RESERVE}; {} already open (subscribers + probe)",
        SUBSCRIBERS + 1
    );
    println!(
        "  opened {} idle connections: {} served, {} in the reserve, {} refused (closed before hello; slowest refusal {:.1} ms)",
        exhaustion.attempted,
        exhaustion.served,
        exhaustion.reserved,
        exhaustion.refused,
        exhaustion.slowest_refusal.as_secs_f64() * 1e3
    );
    println!(
        "  in the reserve: run.status → {}, server.status → {}",
        exhaustion.reserved_run_status, exhaustion.reserved_server_status
    );
    println!(
        "  a new client while full: {}; after closing the idle ones: {}",
        exhaustion.new_client_while_full, exhaustion.new_client_after
    );
    println!(
        "  probe after the idle connections closed: run.status p99 {:.2} ms ({} requests)",
        after_full.percentile(0, 99.0),
        after_full.count()
    );
    Ok(())
}

struct Binaries {
    server: PathBuf,
    runner: PathBuf,
}

impl Binaries {
    fn locate() -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .context("unexpected example location")?
            .to_path_buf();
        let pick = |env: &str, name: &str| {
            std::env::var_os(env)
                .map(PathBuf::from)
                .unwrap_or_else(|| profile_dir.join(name))
        };
        let binaries = Self {
            server: pick("PI_WORKFLOWS_BIN", "pi-workflows"),
            runner: pick("PI_WORKFLOWS_TEST_RUNNER", "pi-workflows-test-runner"),
        };
        for binary in [&binaries.server, &binaries.runner] {
            if !binary.is_file() {
                bail!("{} is missing; run `cargo build --release` first", binary.display());
            }
        }
        Ok(binaries)
    }
}

/// The server of one state directory, stopped on drop (also on an error path).
struct Server<'a> {
    binaries: &'a Binaries,
    state: PathBuf,
}

impl Server<'_> {
    fn state(&self) -> &Path {
        &self.state
    }

    fn socket(&self) -> PathBuf {
        self.state.join("server").join("server.sock")
    }

    fn command(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(&self.binaries.server)
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .env("PI_WORKFLOWS_RUNNER", &self.binaries.runner)
            .env("PI_WORKFLOWS_TEST_SCRIPT", format!("steps={STEPS}"))
            .env("PI_WORKFLOWS_MAX_WORKERS", CAPACITY.to_string())
            // The exhaustion check keeps idle connections open for a few seconds.
            .env("PI_WORKFLOWS_CONNECTION_FIRST_REQUEST_MS", "60000")
            .output()?;
        if !out.status.success() {
            bail!("server {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    fn start(&self) -> anyhow::Result<()> {
        self.command(&["server", "start"])
    }

    fn stop(&self) -> anyhow::Result<()> {
        self.command(&["server", "stop"])
    }

    fn pid(&self) -> anyhow::Result<u32> {
        let text = std::fs::read_to_string(self.state.join("server").join("server.lock"))?;
        text.trim().parse().context("server.lock holds no pid")
    }

    fn rss_kib(&self) -> anyhow::Result<u64> {
        rss_kib(self.pid()?).context("the server's VmRSS")
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Queue headless runs whose 3-node definition is stored (so their views have a graph),
/// while no server runs (only the server opens the live database while it runs).
fn queue(state: &Path, run_ids: &[String]) -> anyhow::Result<()> {
    std::fs::create_dir_all(state)?;
    let store = Store::open(&state.join("state.sqlite"), Arc::new(SystemClock))?;
    let nodes: Vec<serde_json::Value> = (1..=STEPS)
        .map(|i| serde_json::json!({"path": format!("root/step{i}"), "type": "compute", "title": format!("Step {i}")}))
        .collect();
    let definition = serde_json::json!({"schema": "pi-workflows.definition-snapshot.v1", "name": "load",
        "startAt": "n1", "maxSteps": 1000, "nodes": nodes, "includes": [], "edges": []});
    let bytes = pi_workflows::protocol::to_canonical_vec(&definition)?;
    let digest = format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes));
    let all: Vec<String> = run_ids.to_vec();
    store.write(move |tx| {
        blobs::put_blob(tx, &bytes, pi_workflows::view::document::DEFINITION_MEDIA_TYPE)?;
        for run_id in &all {
            let run = runs::NewRun {
                run_id: run_id.clone(),
                workflow_name: "load".to_string(),
                project_path: String::new(),
                parent_run_id: None,
                root_run_id: None,
                definition_digest: digest.clone(),
                origin: Default::default(),
                workflow_source_json: "{}".to_string(),
                input_hash: "e".repeat(64),
                execution: runs::ExecutionMode::Headless,
            };
            runs::queue_run(tx, &run)?;
        }
        Ok(())
    })?;
    Ok(())
}

fn run_status(client: &mut Client, run_id: &str) -> anyhow::Result<JsonObject> {
    let response = client.request_for(Operation::RunStatus, Some(run_id), JsonObject::new())?;
    if response.outcome != Outcome::Accepted {
        bail!("run.status {run_id} refused: {:?}", response.error);
    }
    response.receipt.context("run.status without a receipt")
}

fn wait_completed(client: &mut Client, run_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = run_status(client, run_id)?;
        if serde_json::to_string(&status)?.contains("\"completed\"") {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{run_id} did not complete: {status:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs that ended (completed here: the scripted runs cannot fail), from `server.status`.
fn completed_count(client: &mut Client) -> anyhow::Result<u64> {
    let response = client.request(Operation::ServerStatus, JsonObject::new())?;
    let receipt = response.receipt.context("server.status without a receipt")?;
    receipt
        .get("terminal")
        .and_then(serde_json::Value::as_u64)
        .context("server.status shows no terminal count")
}

/// Latencies of the probe's two operations, in milliseconds.
#[derive(Default)]
struct Probe {
    samples: [Vec<f64>; 2],
}

impl Probe {
    fn percentile(&self, op: usize, p: f64) -> f64 {
        let mut sorted = self.samples[op].clone();
        if sorted.is_empty() {
            return f64::NAN;
        }
        sorted.sort_by(f64::total_cmp);
        sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
    }

    fn count(&self) -> usize {
        self.samples[0].len() + self.samples[1].len()
    }
}

type Done<'a> = &'a dyn Fn(&mut Client) -> anyhow::Result<bool>;

/// Alternate `run.status` and `view.run.get` of the probe run for `duration`, or until
/// `done` (asked every 250 ms, not timed).
fn probe_for(client: &mut Client, duration: Duration, done: Option<Done<'_>>) -> anyhow::Result<Probe> {
    let mut probe = Probe::default();
    let started = Instant::now();
    let mut checked = Instant::now();
    let mut index = 0usize;
    while started.elapsed() < duration {
        if let Some(done) = done
            && checked.elapsed() > Duration::from_millis(250)
        {
            checked = Instant::now();
            if done(client)? {
                break;
            }
        }
        let op = index % 2;
        index += 1;
        let began = Instant::now();
        let response = match op {
            0 => client.request_for(Operation::RunStatus, Some(PROBE_RUN), JsonObject::new())?,
            _ => client.request_for(Operation::ViewRunGet, Some(PROBE_RUN), JsonObject::new())?,
        };
        probe.samples[op].push(began.elapsed().as_secs_f64() * 1e3);
        if response.outcome != Outcome::Accepted {
            bail!("probe request refused: {:?}", response.error);
        }
        std::thread::sleep(PROBE_PAUSE);
    }
    Ok(probe)
}

struct Subscribers {
    threads: Vec<std::thread::JoinHandle<(u64, u64)>>,
}

struct SubscriberFigures {
    events: u64,
    errors: u64,
}

impl Subscribers {
    fn start(socket: &Path, run_ids: &[String], stop: &Arc<AtomicBool>) -> anyhow::Result<Self> {
        let mut threads = Vec::new();
        for index in 0..SUBSCRIBERS {
            let mut client = Client::connect(socket)?;
            let response = match index % 2 {
                0 => client.request(Operation::ViewRunsWatch, JsonObject::new())?,
                // Runs spread over the queue, so their views change throughout the phase.
                _ => {
                    let run_id = &run_ids[(index / 2) * run_ids.len() / SUBSCRIBERS.div_ceil(2)];
                    client.request_for(Operation::ViewRunWatch, Some(run_id), JsonObject::new())?
                }
            };
            if response.outcome != Outcome::Accepted {
                bail!("watch refused: {:?}", response.error);
            }
            let stop = Arc::clone(stop);
            threads.push(std::thread::spawn(move || {
                let (mut events, mut errors) = (0, 0);
                while !stop.load(Ordering::SeqCst) {
                    match client.next_event(Duration::from_millis(100)) {
                        Ok(Some(_)) => events += 1,
                        Ok(None) => {}
                        Err(_) => {
                            errors += 1;
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                (events, errors)
            }));
        }
        Ok(Self { threads })
    }

    fn join(self) -> SubscriberFigures {
        let mut figures = SubscriberFigures { events: 0, errors: 0 };
        for thread in self.threads {
            let (events, errors) = thread.join().unwrap_or((0, 1));
            figures.events += events;
            figures.errors += errors;
        }
        figures
    }
}

/// The kinds of bad input the bad client sends, in turn.
const BAD_KINDS: &[&str] = &[
    "garbage",
    "oversized (> 1 MiB)",
    "not canonical",
    "unknown operation",
    "wrong schema",
    "missing field",
    "bad id characters",
    "hello from a client",
    "partial line, then EOF",
];

fn bad_line(kind: usize, counter: u64) -> Vec<u8> {
    let request = |operation: &str, schema: &str, id: &str| {
        format!(
            "{{\"clientId\":\"{id}\",\"operation\":\"{operation}\",\"payload\":{{}},\"requestId\":\"r{counter}\",\"runId\":\"probe\",\"schema\":\"{schema}\",\"type\":\"request\"}}\n"
        )
        .into_bytes()
    };
    match kind {
        0 => {
            let mut line: Vec<u8> = (0..64u64)
                .map(|i| (counter.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8)
                .filter(|byte| *byte != b'\n')
                .collect();
            line.push(b'\n');
            line
        }
        1 => {
            let mut line = vec![b'x'; FRAME_BYTES_MAX + 16];
            line.push(b'\n');
            line
        }
        2 => b"{\"type\": \"request\"}\n".to_vec(),
        3 => request("run.explode", "pi-workflows.client.v1", "bad-client"),
        4 => request("run.status", "pi-workflows.client.v0", "bad-client"),
        5 => b"{\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}\n".to_vec(),
        6 => request("run.status", "pi-workflows.client.v1", "bad client/../x"),
        7 => b"{\"connectionId\":\"c1\",\"packageVersion\":\"0.1.0\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"hello\"}\n"
            .to_vec(),
        _ => b"{\"clientId\":\"bad-client\",\"operation\":\"run.st".to_vec(),
    }
}

#[derive(Default)]
struct BadFigures {
    connections: u64,
    closed: u64,
    answered: u64,
    open: u64,
    no_hello: u64,
    kinds: Vec<(&'static str, u64)>,
}

struct BadClient {
    thread: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    figures: Arc<Mutex<BadFigures>>,
}

impl BadClient {
    fn start(socket: PathBuf, global_stop: &Arc<AtomicBool>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let figures = Arc::new(Mutex::new(BadFigures {
            kinds: BAD_KINDS.iter().map(|kind| (*kind, 0)).collect(),
            ..BadFigures::default()
        }));
        let (thread_stop, global, shared) = (Arc::clone(&stop), Arc::clone(global_stop), Arc::clone(&figures));
        let counter = AtomicU64::new(0);
        let thread = std::thread::spawn(move || {
            while !thread_stop.load(Ordering::SeqCst) && !global.load(Ordering::SeqCst) {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let kind = (n % BAD_KINDS.len() as u64) as usize;
                let outcome = bad_connection(&socket, kind, n);
                let mut figures = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                figures.connections += 1;
                figures.kinds[kind].1 += 1;
                match outcome {
                    BadOutcome::Closed => figures.closed += 1,
                    BadOutcome::Answered => figures.answered += 1,
                    BadOutcome::Open => figures.open += 1,
                    BadOutcome::NoHello => figures.no_hello += 1,
                }
            }
        });
        Self {
            thread: Some(thread),
            stop,
            figures,
        }
    }

    fn stop_and_join(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn figures(mut self) -> BadFigures {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        std::mem::take(&mut *self.figures.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

enum BadOutcome {
    /// The server closed the connection without answering.
    Closed,
    /// It answered something, then closed.
    Answered,
    /// Still open after 5 s.
    Open,
    /// No hello (the server refused the connection, or it failed).
    NoHello,
}

fn bad_connection(socket: &Path, kind: usize, counter: u64) -> BadOutcome {
    let Ok(stream) = UnixStream::connect(socket) else {
        return BadOutcome::NoHello;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(read_half) = stream.try_clone() else {
        return BadOutcome::NoHello;
    };
    let mut reader = BufReader::new(read_half);
    let mut hello = String::new();
    if !matches!(reader.read_line(&mut hello), Ok(n) if n > 0) {
        return BadOutcome::NoHello;
    }
    // A write may fail once the server has seen enough of an oversized line and closed.
    let _ = (&stream).write_all(&bad_line(kind, counter));
    if kind == BAD_KINDS.len() - 1 {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    let mut rest = Vec::new();
    match reader.read_to_end(&mut rest) {
        Ok(_) if rest.is_empty() => BadOutcome::Closed,
        Ok(_) => BadOutcome::Answered,
        Err(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            BadOutcome::Open
        }
        // A reset after an unread oversized write is a close too.
        Err(_) => BadOutcome::Closed,
    }
}

struct RssSampler {
    thread: std::thread::JoinHandle<RssFigures>,
}

struct RssFigures {
    max_kib: u64,
    last_kib: u64,
}

impl RssSampler {
    fn start(pid: u32, stop: &Arc<AtomicBool>) -> Self {
        let stop = Arc::clone(stop);
        let thread = std::thread::spawn(move || {
            let mut figures = RssFigures {
                max_kib: 0,
                last_kib: 0,
            };
            while !stop.load(Ordering::SeqCst) {
                if let Some(kib) = rss_kib(pid) {
                    figures.max_kib = figures.max_kib.max(kib);
                    figures.last_kib = kib;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            figures
        });
        Self { thread }
    }

    fn join(self) -> RssFigures {
        self.thread.join().unwrap_or(RssFigures {
            max_kib: 0,
            last_kib: 0,
        })
    }
}

struct Exhaustion {
    attempted: usize,
    served: usize,
    reserved: usize,
    refused: usize,
    slowest_refusal: Duration,
    reserved_run_status: String,
    reserved_server_status: String,
    new_client_while_full: String,
    new_client_after: String,
    probe: Probe,
}

/// Open idle connections up to and past the limit (each reads its `hello` or its refusal),
/// probe while full, then close them and check a new client gets in.
fn exhaust(socket: &Path, probe: &mut Client) -> anyhow::Result<Exhaustion> {
    let attempted = CONNECTIONS_MAX + CONNECTIONS_RESERVE + EXCESS - (SUBSCRIBERS + 1);
    let mut open: Vec<(UnixStream, BufReader<UnixStream>)> = Vec::new();
    let (mut refused, mut slowest_refusal) = (0, Duration::ZERO);
    for _ in 0..attempted {
        let began = Instant::now();
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut hello = String::new();
        match reader.read_line(&mut hello) {
            Ok(n) if n > 0 => open.push((stream, reader)),
            _ => {
                refused += 1;
                slowest_refusal = slowest_refusal.max(began.elapsed());
            }
        }
    }
    // Full now: a new client is refused before `hello`.
    let new_client_while_full = match Client::connect(socket) {
        Ok(mut client) => match client.request_for(Operation::RunStatus, Some(PROBE_RUN), JsonObject::new()) {
            Ok(response) => format!("connected, run.status {:?}", response.error.map(|e| e.code)),
            Err(err) => format!("connected, then {err}"),
        },
        Err(err) => format!("refused ({err})"),
    };
    let served = open.len().min(CONNECTIONS_MAX - (SUBSCRIBERS + 1));
    let reserved = open.len() - served;
    // The last two connections opened are in the reserve (when the limit was reached).
    let mut ask = |index: usize, operation: &str| -> String {
        let Some((stream, reader)) = open.len().checked_sub(index).and_then(|i| open.get_mut(i)) else {
            return "no reserved connection".to_string();
        };
        let line = format!(
            "{{\"clientId\":\"load-reserve\",\"operation\":\"{operation}\",\"payload\":{{}},\"requestId\":\"r-{index}\",{}\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}}\n",
            if operation == "run.status" {
                "\"runId\":\"probe\","
            } else {
                ""
            }
        );
        if stream.write_all(line.as_bytes()).is_err() {
            return "write failed".to_string();
        }
        let mut answer = String::new();
        match reader.read_line(&mut answer) {
            Ok(n) if n > 0 => {
                let value: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
                match value["error"]["code"].as_str() {
                    Some(code) => format!("{} {code}", value["outcome"].as_str().unwrap_or("?")),
                    None => value["outcome"].as_str().unwrap_or("?").to_string(),
                }
            }
            _ => "closed".to_string(),
        }
    };
    let reserved_run_status = ask(1, "run.status");
    let reserved_server_status = ask(2, "server.status");
    let full_probe = probe_for(probe, FULL_PROBE, None)?;
    drop(open);
    std::thread::sleep(Duration::from_secs(1));
    let new_client_after = match Client::connect(socket).and_then(|mut client| {
        client
            .request_for(Operation::RunStatus, Some(PROBE_RUN), JsonObject::new())
            .map(|response| response.outcome)
    }) {
        Ok(outcome) => format!("connected, run.status {}", outcome.as_str()),
        Err(err) => format!("failed ({err})"),
    };
    Ok(Exhaustion {
        attempted,
        served,
        reserved,
        refused,
        slowest_refusal,
        reserved_run_status,
        reserved_server_status,
        new_client_while_full,
        new_client_after,
        probe: full_probe,
    })
}
