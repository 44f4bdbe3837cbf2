//! Runner liveness and limits on the real server and the Node runner: a runner that stops
//! answering the server's pings (here: SIGSTOP) shows as `unresponsive` in the run view,
//! still with `cancel` among its controls, and as `ready` once it runs again (SIGCONT); a
//! runner above its memory bound is stopped and its run parks as `runnerOutOfMemory`, with
//! `resume`; a runner stopped past the stall bound is killed and its run reclaimed and
//! relaunched under a new generation.

mod common;

use std::time::{Duration, Instant};

use common::e2e::{Env, json_of};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn view(env: &Env, run_id: &str) -> Value {
    json_of(&env.cli(&["view", run_id, "--once", "--json"]))
}

fn wait_for_activity(env: &Env, run_id: &str, state: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let view = view(env, run_id);
        if view["display"]["activity"]["state"] == state {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "the runner never showed as {state}: {}\n{}",
            view["display"],
            env.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn runner_pid(env: &Env) -> i32 {
    let status = json_of(&env.cli(&["server", "status", "--tree", "--json"]));
    let runners = status["tree"]["children"]
        .as_array()
        .and_then(|children| children.iter().find(|child| child["id"] == "runners"))
        .cloned()
        .expect("runners");
    let runner = runners["children"]
        .as_array()
        .and_then(|children| {
            children
                .iter()
                .find(|child| child["id"].as_str().is_some_and(|id| id.starts_with("runner-")))
        })
        .cloned()
        .expect("a live runner");
    runner["details"]["processes"][0]["pid"].as_i64().expect("pid") as i32
}

fn signal(pid: i32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn a_stopped_runner_shows_as_unresponsive_and_recovers() {
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_RUNNER_PING_MS".to_string(), "200".to_string()),
        ("PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS".to_string(), "1000".to_string()),
    ]);
    let run_id = env.start_fixture("long-wait", None);
    wait_for_activity(&env, &run_id, "ready");
    let pid = runner_pid(&env);
    signal(pid, "STOP");
    let stopped = wait_for_activity(&env, &run_id, "unresponsive");
    assert_eq!(stopped["display"]["status"], "running", "{}", stopped["display"]);
    let controls = stopped["display"]["controls"].as_array().expect("controls");
    assert!(controls.iter().any(|control| control == "cancel"), "{controls:?}");
    signal(pid, "CONT");
    wait_for_activity(&env, &run_id, "ready");
    let cancel = env.cli(&["run", "cancel", &run_id]);
    env.expect_code(&cancel, 0, "cancel the waiting run");
}

#[test]
fn a_runner_above_its_memory_bound_is_stopped_and_its_run_parks_resumable() {
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_RUNNER_PING_MS".to_string(), "200".to_string()),
        ("PI_WORKFLOWS_RUNNER_MEMORY_MB".to_string(), "256".to_string()),
    ]);
    expect_out_of_memory(&env, "memory-hog");
}

#[test]
fn a_workflow_declared_memory_bound_replaces_the_servers() {
    // Without a server bound the 4 GiB loop would finish; the workflow's 192 MiB stops it.
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_RUNNER_PING_MS".to_string(), "200".to_string()),
        ("PI_WORKFLOWS_RUNNER_MEMORY_MB".to_string(), "off".to_string()),
    ]);
    expect_out_of_memory(&env, "memory-hog-limited");
}

fn expect_out_of_memory(env: &Env, fixture: &str) {
    let run_id = env.start_fixture(fixture, None);
    env.wait_until("the run parks for its memory", || {
        env.count(&format!(
            "SELECT count(*) FROM run_queue WHERE run_id = '{run_id}' AND status = 'parked'"
        )) == 1
    });
    env.wait_runner_gone(&run_id);
    let view = view(env, &run_id);
    let display = &view["display"];
    assert_eq!(display["reason"]["code"], "runnerOutOfMemory", "{display}");
    let controls = display["controls"].as_array().expect("controls");
    assert!(controls.iter().any(|control| control == "resume"), "{controls:?}");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"
        )),
        0,
        "the allocation loop must not have finished"
    );
}

#[test]
fn an_unresponsive_runner_can_be_cancelled() {
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_RUNNER_PING_MS".to_string(), "200".to_string()),
        ("PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS".to_string(), "1000".to_string()),
    ]);
    let run_id = env.start_fixture("long-wait", None);
    wait_for_activity(&env, &run_id, "ready");
    signal(runner_pid(&env), "STOP");
    wait_for_activity(&env, &run_id, "unresponsive");
    let cancel = env.cli(&["run", "cancel", &run_id]);
    env.expect_code(&cancel, 0, "cancel an unresponsive run");
    env.wait_runner_gone(&run_id);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'cancelled'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM run_workers WHERE run_id = '{run_id}' AND finished_at IS NOT NULL AND unresponsive_since IS NULL"
        )),
        1,
        "the runner's end is recorded"
    );
}

#[test]
fn a_runner_stopped_past_the_stall_bound_is_killed_and_its_run_relaunched() {
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_RUNNER_PING_MS".to_string(), "200".to_string()),
        ("PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS".to_string(), "500".to_string()),
        ("PI_WORKFLOWS_RUNNER_STALLED_MS".to_string(), "1500".to_string()),
        ("PI_WORKFLOWS_RECLAIM_INTERVAL_MS".to_string(), "100".to_string()),
    ]);
    let run_id = env.start_fixture("long-wait", None);
    wait_for_activity(&env, &run_id, "ready");
    let pid = runner_pid(&env);
    signal(pid, "STOP");
    // Killed (SIGKILL works on a stopped process), reclaimed (generation 2), relaunched (3).
    env.wait_for_count(
        "a new runner serves the reclaimed run",
        &format!("SELECT count(*) FROM run_workers WHERE run_id = '{run_id}' AND generation = 3 AND status = 'ready'"),
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the stopped runner was killed and reaped"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM run_workers WHERE run_id = '{run_id}' AND generation = 1 AND status = 'timedOut'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM events WHERE run_id = '{run_id}' AND event_type = 'run.reclaimed' AND lease_generation = 2"
        )),
        1
    );
    let relaunched = wait_for_activity(&env, &run_id, "ready");
    assert_eq!(relaunched["display"]["status"], "running", "{}", relaunched["display"]);
    let cancel = env.cli(&["run", "cancel", &run_id]);
    env.expect_code(&cancel, 0, "cancel the relaunched run");
}
