//! Escaped processes of a run: detached children that left the runner's process group are
//! reparented to the server (a subreaper) when the runner ends; the server stops the ones
//! that carry the runner's mark and reaps every orphan, so none keeps running and none
//! stays a zombie.

mod common;

use std::time::{Duration, Instant};

use common::e2e::Env;

const WAIT: Duration = Duration::from_secs(30);

/// The process is gone from /proc: not running and not a zombie either (it was reaped).
fn reaped(pid: i64) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn detached_children_of_a_finished_run_are_stopped_and_reaped() {
    let env = Env::new();
    let run_id = env.start_fixture("escape-sleeps", None);
    env.wait_until("the run completed and its runner is gone", || {
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"
        )) == 1
    });
    env.wait_runner_gone(&run_id);
    let output = env.node_output(&run_id, "escape");
    let pids: Vec<i64> = output["pids"]
        .as_array()
        .expect("pids")
        .iter()
        .filter_map(serde_json::Value::as_i64)
        .collect();
    assert_eq!(pids.len(), 50, "{output}");
    let deadline = Instant::now() + WAIT;
    loop {
        let left: Vec<i64> = pids.iter().copied().filter(|pid| !reaped(*pid)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of the detached sleeps are still running or zombies: {left:?}\n{}",
            left.len(),
            env.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    assert!(log.contains("escaped a runner's process group"), "{log}");
    // The server itself has no zombie children left either.
    let server = env.server_pid();
    let zombies = zombie_children_of(server);
    assert!(zombies.is_empty(), "zombie children of the server: {zombies:?}");
}

fn zombie_children_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit(')').next().unwrap_or_default().to_string();
            let fields: Vec<&str> = after.split_ascii_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(1).and_then(|ppid| ppid.parse::<i32>().ok()) == Some(parent)
        })
        .collect()
}
