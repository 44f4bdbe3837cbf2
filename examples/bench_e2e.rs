//! Benchmark: the cost of a whole run, on the peers' workload (issue 14) — one workflow of 10
//! sequential trivial durable steps; a client starts it over the socket and waits for its end.
//!
//! `cargo build --release --locked && npm --prefix packages/pi-workflows run build &&
//!  cargo run --release --locked --example bench_e2e [-- --sequential 200 --seconds 10 --json]`
//!
//! Figures (each with both ways a client learns of the end: polling `run.status` every 2 ms,
//! and a `view.run.watch` subscription):
//! - sequential: p50 / p99 wall per workflow, one client, one run at a time;
//! - 4 clients for `--seconds`: workflows per second and p50 / p99 per workflow;
//! - server CPU per workflow (the server process's utime + stime from /proc, over each phase;
//!   its stime alone too: the kernel's share), and its children's (runner and resolver
//!   processes, counted as they are reaped);
//! - runner process start: from the runner epoch's record to its `runner.ready` (wall), from
//!   the `run_workers` rows; and the same-run baseline `node -e 0` (wall, and its CPU from the
//!   children's rusage), with its rate back to back on every core (the ceiling of a process
//!   per run); the whole machine's busy CPU per run with 4 clients (/proc/stat);
//! - `run.start` → first node committed (p50), from the run's events, and its phases (queue
//!   and admission, runner start, first command and node), over every run and over runs
//!   started one at a time on an idle warm server, there also from the client's send (the
//!   resolve included); `run.start` answered (resolve);
//! - where a sequential run's wall goes (p50 of each step, from the client's send and sight of
//!   the end and the store's timestamps): → created, → runner epoch, → ready, → first node, →
//!   the end committed, → the client saw it;
//! - idle: the server's RSS before any run, and its CPU per second with nothing to do, alone
//!   and with every process of its session (warm runners, resolver, their children).
//!
//! `--paired BASELINE` measures instead the server CPU per run (and its children's: runner and
//! resolver processes) of this build against another build of the server side by side: two
//! servers, each with its own state, warm pool and client, take turns run by run (A B B A …) in both completion modes, then with 4 clients in
//! bursts of a second (A B B A …, `--seconds` bursts each), so the machine's drift (the same
//! `node -e 0` varies by a third here from one minute to the next) falls on both alike. Two
//! copies of one build measure within 0–5 % of each other this way; whole benchmarks, one build
//! after the other, differ by up to 10 %.
//!
//! `--bystanders N` (both modes) first finishes N runs and keeps a `view.run.watch` of each
//! open on connections of their own: finished runs a user still looks at, whose live views
//! must not pay for every other run's commits.
//!
//! Its servers are daemons in a temporary state directory: however the benchmark ends (an
//! error, Ctrl-C, SIGTERM, SIGHUP) it stops them first.
//!
//! Nothing here is asserted: it prints a table, and JSON with `--json`; each phase's start is
//! said on stderr (a run takes minutes; profiling scripts wait for a phase's line).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use pi_workflows::client::Client;
use pi_workflows::protocol::{EventKind, JsonObject, Operation, Outcome};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// Clock ticks per second of /proc's CPU counters (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;
const POLL_MS: u64 = 2;
const BASELINE_STARTS: usize = 20;
/// How long the start-rate baseline runs `node -e 0` back to back on every core.
const NODE_RATE_SECONDS: u64 = 3;
const CLIENTS: usize = 4;
/// `--paired`: one server's turn with `CLIENTS` clients, short enough that the machine's
/// drift falls on both servers alike.
const PAIRED_BURST_S: u64 = 1;
/// `--paired`: a wait after the last burst, for the runners still ending to be settled and
/// counted with their server.
const PAIRED_SETTLE_MS: u64 = 500;
const WARMUP_RUNS: usize = 5;
/// Runs started one at a time on an idle, warm server (the pool refilled, nothing running):
/// the issue's "`run.start` → first node from an idle warm server".
const IDLE_STARTS: usize = 20;
/// The pause before each of those starts: longer than a runner's start-up, so the warm
/// runner taken by the previous run has been replaced.
const IDLE_GAP_MS: u64 = 600;
/// After the load, the wait for the warm pool's demand window to pass (5 s by default).
const IDLE_SETTLE_SECONDS: u64 = 7;
/// The idle CPU figure's span (ticks are 10 ms: a longer span resolves less than 1 ms/s).
const IDLE_SECONDS: u64 = 20;

struct Options {
    sequential: usize,
    seconds: u64,
    json: bool,
    /// `--paired`: the baseline build the server is measured against, side by side.
    paired: Option<PathBuf>,
    /// Finished runs kept watched while the measured runs go.
    bystanders: usize,
    /// Steps return a new value every run (else each step's constant).
    fresh_outputs: bool,
}

/// `--bystanders`: watches on one connection. Each view's snapshot and a patch or two (the
/// runner's end, recorded after the run's) wait unread meanwhile, within the client's 64
/// queued events.
const BYSTANDERS_PER_CONNECTION: usize = 20;
/// `--bystanders`: the most, in all.
const BYSTANDERS_MAX: usize = 1_000;

const USAGE: &str =
    "usage: bench_e2e [--sequential N] [--seconds N] [--json] [--paired BASELINE] [--bystanders N] [--fresh-outputs]
  --sequential N      runs one at a time per completion mode (default 200; with --paired, per server)
  --seconds N         length of each 4-client phase (default 10)
  --json              print the figures as JSON instead of a table
  --paired BASELINE   only the server's CPU per run (and its children's) of this build against the pi-workflows binary
                      BASELINE, both servers running side by side and taking turns run by run, then with 4 clients
                      in bursts of a second, taking turns burst by burst (--seconds bursts per server and mode)
  --bystanders N      first finish N runs and keep each watched (view.run.watch) while the measured runs go
                      (default 0, at most 1000)
  --fresh-outputs     each step returns a value new to the store every run, as most real steps do (default: each
                      step returns its constant, stored once)
Environment: PI_WORKFLOWS_BIN (the server build measured), PI_WORKFLOWS_PACKAGE_DIR, PI_WORKFLOWS_NODE.";

fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        sequential: 200,
        seconds: 10,
        json: false,
        paired: None,
        bystanders: 0,
        fresh_outputs: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sequential" => options.sequential = args.next().context("--sequential N")?.parse()?,
            "--seconds" => options.seconds = args.next().context("--seconds N")?.parse()?,
            "--json" => options.json = true,
            "--paired" => options.paired = Some(PathBuf::from(args.next().context("--paired BASELINE")?)),
            "--bystanders" => options.bystanders = args.next().context("--bystanders N")?.parse()?,
            "--fresh-outputs" => options.fresh_outputs = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if options.bystanders > BYSTANDERS_MAX {
        bail!("--bystanders {} is above {BYSTANDERS_MAX}\n{USAGE}", options.bystanders);
    }
    Ok(options)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Detect {
    Poll,
    Watch,
}

impl Detect {
    fn name(self) -> &'static str {
        match self {
            Detect::Poll => "poll",
            Detect::Watch => "watch",
        }
    }
}

struct Bench {
    exe: PathBuf,
    state: PathBuf,
    workflow: String,
    project: String,
    socket: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let options = options()?;
    let exe = locate_binary()?;
    let dir = tempfile::Builder::new().prefix("piwbe").tempdir_in("/tmp")?;
    stop_servers_on_signals(dir.path().to_path_buf())?;
    let measured = measure(&options, exe, dir.path());
    // However the measurement ended: no server of this benchmark outlives it (and its state
    // directory, removed with `dir`).
    stop_started_servers();
    measured
}

fn measure(options: &Options, exe: PathBuf, dir: &Path) -> anyhow::Result<()> {
    let state = dir.join("state");
    let project = dir.join("project");
    std::fs::create_dir_all(&project)?;
    let workflow = write_workflow(&project, options.fresh_outputs)?;
    let bench = Bench {
        socket: state.join("server").join("server.sock"),
        exe,
        state,
        workflow: workflow.display().to_string(),
        project: project.display().to_string(),
    };
    if let Some(baseline) = &options.paired {
        let baseline = Bench {
            socket: dir.join("baseline").join("server").join("server.sock"),
            exe: baseline.clone(),
            state: dir.join("baseline"),
            workflow: bench.workflow.clone(),
            project: bench.project.clone(),
        };
        let figures = paired(&baseline, &bench, options)?;
        match options.json {
            true => println!("{figures}"),
            false => print_paired(&figures),
        }
        return Ok(());
    }
    progress("baseline: node -e 0");
    let baseline = node_baseline()?;
    progress("server start, and its runners' startup snapshot");
    start_server(&bench)?;
    let server_pid = server_pid(&bench.state)?;
    let fresh_rss_kib = rss_kib(server_pid)?;
    let fresh_code_rss_kib = code_rss_kib(server_pid)?;
    let pool_mode = wait_for_runner_start_mode(&bench)?;
    let mut client = Client::connect(&bench.socket)?;
    for _ in 0..WARMUP_RUNS {
        run_once(&bench, &mut client, Detect::Poll)?;
    }
    let _bystanders = watch_bystanders(&bench, &mut client, options.bystanders)?;
    let mut figures = json!({
        "baseline": baseline,
        "pool_mode": pool_mode,
        "bystanders": options.bystanders,
        "fresh_outputs": options.fresh_outputs,
    });
    progress(&format!("{IDLE_STARTS} runs on an idle warm server"));
    let (mut idle_starts, mut idle_sent_ms, mut idle_walls) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..IDLE_STARTS {
        std::thread::sleep(Duration::from_millis(IDLE_GAP_MS));
        let sent_ms = unix_ms();
        let times = run_once(&bench, &mut client, Detect::Watch)?;
        idle_starts.push(times.run_id);
        idle_walls.push(times.wall_ms);
        idle_sent_ms.push(sent_ms);
    }
    // A whole run on an idle warm server: the sequential wall without a runner starting beside it.
    figures["idle_watch"] = json!({
        "runs": IDLE_STARTS,
        "p50_ms": percentile(&idle_walls, 0.50),
        "p99_ms": percentile(&idle_walls, 0.99),
    });
    for detect in [Detect::Poll, Detect::Watch] {
        let cpu_before = server_cpu_ms(server_pid)?;
        let kernel_before = server_kernel_cpu_ms(server_pid)?;
        let children_before = server_children_cpu_ms(server_pid)?;
        progress(&format!("sequential_{}: {} runs", detect.name(), options.sequential));
        let (mut walls, mut answers, mut marks) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..options.sequential {
            let sent_ms = unix_ms();
            let times = run_once(&bench, &mut client, detect)?;
            walls.push(times.wall_ms);
            answers.push(times.start_answered_ms);
            marks.push(ClientMarks {
                run_id: times.run_id,
                sent_ms,
                seen_ms: unix_ms(),
            });
        }
        let cpu = server_cpu_ms(server_pid)? - cpu_before;
        let kernel = server_kernel_cpu_ms(server_pid)? - kernel_before;
        let children = server_children_cpu_ms(server_pid)? - children_before;
        figures[format!("sequential_{}", detect.name())] = json!({
            "children_cpu_ms_per_run": children / options.sequential as f64,
            "runs": options.sequential,
            "p50_ms": percentile(&walls, 0.50),
            "p99_ms": percentile(&walls, 0.99),
            "start_answered_p50_ms": percentile(&answers, 0.50),
            "timeline": timeline(&bench.state, &marks)?,
            "server_cpu_ms_per_run": cpu / options.sequential as f64,
            "server_kernel_cpu_ms_per_run": kernel / options.sequential as f64,
        });
        progress(&format!("clients4_{}: {} s", detect.name(), options.seconds));
        figures[format!("clients4_{}", detect.name())] = concurrent(&bench, server_pid, detect, options.seconds)?;
    }
    progress("idle server");
    figures["runner_start"] = runner_starts(&bench.state)?;
    figures["start_to_first_node"] = start_to_first_node(&bench.state, None)?;
    figures["phases"] = phases(&bench.state, None)?;
    figures["idle_start_to_first_node"] = start_to_first_node(&bench.state, Some(&idle_starts))?;
    figures["idle_phases"] = phases(&bench.state, Some(&idle_starts))?;
    figures["idle_request_to_first_node"] = request_to_first_node(&bench.state, &idle_starts, &idle_sent_ms)?;
    figures["server_rss_kib"] = json!(rss_kib(server_pid)?);
    figures["idle"] = idle(server_pid, fresh_rss_kib, fresh_code_rss_kib)?;
    stop_started_servers();
    if options.json {
        println!("{figures}");
    } else {
        print_table(&figures);
    }
    Ok(())
}

