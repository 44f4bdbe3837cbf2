//! Benchmark: real workflows through the real server and the Node runner (no scripted
//! runner), with a baseline measured in the same run.
//!
//! `cargo build --release && npm --prefix packages/pi-workflows run build &&
//!  cargo run --release --example bench_workflows`
//!
//! Figures printed:
//! - baseline: `node -e 0` process start to exit (what any Node child costs here);
//! - `run start` → first node: from spawning `pi-workflows run start <file>` (server already
//!   running and idle, so its warm resolver and warm runner are ready) to the commit of the
//!   run's first node (its `node.finished` event; compute nodes commit start and finish
//!   together). Includes the CLI, the `run.start` command with the server's resolution of
//!   the workflow, admission, the runner's launch, source verification and loading;
//! - per-node overhead of a 10-step compute workflow: (last node commit − first node
//!   commit) / 9, per run; each step is one durable commit answered before the next node;
//! - the same for a 100-step workflow (finer resolution: event times are in ms). In both
//!   chains each node returns its predecessor's whole output, so node k's output nests k
//!   levels and the work per node grows with k (JSON encoding, hashing, storing);
//! - a 100-step chain whose nodes return only their predecessor's number: the overhead per
//!   node without the growing payload;
//! - the same chain with declared run settings that every node reads (each start names its
//!   settings version and the server checks it), as a ratio to the chain without settings.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rusqlite::{Connection, OpenFlags};

const RUNS: usize = 20;
/// Pause before each measured start (the server idles; its warm runner is ready).
const IDLE_BETWEEN_RUNS_MS: u64 = 400;
const BASELINE_STARTS: usize = 20;
const WAIT: Duration = Duration::from_secs(60);

fn main() -> anyhow::Result<()> {
    let exe = locate_binary()?;
    let dir = tempfile::Builder::new().prefix("piwbw").tempdir_in("/tmp")?;
    let state = dir.path().join("state");
    let workflows = dir.path().join("project");
    std::fs::create_dir_all(&workflows)?;
    let ten = write_chain(&workflows, "chain10", 10, Chained::WholeOutput)?;
    let hundred = write_chain(&workflows, "chain100", 100, Chained::WholeOutput)?;
    let hundred_flat = write_chain(&workflows, "flat100", 100, Chained::Number)?;
    let hundred_settings = write_chain(&workflows, "settings100", 100, Chained::NumberAndSettings)?;

    let baseline = measure_node_start()?;
    println!("bench_workflows: {}", exe.display());
    report_ms("baseline: node -e 0 (start to exit)", &baseline);

    run_cli(&exe, &state, &workflows, &["server", "start"])?;
    // One warm-up run: the page cache and the server's statement caches.
    start_and_wait(&exe, &state, &workflows, &ten)?;
    let mut first_node = Vec::new();
    let mut per_node_10 = Vec::new();
    for _ in 0..RUNS {
        // Each start from an idle server, as a user starts a run: its warm runner and
        // resolver are ready (the pool refills when the last runner ends).
        std::thread::sleep(Duration::from_millis(IDLE_BETWEEN_RUNS_MS));
        let timing = start_and_wait(&exe, &state, &workflows, &ten)?;
        first_node.push(timing.to_first_node_ms);
        per_node_10.push(timing.per_node_ms);
    }
    let mut per_node_100 = Vec::new();
    for _ in 0..5 {
        per_node_100.push(start_and_wait(&exe, &state, &workflows, &hundred)?.per_node_ms);
    }
    let mut per_node_100_flat = Vec::new();
    for _ in 0..5 {
        per_node_100_flat.push(start_and_wait(&exe, &state, &workflows, &hundred_flat)?.per_node_ms);
    }
    let mut per_node_100_settings = Vec::new();
    for _ in 0..5 {
        per_node_100_settings.push(start_and_wait(&exe, &state, &workflows, &hundred_settings)?.per_node_ms);
    }
    run_cli(&exe, &state, &workflows, &["server", "stop"])?;

    report_ms("run start → first node committed", &first_node);
    println!(
        "  ratio to the node baseline p50: {:.1}",
        percentile(&first_node, 50.0) / percentile(&baseline, 50.0)
    );
    report_ms("per-node overhead, 10-step compute", &per_node_10);
    report_ms("per-node overhead, 100-step compute", &per_node_100);
    report_ms("per-node overhead, 100-step, flat outputs", &per_node_100_flat);
    report_ms(
        "per-node overhead, 100-step, flat, with settings",
        &per_node_100_settings,
    );
    println!(
        "  ratio to the flat chain without settings p50: {:.2}",
        percentile(&per_node_100_settings, 50.0) / percentile(&per_node_100_flat, 50.0)
    );
    Ok(())
}

