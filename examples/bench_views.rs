//! Benchmark: live-view subscribers must not slow anyone else down.
//!
//! `cargo build --release && cargo run --release --example bench_views`
//!
//! A scripted run changes about 100 times a second (one committed node every 10 ms) while
//! an unrelated client sends requests back to back (`view.runs.page` and `run.status` of
//! another run). Measured twice in the same run: with no subscribers (baseline), then with
//! 50 subscribers on the changing run, each on its own connection reading every event.
//! Printed: the unrelated client's request latency (p50/p99/max), the ratio of the p99s,
//! events delivered, and the server's resident memory (VmRSS) in each phase.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome};
use pi_workflows::store::{Store, SystemClock, runs};

const SUBSCRIBERS: usize = 50;
const STEPS: usize = 700;
const STEP_DELAY_MS: u64 = 10;
const PHASE: Duration = Duration::from_secs(3);

fn main() -> anyhow::Result<()> {
    let exe = locate_binary("pi-workflows")?;
    let runner = locate_binary("pi-workflows-test-runner")?;
    let dir = tempfile::Builder::new().prefix("piwbv").tempdir_in("/tmp")?;
    let baseline = phase(&exe, &runner, &dir.path().join("a"), 0)?;
    let loaded = phase(&exe, &runner, &dir.path().join("b"), SUBSCRIBERS)?;
    println!("bench_views: a run changing ~{} times/s", 1000 / STEP_DELAY_MS);
    baseline.report("0 subscribers (baseline)");
    loaded.report(&format!("{SUBSCRIBERS} subscribers"));
    println!(
        "  p99 ratio (loaded / baseline): {:.2}  (target: p99 ≤ 20 ms with subscribers)",
        loaded.percentile(99.0) / baseline.percentile(99.0)
    );
    Ok(())
}

struct Phase {
    latencies_ms: Vec<f64>,
    events: u64,
    rss_kib: u64,
    changes: i64,
}

impl Phase {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let index = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[index]
    }

    fn report(&self, label: &str) {
        println!(
            "{label:<28} unrelated requests: p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>6.2} ms  ({} requests) | run changes {} | events delivered {} | server RSS {} KiB",
            self.percentile(50.0),
            self.percentile(99.0),
            self.percentile(100.0),
            self.latencies_ms.len(),
            self.changes,
            self.events,
            self.rss_kib
        );
    }
}

fn phase(exe: &Path, runner: &Path, state: &Path, subscribers: usize) -> anyhow::Result<Phase> {
    queue(state)?;
    let script = format!("steps={STEPS},step-delay-ms={STEP_DELAY_MS}");
    let out = Command::new(exe)
        .arg("--state-dir")
        .arg(state)
        .args(["server", "start"])
        .env("PI_WORKFLOWS_RUNNER", runner)
        .env("PI_WORKFLOWS_TEST_SCRIPT", &script)
        .env("PI_WORKFLOWS_MAX_WORKERS", "1")
        .output()?;
    if !out.status.success() {
        bail!("server start: {}", String::from_utf8_lossy(&out.stderr));
    }
    let socket = state.join("server").join("server.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let readers = start_subscribers(&socket, subscribers, &stop, &events)?;
    let mut client = Client::connect(&socket)?;
    let revision_before = revision(&mut client)?;
    let latencies_ms = unrelated_requests(&mut client)?;
    let changes = revision(&mut client)? - revision_before;
    let rss_kib = server_rss_kib(state)?;
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        let _ = reader.join();
    }
    Command::new(exe)
        .arg("--state-dir")
        .arg(state)
        .args(["server", "stop"])
        .output()?;
    Ok(Phase {
        latencies_ms,
        events: events.load(Ordering::SeqCst),
        rss_kib,
        changes,
    })
}

/// The changing run (`run-0`) and an unrelated one (`run-1`, queued behind a capacity of
/// one runner) whose `run.status` the unrelated client reads.
fn queue(state: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(state)?;
    let store = Store::open(&state.join("state.sqlite"), Arc::new(SystemClock))?;
    for run_id in ["run-0", "run-1"] {
        let run = runs::NewRun {
            run_id: run_id.to_string(),
            workflow_name: "bench".to_string(),
            project_path: String::new(),
            parent_run_id: None,
            root_run_id: None,
            definition_digest: format!("sha256:{}", "d".repeat(64)),
            origin: Default::default(),
            workflow_source_json: "{}".to_string(),
            input_hash: "e".repeat(64),
            execution: runs::ExecutionMode::Headless,
        };
        store.write(move |tx| runs::queue_run(tx, &run))?;
    }
    Ok(())
}

fn start_subscribers(
    socket: &Path,
    count: usize,
    stop: &Arc<AtomicBool>,
    events: &Arc<AtomicU64>,
) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut readers = Vec::new();
    for _ in 0..count {
        let mut client = Client::connect(socket)?;
        let response = client.request_for(Operation::ViewRunWatch, Some("run-0"), JsonObject::new())?;
        if response.outcome != Outcome::Accepted {
            bail!("watch refused: {:?}", response.error);
        }
        let (stop, events) = (Arc::clone(stop), Arc::clone(events));
        readers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Some(_)) = client.next_event(Duration::from_millis(100)) {
                    events.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    Ok(readers)
}

fn unrelated_requests(client: &mut Client) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::new();
    let started = Instant::now();
    let mut page = JsonObject::new();
    page.insert("limit".into(), 10.into());
    while started.elapsed() < PHASE {
        let began = Instant::now();
        let response = if latencies.len() % 2 == 0 {
            client.request(Operation::ViewRunsPage, page.clone())?
        } else {
            client.request_for(Operation::RunStatus, Some("run-1"), JsonObject::new())?
        };
        latencies.push(began.elapsed().as_secs_f64() * 1000.0);
        if response.outcome != Outcome::Accepted {
            bail!("request refused: {:?}", response.error);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(latencies)
}

fn revision(client: &mut Client) -> anyhow::Result<i64> {
    let response = client.request_for(Operation::RunStatus, Some("run-0"), JsonObject::new())?;
    response
        .receipt
        .and_then(|receipt| receipt.get("revision").and_then(serde_json::Value::as_i64))
        .context("run.status without a revision")
}

fn server_rss_kib(state: &Path) -> anyhow::Result<u64> {
    let pid = std::fs::read_to_string(state.join("server").join("server.lock"))?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")
}

fn locate_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().and_then(Path::parent).context("examples dir")?;
    let binary = dir.join(name);
    if !binary.is_file() {
        bail!("{} is missing; run `cargo build --release` first", binary.display());
    }
    Ok(binary)
}