/// Servers this benchmark started (binary, state directory), until stopped.
static STARTED: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// Start `bench`'s server, stopped again however the benchmark ends (`stop_started_servers`).
fn start_server(bench: &Bench) -> anyhow::Result<()> {
    lock_started().push((bench.exe.clone(), bench.state.clone()));
    cli(bench, &["server", "start"])
}

fn lock_started() -> std::sync::MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    STARTED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Stop every server this benchmark started (`server stop` waits for its runners to end).
fn stop_started_servers() {
    let started = std::mem::take(&mut *lock_started());
    for (exe, state) in started {
        let stopped = Command::new(&exe)
            .arg("--state-dir")
            .arg(&state)
            .args(["server", "stop"])
            .output();
        if !stopped.is_ok_and(|out| out.status.success()) {
            eprintln!("bench_e2e: the server of {} may still run", state.display());
        }
    }
}

/// On Ctrl-C, SIGTERM or SIGHUP: stop the servers, remove `dir`, exit. Why: a server is a
/// daemon; a benchmark killed halfway left it running on a deleted state directory.
fn stop_servers_on_signals(dir: PathBuf) -> anyhow::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(signal);
    }
    // Blocked in this thread before any other starts, so every thread inherits it and only
    // the waiting thread takes them (child processes start with no signal blocked).
    signals.thread_block()?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let Ok(signal) = signals.wait() else { return };
        eprintln!("bench_e2e: {signal}: stopping the benchmark's servers");
        stop_started_servers();
        let _ = std::fs::remove_dir_all(&dir);
        std::process::exit(128 + signal as i32);
    })?;
    Ok(())
}

/// Where the benchmark is, on stderr (a run takes a minute or more; scripts wait for a phase).
fn progress(phase: &str) {
    eprintln!("bench_e2e: {phase}");
}

/// One run's times (ms): until its end was seen the chosen way, and until `run.start` was
/// answered (the server resolved the workflow and queued the run).
struct RunTimes {
    run_id: String,
    wall_ms: f64,
    start_answered_ms: f64,
}

/// One run: start it, wait for its end the chosen way.
fn run_once(bench: &Bench, client: &mut Client, detect: Detect) -> anyhow::Result<RunTimes> {
    let started = Instant::now();
    let run_id = start(bench, client)?;
    let start_answered_ms = started.elapsed().as_secs_f64() * 1e3;
    match detect {
        Detect::Poll => poll_end(client, &run_id)?,
        Detect::Watch => watch_end(client, &run_id)?,
    }
    Ok(RunTimes {
        run_id,
        wall_ms: started.elapsed().as_secs_f64() * 1e3,
        start_answered_ms,
    })
}

fn start(bench: &Bench, client: &mut Client) -> anyhow::Result<String> {
    let mut payload = JsonObject::new();
    payload.insert("workflow".into(), json!(bench.workflow));
    payload.insert("projectPath".into(), json!(bench.project));
    payload.insert("executionMode".into(), json!("headless"));
    let run_id = format!(
        "run-bench-{}",
        pi_workflows::digest::random_hex(8).context("random run ID")?
    );
    let response = client.request_for(Operation::RunStart, Some(&run_id), payload)?;
    if response.outcome != Outcome::Accepted {
        bail!("run.start refused: {:?}", response.error);
    }
    Ok(run_id)
}

