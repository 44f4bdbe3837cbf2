//! What a runner's steps inherit: the environment of the shell that started the server (a
//! variable of the user's is there), less the server's internals and test hooks, less what
//! `PI_WORKFLOWS_ENV_DENY` withholds. `server status` says how old that environment is,
//! without showing any of it.

mod common;

use common::e2e::{Env, json_of};
use serde_json::json;

/// Runs the `show-env` fixture to its end: which variables its shell step saw, and whether
/// its runner started with the server's tunables.
fn environment_seen_by_a_step(env: &Env) -> serde_json::Value {
    let run_id = env.start_fixture("show-env", None);
    env.wait_until("the run completed", || {
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"
        )) == 1
    });
    env.node_output(&run_id, "env")
}

#[test]
fn steps_see_the_users_environment_without_the_servers_internals() {
    let env = Env::with_vars(vec![
        ("PIW_TEST_PLAIN".to_string(), "visible".to_string()),
        ("PIW_TEST_SECRET_TOKEN".to_string(), "canary-4d1e".to_string()),
        ("PI_WORKFLOWS_ENV_DENY".to_string(), "PIW_TEST_SECRET*".to_string()),
        ("PI_WORKFLOWS_TEST_SCRIPT".to_string(), "steps=1".to_string()),
        ("PI_WORKFLOWS_IDLE_EXIT_MS".to_string(), "600000".to_string()),
    ]);
    let seen = environment_seen_by_a_step(&env);
    assert_eq!(
        seen["PIW_TEST_PLAIN"], true,
        "a user's variable must reach the step: {seen}"
    );
    assert_eq!(seen["PATH"], true, "{seen}");
    assert_eq!(
        seen["PIW_TEST_SECRET_TOKEN"], false,
        "PI_WORKFLOWS_ENV_DENY must withhold it: {seen}"
    );
    assert_eq!(
        seen["PI_WORKFLOWS_TEST_SCRIPT"], false,
        "a test hook reached a Node runner: {seen}"
    );
    assert_eq!(
        seen["PI_WORKFLOWS_IDLE_EXIT_MS"], false,
        "a server internal reached a step: {seen}"
    );
    assert_eq!(
        seen["runnerStartedTuned"], true,
        "the Node runner starts with glibc's tunables: {seen}"
    );
    assert_eq!(
        (&seen["GLIBC_TUNABLES"], &seen["PI_WORKFLOWS_TUNABLES_ADDED"]),
        (&json!(false), &json!(false)),
        "the runner's own tunables and their mark reached a step: {seen}"
    );
    let status = env.cli(&["server", "status"]);
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(text.contains("environment: the server's, from its start"), "{text}");
    assert!(
        !text.contains("canary-4d1e") && !text.contains("visible"),
        "status shows the environment: {text}"
    );
    let json = json_of(&env.cli(&["server", "status", "--json"]));
    assert!(json["environmentAgeMs"].as_u64().is_some(), "{json}");
    assert_eq!(json["socket"], "available", "{json}");
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    assert!(!log.contains("canary-4d1e"), "the log shows the environment");
}

/// A user who sets glibc's tunables keeps them, in the runner and in its steps: the server
/// adds its own only to an environment without any.
#[test]
fn a_users_glibc_tunables_reach_the_steps_unchanged() {
    let env = Env::with_vars(vec![("GLIBC_TUNABLES".to_string(), "glibc.malloc.check=0".to_string())]);
    let seen = environment_seen_by_a_step(&env);
    assert_eq!(seen["userTunables"], "glibc.malloc.check=0", "{seen}");
    assert_eq!(seen["PI_WORKFLOWS_TUNABLES_ADDED"], false, "{seen}");
    assert_eq!(
        seen["runnerStartedTuned"], false,
        "the server replaced the user's tunables: {seen}"
    );
}

#[test]
fn free_text_after_the_workflow_is_its_task_and_status_json_shows_the_display() {
    let env = Env::new();
    let path = common::e2e::fixture("echo-task");
    let out = env.cli(&[
        "run",
        "start",
        path.to_str().expect("path"),
        "fix",
        "the",
        "flaky",
        "test",
        "--follow",
        "--json",
    ]);
    env.expect_code(&out, 0, "run start with a task");
    let run_id = common::e2e::run_id_of(&out);
    assert_eq!(env.node_output(&run_id, "echo")["task"], "fix the flaky test");
    let status = json_of(&env.cli(&["run", "status", &run_id, "--json"]));
    assert_eq!(status["display"]["status"], "completed", "{status}");
    assert_eq!(
        status["display"]["controls"],
        serde_json::json!(["restart"]),
        "{status}"
    );
    assert_eq!(status["status"], "completed", "the summary stays: {status}");
}
