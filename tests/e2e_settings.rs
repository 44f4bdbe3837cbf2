//! End to end on the real binary with the real Node runner: run settings. A workflow declares
//! settings and which paths may change; `run settings` shows and changes them while the run
//! is live; each node attempt sees one frozen copy (a change made while a step runs reaches
//! the nodes started after it); denied paths, stale compare-and-set numbers and ended runs
//! are refused with nothing changed; a retried change adopts its first answer.

mod common;

use common::e2e::*;
use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome};
use pi_workflows::server::ownership::ServerPaths;
use serde_json::{Value, json};

fn change_number(env: &Env, run_id: &str) -> i64 {
    env.count(&format!(
        "SELECT change_number FROM run_settings WHERE run_id = '{run_id}'"
    ))
}

fn settings_page(env: &Env, run_id: &str) -> Value {
    let out = env.cli(&["run", "settings", run_id, "--json"]);
    env.expect_code(&out, 0, "run settings (show)");
    json_of(&out)
}

#[test]
fn settings_change_while_a_run_is_live_and_each_attempt_sees_a_frozen_copy() {
    let env = Env::new();
    let work = short_temp_dir("piwg");
    let gate = work.path().join("gate");
    let input = json!({ "gate": gate }).to_string();
    let run_id = env.start_fixture("tuned", Some(&input));
    env.wait_for_count(
        "the gate step runs",
        &format!(
            "SELECT count(*) FROM node_attempts WHERE run_id = '{run_id}' AND node_path = 'gate' AND status = 'running'"
        ),
    );

    let page = settings_page(&env, &run_id);
    assert_eq!(page["changeNumber"], 0);
    assert_eq!(
        page["settings"],
        json!({"greeting": "hello", "reviewers": ["ann"], "fixed": "locked"})
    );
    assert_eq!(
        page["paths"],
        json!([{"path": "/greeting", "allow": ["replace"]}, {"path": "/reviewers", "allow": ["add", "remove"]}])
    );

    // A path the workflow did not declare changeable is refused, and nothing changes.
    let denied = env.cli(&["run", "settings", &run_id, "--set", "/fixed=free"]);
    env.expect_code(&denied, 1, "a denied settings change");
    assert!(
        stderr_of(&denied).contains("settingsForbidden"),
        "{}",
        stderr_of(&denied)
    );
    assert_eq!(change_number(&env, &run_id), 0);

    let changed = env.cli(&[
        "run",
        "settings",
        &run_id,
        "--set",
        "/greeting=hi",
        "--expect",
        "0",
        "--json",
    ]);
    env.expect_code(&changed, 0, "a settings change at the expected number");
    assert_eq!(json_of(&changed)["changeNumber"], 1);

    // Compare-and-set: a change made against an older number is refused.
    let stale = env.cli(&["run", "settings", &run_id, "--set", "/greeting=hey", "--expect", "0"]);
    env.expect_code(&stale, 1, "a stale compare-and-set");
    assert!(stderr_of(&stale).contains("settingsChanged"), "{}", stderr_of(&stale));
    assert_eq!(change_number(&env, &run_id), 1);

    // A retry of one change with its idempotency key adopts the first answer.
    let mut client = Client::connect(&ServerPaths::new(env.dir()).socket).expect("connect");
    let mut payload = JsonObject::new();
    payload.insert(
        "patch".into(),
        json!([{"op": "add", "path": "/reviewers/-", "value": "bob"}]),
    );
    let key = Some("settings-key-1".to_string());
    let first = client
        .request_keyed(
            Operation::RunChangeSettings,
            Some(&run_id),
            payload.clone(),
            key.clone(),
        )
        .expect("change");
    let again = client
        .request_keyed(Operation::RunChangeSettings, Some(&run_id), payload, key)
        .expect("retry");
    assert_eq!(first.outcome, Outcome::Accepted, "{first:?}");
    assert_eq!(again.outcome, Outcome::Adopted, "{again:?}");
    assert_eq!(first.receipt, again.receipt);
    assert_eq!(change_number(&env, &run_id), 2, "the retry changed nothing");

    std::fs::write(&gate, b"open").expect("open the gate");
    env.wait_for_count(
        "the run completes",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"),
    );
    assert_eq!(
        env.node_output(&run_id, "before"),
        json!({"greeting": "hello", "number": 0})
    );
    assert_eq!(
        env.node_output(&run_id, "gate")["said"],
        "hello",
        "the shell step kept the copy it started with"
    );
    assert_eq!(
        env.node_output(&run_id, "after"),
        json!({"greeting": "hi", "reviewers": ["ann", "bob"], "number": 2, "frozen": true}),
        "the next node saw the changes made while the step ran, read-only"
    );
    let numbers = env.texts(&format!(
        "SELECT node_path || '=' || settings_change_number FROM node_attempts WHERE run_id = '{run_id}' ORDER BY rowid"
    ));
    assert_eq!(numbers, ["before=0", "gate=0", "after=2"]);

    // An ended run's settings no longer change.
    let ended = env.cli(&["run", "settings", &run_id, "--set", "/greeting=late"]);
    env.expect_code(&ended, 1, "a change after the run ended");
    assert!(stderr_of(&ended).contains("ended"), "{}", stderr_of(&ended));
    let page = settings_page(&env, &run_id);
    assert_eq!(page["changeNumber"], 2);
    let actors: Vec<String> = page["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| {
            format!(
                "{}:{}",
                change["changeNumber"],
                change["actor"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(actors, ["2:human", "1:human", "0:workflow"]);
    let view = env.cli(&["view", &run_id, "--once", "--json"]);
    env.expect_code(&view, 0, "view --once");
    assert_eq!(json_of(&view)["run"]["settingsChangeNumber"], 2);
    let human = env.cli(&["view", &run_id, "--once"]);
    env.expect_code(&human, 0, "view --once (human)");
    assert!(
        String::from_utf8_lossy(&human.stdout).contains("settings: change 2 (changed"),
        "{}",
        String::from_utf8_lossy(&human.stdout)
    );
    let verify = env.cli(&["state", "verify"]);
    env.expect_code(&verify, 0, "state verify after settings changes");
}

#[test]
fn a_run_without_declared_settings_refuses_changes() {
    let env = Env::new();
    let run_id = env.start_fixture("slow-steps", None);
    let show = env.cli(&["run", "settings", &run_id]);
    env.expect_code(&show, 1, "settings of a run without any");
    assert!(stderr_of(&show).contains("noSettings"), "{}", stderr_of(&show));
    let change = env.cli(&["run", "settings", &run_id, "--set", "/a=1"]);
    env.expect_code(&change, 1, "a change to a run without settings");
    assert!(
        stderr_of(&change).contains("declares no changeable settings"),
        "{}",
        stderr_of(&change)
    );
    let bad_patch = env.cli(&[
        "run",
        "settings",
        &run_id,
        "--patch",
        r#"[{"op":"move","from":"/a","path":"/b"}]"#,
    ]);
    env.expect_code(&bad_patch, 1, "a move operation");
    assert!(
        stderr_of(&bad_patch).contains("move and copy are not supported"),
        "{}",
        stderr_of(&bad_patch)
    );
    assert_eq!(env.count("SELECT count(*) FROM run_settings"), 0);
}