fn locate_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().and_then(Path::parent).context("examples dir")?;
    let binary = dir.join("pi-workflows");
    if !binary.is_file() {
        bail!("{} is missing; run `cargo build --release` first", binary.display());
    }
    Ok(binary)
}

/// A workflow of `steps` chained pure compute nodes.
/// What each node of a chain takes from its predecessor's output.
#[derive(Clone, Copy)]
enum Chained {
    WholeOutput,
    Number,
    /// The number, plus a declared settings value each node reads.
    NumberAndSettings,
}

fn write_chain(dir: &Path, name: &str, steps: usize, chained: Chained) -> anyhow::Result<PathBuf> {
    let (field, read, declared) = match chained {
        Chained::WholeOutput => ("", "", ""),
        Chained::Number => ("?.i", "", ""),
        Chained::NumberAndSettings => (
            "?.i",
            ", step: settings?.step",
            "  settings: { initial: { step: 1 }, changeable: { \"/step\": [\"replace\"] } },\n",
        ),
    };
    let nodes: Vec<String> = (1..=steps)
        .map(|i| {
            format!(
                "    n{i}: compute({{ run: ({{ outputs, settings }}) => ({{ i: {i}, prev: outputs.n{}{field} ?? null{read} }}) }}),",
                i - 1
            )
        })
        .collect();
    let edges: Vec<String> = (1..steps)
        .map(|i| format!("{{ from: \"n{i}\", to: \"n{}\" }}", i + 1))
        .collect();
    let source = format!(
        "import {{ compute, defineWorkflow }} from \"pi-workflows\";\n\
         export default defineWorkflow({{\n  name: \"{name}\",\n{declared}  startAt: \"n1\",\n  nodes: {{\n{}\n  }},\n  edges: [{}],\n}});\n",
        nodes.join("\n"),
        edges.join(", ")
    );
    let path = dir.join(format!("{name}.workflow.ts"));
    std::fs::write(&path, source)?;
    Ok(path)
}

fn measure_node_start() -> anyhow::Result<Vec<f64>> {
    let mut samples = Vec::new();
    for _ in 0..BASELINE_STARTS {
        let started = Instant::now();
        let status = Command::new("node").args(["-e", "0"]).status().context("node")?;
        if !status.success() {
            bail!("node -e 0 failed");
        }
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok(samples)
}

fn run_cli(exe: &Path, state: &Path, project: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .current_dir(project)
        .env_remove("PI_WORKFLOWS_RUNNER")
        .output()?;
    if !out.status.success() {
        bail!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Timing {
    to_first_node_ms: f64,
    per_node_ms: f64,
}

fn start_and_wait(exe: &Path, state: &Path, project: &Path, workflow: &Path) -> anyhow::Result<Timing> {
    let started_ms = unix_ms();
    let workflow = workflow.to_string_lossy().into_owned();
    let answer = run_cli(exe, state, project, &["run", "start", &workflow, "--json"])?;
    let run_id = serde_json::from_str::<serde_json::Value>(&answer)?["runId"]
        .as_str()
        .context("runId")?
        .to_string();
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let deadline = Instant::now() + WAIT;
    loop {
        let status: String = db.query_row("SELECT status FROM runs WHERE run_id = ?1", [&run_id], |row| row.get(0))?;
        match status.as_str() {
            "completed" => break,
            "failed" | "cancelled" | "timed_out" => bail!("run {run_id} ended {status}"),
            _ if Instant::now() > deadline => bail!("run {run_id} did not complete"),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let times: Vec<i64> = db
        .prepare(
            "SELECT created_at FROM events WHERE run_id = ?1 AND event_type = 'node.finished' ORDER BY resource_revision",
        )?
        .query_map([&run_id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let (first, last) = (times.first().context("no node")?, times.last().context("no node")?);
    Ok(Timing {
        to_first_node_ms: (*first as f64) - started_ms,
        per_node_ms: (last - first) as f64 / (times.len().saturating_sub(1).max(1)) as f64,
    })
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64() * 1e3)
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report_ms(what: &str, samples: &[f64]) {
    println!(
        "{what:<40} p50 {:>8.2} ms  p90 {:>8.2} ms  max {:>8.2} ms  ({} samples)",
        percentile(samples, 50.0),
        percentile(samples, 90.0),
        percentile(samples, 100.0),
        samples.len()
    );
}