fn poll_end(client: &mut Client, run_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let response = client.request_for(Operation::RunStatus, Some(run_id), JsonObject::new())?;
        let status = response
            .receipt
            .as_ref()
            .and_then(|receipt| receipt.get("status"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match status.as_str() {
            "completed" => return Ok(()),
            "failed" | "cancelled" | "timed_out" => bail!("run {run_id} ended {status}"),
            _ if Instant::now() > deadline => bail!("run {run_id} did not complete"),
            _ => std::thread::sleep(Duration::from_millis(POLL_MS)),
        }
    }
}

/// Watch the run's view until it shows the end (snapshot, then merge patches).
fn watch_end(client: &mut Client, run_id: &str) -> anyhow::Result<()> {
    let response = client.request_for(Operation::ViewRunWatch, Some(run_id), JsonObject::new())?;
    if response.outcome != Outcome::Accepted {
        bail!("view.run.watch refused: {:?}", response.error);
    }
    let subscription = response
        .receipt
        .as_ref()
        .and_then(|receipt| receipt.get("subscriptionId"))
        .cloned();
    let deadline = Instant::now() + WAIT;
    let mut document = Value::Null;
    loop {
        if Instant::now() > deadline {
            bail!("run {run_id} did not complete");
        }
        let Some(event) = client.next_event(Duration::from_millis(500))? else {
            continue;
        };
        match event.event {
            EventKind::RunSnapshot => document = event.payload.get("view").cloned().unwrap_or_default(),
            EventKind::RunPatch => pi_workflows::view::patch::apply(&mut document, &event.payload["patch"]),
            _ => continue,
        }
        match document["display"]["status"].as_str().unwrap_or_default() {
            "completed" => break,
            "failed" | "cancelled" | "timed_out" => bail!("run {run_id} ended"),
            _ => {}
        }
    }
    let mut payload = JsonObject::new();
    if let Some(id) = subscription {
        payload.insert("subscriptionId".into(), id);
    }
    let _ = client.request(Operation::ViewUnwatch, payload)?;
    Ok(())
}

/// `--bystanders`: finish `count` runs and watch each of them on connections of their own,
/// kept open by the caller while the measured runs go (their first views read first).
fn watch_bystanders(bench: &Bench, client: &mut Client, count: usize) -> anyhow::Result<Vec<Client>> {
    if count > 0 {
        progress(&format!("{count} finished runs, watched from now on"));
    }
    let mut watchers = Vec::new();
    for first in (0..count).step_by(BYSTANDERS_PER_CONNECTION) {
        let mut watcher = Client::connect(&bench.socket)?;
        let watched = (count - first).min(BYSTANDERS_PER_CONNECTION);
        for _ in 0..watched {
            let run_id = run_once(bench, client, Detect::Poll)?.run_id;
            let response = watcher.request_for(Operation::ViewRunWatch, Some(&run_id), JsonObject::new())?;
            if response.outcome != Outcome::Accepted {
                bail!("view.run.watch of a bystander refused: {:?}", response.error);
            }
        }
        let mut snapshots = 0;
        while snapshots < watched {
            match watcher.next_event(WAIT)? {
                Some(event) if event.event == EventKind::RunSnapshot => snapshots += 1,
                Some(_) => {}
                None => bail!("a bystander's first view did not come ({snapshots} of {watched} came)"),
            }
        }
        watchers.push(watcher);
    }
    Ok(watchers)
}

/// `CLIENTS` clients, each starting runs one after another for `seconds`.
fn concurrent(bench: &Bench, server_pid: i32, detect: Detect, seconds: u64) -> anyhow::Result<Value> {
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = server_cpu_ms(server_pid)?;
    let kernel_before = server_kernel_cpu_ms(server_pid)?;
    let machine_before = machine_cpu_ms()?;
    let children_before = server_children_cpu_ms(server_pid)?;
    let started = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let stop = Arc::clone(&stop);
            let (socket, workflow, project) = (bench.socket.clone(), bench.workflow.clone(), bench.project.clone());
            std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
                let bench = Bench {
                    exe: PathBuf::new(),
                    state: PathBuf::new(),
                    workflow,
                    project,
                    socket,
                };
                let mut client = Client::connect(&bench.socket)?;
                let mut walls = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    walls.push(run_once(&bench, &mut client, detect)?.wall_ms);
                }
                Ok(walls)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut walls = Vec::new();
    for worker in workers {
        walls.extend(
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??,
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = server_cpu_ms(server_pid)? - cpu_before;
    let kernel = server_kernel_cpu_ms(server_pid)? - kernel_before;
    let machine = machine_cpu_ms()? - machine_before;
    let children = server_children_cpu_ms(server_pid)? - children_before;
    Ok(json!({
        "children_cpu_ms_per_run": children / walls.len().max(1) as f64,
        "machine_cpu_ms_per_run": machine / walls.len().max(1) as f64,
        "clients": CLIENTS,
        "runs": walls.len(),
        "workflows_per_s": walls.len() as f64 / elapsed,
        "p50_ms": percentile(&walls, 0.50),
        "p99_ms": percentile(&walls, 0.99),
        "server_cpu_ms_per_run": cpu / walls.len().max(1) as f64,
        "server_kernel_cpu_ms_per_run": kernel / walls.len().max(1) as f64,
    }))
}

/// Runner processes: record → `runner.ready`, from `run_workers` (ms).
fn runner_starts(state: &Path) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement =
        db.prepare("SELECT ready_at - started_at FROM run_workers WHERE ready_at IS NOT NULL ORDER BY started_at")?;
    let starts: Vec<f64> = statement
        .query_map([], |row| row.get::<_, i64>(0))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|ms| ms as f64)
        .collect();
    Ok(json!({"epochs": starts.len(), "p50_ms": percentile(&starts, 0.5), "p99_ms": percentile(&starts, 0.99)}))
}

/// Whether `run_id` is one of `only` (every run without a filter).
fn selected(only: Option<&[String]>, run_id: &str) -> bool {
    only.is_none_or(|ids| ids.iter().any(|id| id == run_id))
}

/// `run.start` accepted (the run's creation) → its first node committed (ms), over every run
/// or over `only`.
fn start_to_first_node(state: &Path, only: Option<&[String]>) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement = db.prepare(
        "SELECT r.run_id, (SELECT min(e.created_at) FROM events e WHERE e.run_id = r.run_id AND e.event_type = 'node.finished')
                - r.created_at
         FROM runs r",
    )?;
    let samples: Vec<f64> = statement
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<i64>>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|(run_id, _)| selected(only, run_id))
        .filter_map(|(_, ms)| ms)
        .map(|ms| ms as f64)
        .collect();
    Ok(json!({"runs": samples.len(), "p50_ms": percentile(&samples, 0.5), "p99_ms": percentile(&samples, 0.99)}))
}

/// The wall clock now, in ms since the epoch (the store's timestamps are on the same clock).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// From the client sending `run.start` (its resolve included) to the first node committed,
/// over `runs` sent at `sent_ms` (the same clock as the store's timestamps).
fn request_to_first_node(state: &Path, runs: &[String], sent_ms: &[i64]) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement =
        db.prepare("SELECT min(created_at) FROM events WHERE run_id = ?1 AND event_type = 'node.finished'")?;
    let mut samples = Vec::new();
    for (run_id, sent) in runs.iter().zip(sent_ms) {
        if let Some(first) = statement.query_row([run_id], |row| row.get::<_, Option<i64>>(0))? {
            samples.push((first - sent) as f64);
        }
    }
    Ok(json!({"runs": samples.len(), "p50_ms": percentile(&samples, 0.5), "p99_ms": percentile(&samples, 0.99)}))
}

/// One run's timestamps in the store (whole ms), for a run with exactly one runner epoch:
/// created, runner epoch recorded, `runner.ready`, first node committed, the end committed.
struct StoreMarks {
    created: i64,
    epoch: i64,
    ready: Option<i64>,
    first_node: Option<i64>,
    finished: Option<i64>,
}

/// The store's timestamps of every run that had one runner epoch, by run ID.
fn store_marks(state: &Path) -> anyhow::Result<HashMap<String, StoreMarks>> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement = db.prepare(
        "SELECT r.run_id, r.created_at, w.started_at, w.ready_at,
                (SELECT min(e.created_at) FROM events e WHERE e.run_id = r.run_id AND e.event_type = 'node.finished'),
                r.finished_at
         FROM runs r JOIN run_workers w ON w.run_id = r.run_id
         WHERE (SELECT count(*) FROM run_workers o WHERE o.run_id = r.run_id) = 1",
    )?;
    let marks = statement
        .query_map([], |row| {
            let marks = StoreMarks {
                created: row.get(1)?,
                epoch: row.get(2)?,
                ready: row.get(3)?,
                first_node: row.get(4)?,
                finished: row.get(5)?,
            };
            Ok((row.get::<_, String>(0)?, marks))
        })?
        .collect::<Result<HashMap<_, _>, _>>()?;
    Ok(marks)
}

