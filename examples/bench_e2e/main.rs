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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use pi_workflows::client::Client;
use serde_json::{Value, json};

mod paired;
mod proc_figures;
mod runs;
mod store_figures;
mod table;

use paired::{paired, print_paired};
use proc_figures::{
    code_rss_kib, idle, node_baseline, rss_kib, server_children_cpu_ms, server_cpu_ms, server_kernel_cpu_ms,
};
use runs::{concurrent, run_once, watch_bystanders};
use store_figures::{
    ClientMarks, phases, request_to_first_node, runner_starts, start_to_first_node, timeline, unix_ms,
};
use table::print_table;

/// The concurrent clients of the second workload.
const CLIENTS: usize = 4;
/// Runs before any figure: the server's caches and statements, the pool at its demand target.
const WARMUP_RUNS: usize = 5;
/// Runs started one at a time on an idle, warm server (the pool refilled, nothing running):
/// the "`run.start` → first node from an idle warm server".
const IDLE_STARTS: usize = 20;
/// The pause before each of those starts: longer than a runner's start-up, so the warm
/// runner taken by the previous run has been replaced.
const IDLE_GAP_MS: u64 = 600;

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

/// How long a new server may take to build its runners' startup snapshot.
const SNAPSHOT_WAIT_MS_MAX: u64 = 60_000;

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
