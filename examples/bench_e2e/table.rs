//! The benchmark's figures as a table (`--json` prints them as they are).

use serde_json::Value;

pub(crate) fn print_table(figures: &Value) {
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