/// Where `run.start` → first node goes, per run with one runner (ms, p50 of each phase, from
/// the store's millisecond timestamps): created → runner epoch recorded (queue and
/// admission), → `runner.ready` (take or spawn, the workflow's load and source check), →
/// first node committed (first command and the node). Over every ready run or over `only`.
fn phases(state: &Path, only: Option<&[String]>) -> anyhow::Result<Value> {
    let marks = store_marks(state)?;
    let (mut admit, mut launch, mut first) = (Vec::new(), Vec::new(), Vec::new());
    for (_, run) in marks.iter().filter(|(run_id, _)| selected(only, run_id)) {
        let Some(ready) = run.ready else { continue };
        admit.push((run.epoch - run.created) as f64);
        launch.push((ready - run.epoch) as f64);
        first.extend(run.first_node.map(|first_node| (first_node - ready) as f64));
    }
    Ok(json!({
        "runs": admit.len(),
        "queue_admit_p50_ms": percentile(&admit, 0.5),
        "launch_to_ready_p50_ms": percentile(&launch, 0.5),
        "ready_to_first_node_p50_ms": percentile(&first, 0.5),
    }))
}

/// When a client sent a run's `run.start` and saw its end (ms since the epoch, the store's clock).
struct ClientMarks {
    run_id: String,
    sent_ms: i64,
    seen_ms: i64,
}

/// Where a sequential run's wall goes, p50 of each step (ms; the store's timestamps are whole
/// ms): sent → created (the resolve and the request's checks), → runner epoch recorded (queue
/// and admission), → `runner.ready`, → first node committed, → the run's end committed, → the
/// client saw it. Runs with more than one runner epoch are left out.
fn timeline(state: &Path, marks: &[ClientMarks]) -> anyhow::Result<Value> {
    let stored = store_marks(state)?;
    let mut steps: [Vec<f64>; 6] = Default::default();
    for mark in marks {
        let Some(run) = stored.get(&mark.run_id) else { continue };
        let (Some(ready), Some(first_node), Some(finished)) = (run.ready, run.first_node, run.finished) else {
            continue;
        };
        let points = [
            mark.sent_ms,
            run.created,
            run.epoch,
            ready,
            first_node,
            finished,
            mark.seen_ms,
        ];
        for (step, pair) in steps.iter_mut().zip(points.windows(2)) {
            step.push((pair[1] - pair[0]) as f64);
        }
    }
    let p50 = |index: usize| percentile(&steps[index], 0.5);
    Ok(json!({
        "runs": steps[0].len(),
        "sent_to_created_p50_ms": p50(0),
        "queue_admit_p50_ms": p50(1),
        "launch_to_ready_p50_ms": p50(2),
        "ready_to_first_node_p50_ms": p50(3),
        "first_node_to_end_p50_ms": p50(4),
        "end_to_seen_p50_ms": p50(5),
    }))
}

/// Idle figures: the server's RSS before any run, and its CPU over `IDLE_SECONDS` with no
/// client and no run (after the load; the warm pool shrank back meanwhile), alone and with
/// every process of its session (warm runners, the resolver and their children). Of the RSS,
/// the server binary's own code pages (`link/hot-text.txt` keeps those few).
fn idle(server_pid: i32, fresh_rss_kib: u64, fresh_code_rss_kib: u64) -> anyhow::Result<Value> {
    std::thread::sleep(Duration::from_secs(IDLE_SETTLE_SECONDS));
    let before = server_cpu_ms(server_pid)?;
    let session_before = session_cpu_ms(server_pid)?;
    std::thread::sleep(Duration::from_secs(IDLE_SECONDS));
    let cpu = server_cpu_ms(server_pid)? - before;
    let session_cpu = session_cpu_ms(server_pid)? - session_before;
    Ok(json!({
        "fresh_rss_kib": fresh_rss_kib,
        "rss_kib": rss_kib(server_pid)?,
        "fresh_code_rss_kib": fresh_code_rss_kib,
        "code_rss_kib": code_rss_kib(server_pid)?,
        "cpu_ms_per_s": cpu / IDLE_SECONDS as f64,
        "session_cpu_ms_per_s": session_cpu / IDLE_SECONDS as f64,
    }))
}

/// CPU (ms) of every live process in the server's session (it is the session's leader), each
/// with its reaped children's: a process that ended between two reads is counted in its
/// parent's reaped share, so the difference of two reads is the session's CPU meanwhile.
fn session_cpu_ms(server_pid: i32) -> anyhow::Result<f64> {
    let (mut total, mut leader_found) = (0.0, false);
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        let Some(pid) = name.to_str().filter(|name| name.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        // A process may end meanwhile: it is then counted in its parent's reaped share.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state ppid pgrp session (the 4th) ...
        // utime stime cutime cstime (the 12th to 15th), in ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        if fields.get(3).and_then(|session| session.parse::<i32>().ok()) == Some(server_pid) {
            let ticks: f64 = fields
                .get(11..15)
                .unwrap_or_default()
                .iter()
                .filter_map(|value| value.parse::<f64>().ok())
                .sum();
            total += ticks * 1e3 / USER_HZ;
            leader_found |= pid == server_pid.to_string();
        }
    }
    // `server start` detaches the server into a session of its own; else this sum means nothing.
    ensure!(leader_found, "the server {server_pid} does not lead its own session");
    Ok(total)
}

