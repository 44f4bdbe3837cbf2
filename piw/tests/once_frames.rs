//! `piw <runId> --once` against a real server and the Node runner: the frames of a running,
//! a waiting (checkpoint), a failed and a completed run, and the exit codes when no frame
//! can be drawn.

mod common;

use common::{Env, example, fixture};

#[test]
fn a_running_run_highlights_its_current_node() {
    let env = Env::new();
    let run = env.start(&fixture("sleeps"), None);
    let frame = env.once_until(&run, "the run runs its node", |frame| frame.contains("▶ RUNNING"));
    assert!(frame.contains(&format!("run {run} · sleeps · RUNNING")), "{frame}");
    assert!(
        frame.contains("Take a long nap") && frame.contains("Wake up"),
        "{frame}"
    );
    assert!(frame.contains("[p] pause") && frame.contains("[c] cancel"), "{frame}");
    assert!(frame.contains("● live"), "{frame}");
    assert_eq!(frame.lines().count(), 40, "{frame}");
    let _ = env.cli(&["run", "cancel", &run]);
}

#[test]
fn a_waiting_checkpoint_shows_the_waiting_node_and_the_answer_control() {
    let env = Env::new();
    let input = format!(
        r#"{{"version":"1.2.0","check":"true","notesDir":"{}"}}"#,
        env.scratch.path().display()
    );
    let run = env.start(&example("release-gate"), Some(&input));
    let frame = env.once_until(&run, "the run waits", |frame| frame.contains("· WAITING"));
    assert!(frame.contains("◆ WAITING checkpoint"), "{frame}");
    assert!(
        frame.contains("Approve the release") && frame.contains("true→"),
        "{frame}"
    );
    assert!(frame.contains("[a] answer"), "{frame}");
    // The checks ran and completed; the nodes after the gate have not.
    assert!(frame.contains("✓ completed") && frame.contains("· not run"), "{frame}");
}

#[test]
fn a_failed_run_shows_its_reason_and_the_failed_node() {
    let env = Env::new();
    let run = env.start(&fixture("fails"), None);
    let frame = env.once_until(&run, "the run fails", |frame| frame.contains("· FAILED"));
    assert!(frame.contains("fails on purpose"), "{frame}");
    assert!(frame.contains("Explode") && frame.contains("✗ failed"), "{frame}");
    assert!(frame.contains("[R] restart"), "{frame}");
}

#[test]
fn a_completed_run_shows_every_step_completed() {
    let env = Env::new();
    let run = env.start(&fixture("slow-steps"), None);
    let frame = env.once_until(&run, "the run completes", |frame| frame.contains("· COMPLETED ·"));
    assert!(frame.contains("8 of 8 attempts loaded"), "{frame}");
    // Every step in the inspector, and the graph from its start.
    assert_eq!(frame.matches("│✓ s").count(), 8, "{frame}");
    assert!(frame.contains("Step 1") && frame.contains("✓ completed"), "{frame}");
    assert!(!frame.contains("not run"), "{frame}");
    assert!(frame.contains("LIVE  attempt 8/8"), "{frame}");
}

#[test]
fn an_unknown_run_or_a_missing_server_exits_with_its_own_code() {
    let env = Env::new();
    let absent = env.once("run-nobody-started");
    assert_eq!(absent.status.code(), Some(3), "no server: {absent:?}");
    assert!(String::from_utf8_lossy(&absent.stderr).contains("no pi-workflows server"));
    env.start(&fixture("echo-task"), None);
    let unknown = env.once("run-nobody-started");
    assert_eq!(unknown.status.code(), Some(5), "{unknown:?}");
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no run run-nobody-started"));
}

#[test]
fn a_peer_that_never_answers_is_a_timeout() {
    let env = Env::new();
    // Accepts TCP but never completes the WebSocket handshake.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let url = format!("ws://{}/ws", listener.local_addr().expect("addr"));
    let out = env
        .piw()
        .args(["--connect", &url, "run-x", "--once", "--timeout-ms", "300"])
        .output()
        .expect("piw");
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("within 300 ms"));
    drop(listener);
}

#[test]
fn a_malformed_config_file_is_one_clear_error() {
    let env = Env::new();
    let dir = env.config.path().join("piw");
    std::fs::create_dir_all(&dir).expect("config dir");
    std::fs::write(dir.join("config.toml"), "theme = [\n").expect("config");
    let out = env.once("run-x");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.toml is not valid"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one error: {stderr}");
    std::fs::write(dir.join("config.toml"), "theme = \"latte\"\n").expect("config");
    assert_eq!(
        env.once("run-x").status.code(),
        Some(3),
        "a valid config goes on to connect"
    );
}

#[test]
fn themes_are_listed_and_an_unknown_one_is_refused() {
    let env = Env::new();
    let listed = env.piw().arg("--list-themes").output().expect("piw");
    let names = String::from_utf8_lossy(&listed.stdout).to_string();
    assert_eq!(names.lines().collect::<Vec<_>>(), ["default", "mono", "mocha", "latte"]);
    let unknown = env
        .piw()
        .args(["--theme", "neon", "run-x", "--once"])
        .output()
        .expect("piw");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown theme `neon`"));
}
