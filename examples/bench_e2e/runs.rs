//! One run and the 4-client phase: start a run over the socket, see its end by polling or
//! watching, keep finished runs watched (`--bystanders`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use pi_workflows::client::Client;
use pi_workflows::protocol::{EventKind, JsonObject, Operation, Outcome};
use serde_json::{Value, json};

use super::proc_figures::{machine_cpu_ms, server_children_cpu_ms, server_cpu_ms, server_kernel_cpu_ms};
use super::{Bench, CLIENTS, Detect, percentile, progress};

/// The longest a run may take to end before the benchmark gives up on it.
const WAIT: Duration = Duration::from_secs(60);
/// The poll mode's `run.status` interval.
const POLL_MS: u64 = 2;
/// `--bystanders`: watches on one connection. Each view's snapshot and a patch or two (the
/// runner's end, recorded after the run's) wait unread meanwhile, within the client's 64
/// queued events.
const BYSTANDERS_PER_CONNECTION: usize = 20;

/// One run's times (ms): until its end was seen the chosen way, and until `run.start` was
/// answered (the server resolved the workflow and queued the run).
pub(crate) struct RunTimes {
    pub(crate) run_id: String,
    pub(crate) wall_ms: f64,
    pub(crate) start_answered_ms: f64,
}

/// One run: start it, wait for its end the chosen way.
pub(crate) fn run_once(bench: &Bench, client: &mut Client, detect: Detect) -> anyhow::Result<RunTimes> {
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
pub(crate) fn watch_bystanders(bench: &Bench, client: &mut Client, count: usize) -> anyhow::Result<Vec<Client>> {
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
pub(crate) fn concurrent(bench: &Bench, server_pid: i32, detect: Detect, seconds: u64) -> anyhow::Result<Value> {
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