/// `node -e 0`: wall per start, and CPU per start from the children's rusage.
fn node_baseline() -> anyhow::Result<Value> {
    let node = std::env::var("PI_WORKFLOWS_NODE").unwrap_or_else(|_| "node".to_string());
    let cpu_before = children_cpu_ms();
    let mut walls = Vec::new();
    for _ in 0..BASELINE_STARTS {
        let started = Instant::now();
        let status = Command::new(&node)
            .args(["-e", "0"])
            .status()
            .context("run node -e 0")?;
        if !status.success() {
            bail!("node -e 0 failed");
        }
        walls.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let cpu = (children_cpu_ms() - cpu_before) / BASELINE_STARTS as f64;
    Ok(json!({
        "node_e_0_wall_p50_ms": percentile(&walls, 0.5),
        "node_e_0_cpu_ms": cpu,
        "node_starts_per_s": node_start_rate(&node)?,
    }))
}

/// `node -e 0` back to back in one loop per core for `NODE_RATE_SECONDS`: starts per second,
/// the ceiling of a process per run on this machine (before any run's own work).
fn node_start_rate(node: &str) -> anyhow::Result<f64> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let started = Instant::now();
    let span = Duration::from_secs(NODE_RATE_SECONDS);
    let loops: Vec<_> = (0..cores)
        .map(|_| {
            let node = node.to_string();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut starts = 0;
                while started.elapsed() < span {
                    Command::new(&node)
                        .args(["-e", "0"])
                        .status()
                        .context("run node -e 0")?;
                    starts += 1;
                }
                Ok(starts)
            })
        })
        .collect();
    let mut starts = 0;
    for one in loops {
        starts += one.join().map_err(|_| anyhow::anyhow!("a start loop panicked"))??;
    }
    Ok(starts as f64 / started.elapsed().as_secs_f64())
}

/// Busy CPU of the whole machine (ms, every core): the non-idle jiffies of /proc/stat.
fn machine_cpu_ms() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat")?;
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let busy: f64 = fields
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != 3 && *index != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(busy * 1e3 / USER_HZ)
}

/// CPU of this process's waited-for children (ms): cutime + cstime of /proc/self/stat.
fn children_cpu_ms() -> f64 {
    proc_stat_ms("self", &[13, 14]).unwrap_or(f64::NAN)
}

/// The server's utime + stime (ms), from /proc/<pid>/stat.
fn server_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[11, 12])
}

/// The server's stime alone (ms): its CPU in the kernel (syscalls, page faults, switches).
fn server_kernel_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[12])
}

/// CPU of the server's reaped children (ms): its runner and resolver processes, counted when
/// they end (cutime + cstime of /proc/<pid>/stat).
fn server_children_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[13, 14])
}

/// Tick counters of /proc/<pid>/stat, counted from the field after the command's `)` (0 is
/// the state), summed in ms.
fn proc_stat_ms(pid: &str, indexes: &[usize]) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("stat")?.1.split_whitespace().collect();
    let mut ticks = 0.0;
    for &index in indexes {
        ticks += fields.get(index).context("a /proc stat field")?.parse::<f64>()?;
    }
    Ok(ticks * 1e3 / USER_HZ)
}

fn rss_kib(pid: i32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("VmRSS value")?.parse()?)
}

/// The resident part of the server binary's executable mappings (its code), from smaps.
fn code_rss_kib(pid: i32) -> anyhow::Result<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut in_code = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("Rss:") if in_code => kib += fields.next().context("an Rss value")?.parse::<u64>()?,
            // A mapping's header: address range, permissions, offset, device, inode, path.
            Some(range) if range.contains('-') && !range.ends_with(':') => {
                let executable = fields.next().is_some_and(|perms| perms.contains('x'));
                in_code = executable && fields.nth(3) == Some(exe.as_ref());
            }
            _ => {}
        }
    }
    Ok(kib)
}

/// How long a new server may take to build its runners' startup snapshot.
const SNAPSHOT_WAIT_MS_MAX: u64 = 60_000;

/// One server of a paired measurement: its bench, process and client.
struct PairedServer<'b> {
    bench: &'b Bench,
    pid: i32,
    client: Client,
}

/// `--paired`: `runs` sequential runs per server and completion mode, the two servers taking
/// turns (A B B A …), and each server's CPU per run over its own runs.
fn paired(baseline: &Bench, measured: &Bench, options: &Options) -> anyhow::Result<Value> {
    let (runs, bursts) = (options.sequential, options.seconds);
    let mut servers = Vec::new();
    let mut bystanders = Vec::new();
    for bench in [baseline, measured] {
        progress(&format!("server start: {}", bench.exe.display()));
        start_server(bench)?;
        wait_for_runner_start_mode(bench)?;
        let mut client = Client::connect(&bench.socket)?;
        for _ in 0..WARMUP_RUNS {
            run_once(bench, &mut client, Detect::Poll)?;
        }
        bystanders.push(watch_bystanders(bench, &mut client, options.bystanders)?);
        let pid = server_pid(&bench.state)?;
        servers.push(PairedServer { bench, pid, client });
    }
    let mut figures = json!({
        "paired": {
            "baseline": baseline.exe.display().to_string(),
            "measured": measured.exe.display().to_string(),
            "bystanders": options.bystanders,
            "fresh_outputs": options.fresh_outputs,
        }
    });
    for detect in [Detect::Poll, Detect::Watch] {
        progress(&format!("paired_{}: {runs} runs per server", detect.name()));
        figures["paired"][detect.name()] = paired_phase(&mut servers, detect, runs)?;
    }
    for detect in [Detect::Poll, Detect::Watch] {
        progress(&format!(
            "paired_clients4_{}: {bursts} bursts per server",
            detect.name()
        ));
        figures["paired"][format!("clients4_{}", detect.name())] = paired_bursts(&servers, detect, bursts)?;
    }
    stop_started_servers();
    Ok(figures)
}

