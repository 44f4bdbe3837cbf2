//! `--paired`: two servers taking turns run by run, then burst by burst; each server's CPU
//! per run over its own runs.

use std::time::Duration;

use pi_workflows::client::Client;
use serde_json::{Value, json};

use super::proc_figures::{server_children_cpu_ms, server_cpu_ms};
use super::runs::{concurrent, run_once, watch_bystanders};
use super::{
    Bench, Detect, Options, WARMUP_RUNS, percentile, progress, server_pid, start_server, stop_started_servers,
    wait_for_runner_start_mode,
};

/// `--paired`: one server's turn with `CLIENTS` clients, short enough that the machine's
/// drift falls on both servers alike.
const PAIRED_BURST_S: u64 = 1;
/// `--paired`: a wait after the last burst, for the runners still ending to be settled and
/// counted with their server.
const PAIRED_SETTLE_MS: u64 = 500;

/// One server of a paired measurement: its bench, process and client.
struct PairedServer<'b> {
    bench: &'b Bench,
    pid: i32,
    client: Client,
}

/// `--paired`: `runs` sequential runs per server and completion mode, the two servers taking
/// turns (A B B A …), and each server's CPU per run over its own runs.
pub(crate) fn paired(baseline: &Bench, measured: &Bench, options: &Options) -> anyhow::Result<Value> {
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

pub(crate) fn print_paired(figures: &Value) {
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