fn paired_phase(servers: &mut [PairedServer<'_>], detect: Detect, runs: usize) -> anyhow::Result<Value> {
    let marks = cpu_marks(servers)?;
    let mut walls = [Vec::new(), Vec::new()];
    // A B B A: each server goes first as often as second.
    for turn in 0..runs * 2 {
        let side = [0, 1, 1, 0][turn % 4];
        let server = &mut servers[side];
        walls[side].push(run_once(server.bench, &mut server.client, detect)?.wall_ms);
    }
    let mut figures = cpu_per_run(servers, &marks, [runs as f64; 2])?;
    figures["runs"] = json!(runs);
    figures["baseline_p50_ms"] = json!(percentile(&walls[0], 0.50));
    figures["p50_ms"] = json!(percentile(&walls[1], 0.50));
    Ok(figures)
}

/// `--paired` with `CLIENTS` clients: bursts of `PAIRED_BURST_S`, the servers taking turns
/// (A B B A …), `bursts` each; each server's CPU per run over all of its bursts.
fn paired_bursts(servers: &[PairedServer<'_>], detect: Detect, bursts: u64) -> anyhow::Result<Value> {
    let marks = cpu_marks(servers)?;
    let mut runs = [0.0; 2];
    let mut rates = [Vec::new(), Vec::new()];
    for turn in 0..bursts as usize * 2 {
        let side = [0, 1, 1, 0][turn % 4];
        let server = &servers[side];
        let burst = concurrent(server.bench, server.pid, detect, PAIRED_BURST_S)?;
        runs[side] += burst["runs"].as_f64().unwrap_or(0.0);
        rates[side].push(burst["workflows_per_s"].as_f64().unwrap_or(f64::NAN));
    }
    std::thread::sleep(Duration::from_millis(PAIRED_SETTLE_MS));
    let mut figures = cpu_per_run(servers, &marks, runs)?;
    figures["runs"] = json!(runs[1]);
    figures["baseline_runs"] = json!(runs[0]);
    figures["baseline_workflows_per_s"] = json!(percentile(&rates[0], 0.50));
    figures["workflows_per_s"] = json!(percentile(&rates[1], 0.50));
    Ok(figures)
}

/// Each server's own CPU and its children's, in ms, at the start of a paired phase.
fn cpu_marks(servers: &[PairedServer<'_>]) -> anyhow::Result<Vec<(f64, f64)>> {
    servers
        .iter()
        .map(|server| Ok((server_cpu_ms(server.pid)?, server_children_cpu_ms(server.pid)?)))
        .collect()
}

/// Each server's CPU per run since `marks` (its own, its children's), and the ratios of the
/// measured server (side 1) to the baseline (side 0).
fn cpu_per_run(servers: &[PairedServer<'_>], marks: &[(f64, f64)], runs: [f64; 2]) -> anyhow::Result<Value> {
    let mut own = [0.0; 2];
    let mut children = [0.0; 2];
    for (side, server) in servers.iter().enumerate() {
        own[side] = (server_cpu_ms(server.pid)? - marks[side].0) / runs[side].max(1.0);
        children[side] = (server_children_cpu_ms(server.pid)? - marks[side].1) / runs[side].max(1.0);
    }
    Ok(json!({
        "baseline_server_cpu_ms_per_run": own[0],
        "server_cpu_ms_per_run": own[1],
        "server_cpu_ratio": own[1] / own[0],
        "baseline_children_cpu_ms_per_run": children[0],
        "children_cpu_ms_per_run": children[1],
        "children_cpu_ratio": children[1] / children[0],
    }))
}

fn print_paired(figures: &Value) {
    let paired = &figures["paired"];
    let f = |value: &Value| value.as_f64().map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    println!("measured: {}", paired["measured"].as_str().unwrap_or("-"));
    println!("baseline: {}", paired["baseline"].as_str().unwrap_or("-"));
    println!(
        "finished runs watched meanwhile on each (--bystanders): {}; steps return fresh values (--fresh-outputs): {}",
        paired["bystanders"], paired["fresh_outputs"]
    );
    println!(
        "{:<14} {:>6} {:>18} {:>16} {:>7} {:>20} {:>16} {:>7} {:>15} {:>9}",
        "mode",
        "runs",
        "server CPU ms/run",
        "baseline ms/run",
        "ratio",
        "children CPU ms/run",
        "baseline ms/run",
        "ratio",
        "p50 ms | runs/s",
        "baseline"
    );
    // Sequential rows give the p50 wall, the 4-client rows the median burst's runs per second.
    for (mode, speed) in [
        ("poll", "p50_ms"),
        ("watch", "p50_ms"),
        ("clients4_poll", "workflows_per_s"),
        ("clients4_watch", "workflows_per_s"),
    ] {
        let row = &paired[mode];
        println!(
            "{mode:<14} {:>6} {:>18} {:>16} {:>7} {:>20} {:>16} {:>7} {:>15} {:>9}",
            row["runs"]
                .as_f64()
                .map_or_else(|| "-".to_string(), |runs| format!("{runs:.0}")),
            f(&row["server_cpu_ms_per_run"]),
            f(&row["baseline_server_cpu_ms_per_run"]),
            f(&row["server_cpu_ratio"]),
            f(&row["children_cpu_ms_per_run"]),
            f(&row["baseline_children_cpu_ms_per_run"]),
            f(&row["children_cpu_ratio"]),
            f(&row[speed]),
            f(&row[format!("baseline_{speed}")])
        );
    }
}

/// The warm pool's way of starting runners once settled: a fresh state directory builds
/// the startup snapshot first, and figures taken meanwhile would mix both ways.
fn wait_for_runner_start_mode(bench: &Bench) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_millis(SNAPSHOT_WAIT_MS_MAX);
    loop {
        let out = Command::new(&bench.exe)
            .arg("--state-dir")
            .arg(&bench.state)
            .args(["server", "status", "--tree", "--json"])
            .output()?;
        let status: Value = serde_json::from_slice(&out.stdout).context("server status --tree --json")?;
        let mode = find_node(&status["tree"], "pool")
            .and_then(|pool| pool["details"]["mode"].as_str())
            .unwrap_or("unknown")
            .to_string();
        if mode != "building snapshot" || Instant::now() > deadline {
            return Ok(mode);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn find_node<'a>(node: &'a Value, id: &str) -> Option<&'a Value> {
    if node["id"] == id {
        return Some(node);
    }
    node["children"]
        .as_array()?
        .iter()
        .find_map(|child| find_node(child, id))
}

fn server_pid(state: &Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(state.join("server").join("server.lock"))?;
    Ok(text.split_whitespace().next().context("pid")?.parse()?)
}

fn write_workflow(dir: &Path, fresh_outputs: bool) -> anyhow::Result<PathBuf> {
    // A fresh value: the step's number and 16 random hex digits, 40 bytes of JSON.
    let value = |step: usize| match fresh_outputs {
        true => format!("({{ step: {step}, nonce: Math.random().toString(16).slice(2, 18) }})"),
        false => step.to_string(),
    };
    let nodes: Vec<String> = (1..=10)
        .map(|step| format!("    s{step}: compute({{ run: () => {} }}),", value(step)))
        .collect();
    let edges: Vec<String> = (1..10)
        .map(|step| format!("{{ from: \"s{step}\", to: \"s{}\" }}", step + 1))
        .collect();
    let source = format!(
        "import {{ compute, defineWorkflow }} from \"pi-workflows\";\nexport default defineWorkflow({{\n  name: \"ten\",\n  startAt: \"s1\",\n  nodes: {{\n{}\n  }},\n  edges: [{}],\n}});\n",
        nodes.join("\n"),
        edges.join(", ")
    );
    let path = dir.join("ten.workflow.ts");
    std::fs::write(&path, source)?;
    Ok(path)
}

fn cli(bench: &Bench, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(&bench.exe)
        .arg("--state-dir")
        .arg(&bench.state)
        .args(args)
        .env_remove("PI_WORKFLOWS_RUNNER")
        .output()?;
    if !out.status.success() {
        bail!("pi-workflows {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// `PI_WORKFLOWS_BIN` when set (a baseline build to compare with), else this checkout's build.
fn locate_binary() -> anyhow::Result<PathBuf> {
    if let Some(binary) = std::env::var_os("PI_WORKFLOWS_BIN").filter(|path| !path.is_empty()) {
        return Ok(PathBuf::from(binary));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for profile in ["release", "debug"] {
        let path = root.join("target").join(profile).join("pi-workflows");
        if path.exists() {
            return Ok(path);
        }
    }
    bail!("build the server first: cargo build --release --locked")
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn print_table(figures: &Value) {
    let f = |value: &Value| value.as_f64().map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    let baseline = &figures["baseline"];
    println!(
        "baseline node -e 0: wall p50 {} ms, CPU {} ms; {} starts/s on all cores",
        f(&baseline["node_e_0_wall_p50_ms"]),
        f(&baseline["node_e_0_cpu_ms"]),
        f(&baseline["node_starts_per_s"])
    );
    println!("warm runners start: {}", figures["pool_mode"].as_str().unwrap_or("-"));
    println!(
        "finished runs watched meanwhile (--bystanders): {}; steps return fresh values (--fresh-outputs): {}",
        figures["bystanders"], figures["fresh_outputs"]
    );
    println!(
        "{:<22} {:>8} {:>10} {:>10} {:>12} {:>16} {:>16} {:>18}",
        "phase", "runs", "p50 ms", "p99 ms", "runs/s", "server CPU ms/run", "of it kernel ms", "children CPU ms/run"
    );
    for key in ["sequential_poll", "sequential_watch", "clients4_poll", "clients4_watch"] {
        let row = &figures[key];
        println!(
            "{key:<22} {:>8} {:>10} {:>10} {:>12} {:>16} {:>16} {:>18}",
            row["runs"],
            f(&row["p50_ms"]),
            f(&row["p99_ms"]),
            f(&row["workflows_per_s"]),
            f(&row["server_cpu_ms_per_run"]),
            f(&row["server_kernel_cpu_ms_per_run"]),
            f(&row["children_cpu_ms_per_run"])
        );
    }
    println!(
        "machine CPU per run (every process, every core), 4 clients: {} ms (poll), {} ms (watch)",
        f(&figures["clients4_poll"]["machine_cpu_ms_per_run"]),
        f(&figures["clients4_watch"]["machine_cpu_ms_per_run"])
    );
    let runner = &figures["runner_start"];
    println!(
        "runner start (epoch recorded → ready): p50 {} ms, p99 {} ms over {} epochs",
        f(&runner["p50_ms"]),
        f(&runner["p99_ms"]),
        runner["epochs"]
    );
    for (label, first, phases) in [
        ("every run", "start_to_first_node", "phases"),
        ("runs on an idle warm server", "idle_start_to_first_node", "idle_phases"),
    ] {
        let (first, phases) = (&figures[first], &figures[phases]);
        println!(
            "run.start → first node, {label}: p50 {} ms, p99 {} ms; of which (p50) created → runner epoch recorded {} ms, → ready {} ms, → first node {} ms",
            f(&first["p50_ms"]),
            f(&first["p99_ms"]),
            f(&phases["queue_admit_p50_ms"]),
            f(&phases["launch_to_ready_p50_ms"]),
            f(&phases["ready_to_first_node_p50_ms"])
        );
    }
    let idle_run = &figures["idle_watch"];
    println!(
        "a whole run on an idle warm server (watch, nothing starting beside it): p50 {} ms, p99 {} ms",
        f(&idle_run["p50_ms"]),
        f(&idle_run["p99_ms"])
    );
    let request = &figures["idle_request_to_first_node"];
    println!(
        "run.start sent by the client → first node, idle warm server (resolve included): p50 {} ms, p99 {} ms",
        f(&request["p50_ms"]),
        f(&request["p99_ms"])
    );
    println!(
        "run.start answered (resolve + queue), sequential: p50 {} ms (poll), {} ms (watch)",
        f(&figures["sequential_poll"]["start_answered_p50_ms"]),
        f(&figures["sequential_watch"]["start_answered_p50_ms"])
    );
    for key in ["sequential_poll", "sequential_watch"] {
        let steps = &figures[key]["timeline"];
        println!(
            "{key}, where a run's wall goes (p50 ms): sent → created {}, → epoch {}, → ready {}, → first node {}, → end {}, → seen {}",
            f(&steps["sent_to_created_p50_ms"]),
            f(&steps["queue_admit_p50_ms"]),
            f(&steps["launch_to_ready_p50_ms"]),
            f(&steps["ready_to_first_node_p50_ms"]),
            f(&steps["first_node_to_end_p50_ms"]),
            f(&steps["end_to_seen_p50_ms"])
        );
    }
    println!("server RSS after the load: {} KiB", figures["server_rss_kib"]);
    let idle = &figures["idle"];
    println!(
        "idle server: RSS {} KiB fresh, {} KiB after the load (its code {} and {} KiB); CPU {} ms/s, {} ms/s with its warm runners and resolver",
        idle["fresh_rss_kib"],
        idle["rss_kib"],
        idle["fresh_code_rss_kib"],
        idle["code_rss_kib"],
        f(&idle["cpu_ms_per_s"]),
        f(&idle["session_cpu_ms_per_s"])
    );
}
