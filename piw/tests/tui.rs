//! The interactive screen, driven in tmux against a real server: browsing, pinning, pausing
//! and resuming a run, riding out a server restart, and a run's attempt outputs and errors
//! in the attempt tab.

mod common;

use std::process::Command;

use common::{Env, Tmux, fixture};

#[test]
fn the_browser_lists_runs_newest_first_and_shows_the_selected_run() {
    let env = Env::new();
    let older = env.start(&fixture("echo-task"), None);
    env.once_until(&older, "the first run completes", |frame| {
        frame.contains("· COMPLETED ·")
    });
    let newer = env.start(&fixture("sleeps"), None);
    let tmux = Tmux::start("browse", &env.piw());
    let screen = tmux.wait_for("both runs are listed", |s| {
        s.contains("runs (2)") && s.contains("· sleeps ·")
    });
    let sleeps_row = screen.find("sleeps ").expect("a sleeps row");
    let echo_row = screen.find("echo-task ").expect("an echo-task row");
    assert!(sleeps_row < echo_row, "newest first:\n{screen}");
    assert!(tmux.header().contains(&newer), "the newest run is selected:\n{screen}");
    tmux.keys(&["j"]);
    tmux.wait_for("the older run is shown", |s| {
        s.lines().next().unwrap_or_default().contains(&older)
    });
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the run's graph", |s| s.contains("Echo the task"));
    assert!(screen.contains("✓ completed"), "{screen}");
    tmux.keys(&["q"]);
}

#[test]
fn a_pinned_run_is_paused_and_resumed_from_the_tui() {
    let env = Env::new();
    // A compute step awaiting a timer: pausing interrupts it, resuming runs it again.
    let run = env.start(&fixture("long-wait"), None);
    let tmux = Tmux::start("pin", env.piw().arg(&run));
    let header = |s: &str| s.lines().next().unwrap_or_default().to_string();
    let screen = tmux.wait_for("the pinned run runs", |s| header(s).contains("· RUNNING"));
    assert!(!screen.contains("runs ("), "a pinned run hides the browser:\n{screen}");
    tmux.keys(&["p"]);
    tmux.wait_for("the pause is confirmed first", |s| {
        s.contains(&format!("Pause run {run}?"))
    });
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the run is paused", |s| header(s).contains("· PAUSED"));
    assert!(screen.contains("[r] resume"), "{screen}");
    tmux.keys(&["r"]);
    tmux.wait_for("the resume is confirmed first", |s| {
        s.contains(&format!("Resume run {run}?"))
    });
    tmux.keys(&["y"]);
    tmux.wait_for("the run runs again", |s| {
        header(s).contains("· RUNNING") && s.contains("[p] pause")
    });
    let _ = env.cli(&["run", "cancel", &run]);
}

#[test]
fn killing_the_server_shows_reconnecting_and_the_view_recovers_after_a_restart() {
    let env = Env::new();
    let run = env.start(&fixture("echo-task"), None);
    env.once_until(&run, "the run completes", |frame| frame.contains("· COMPLETED ·"));
    let tmux = Tmux::start("restart", env.piw().arg(&run));
    tmux.wait_for("the view is live", |s| {
        s.contains("● live") && s.contains("[R] restart")
    });
    let killed = Command::new("kill")
        .args(["-9", &env.server_pid().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let screen = tmux.wait_for("the view is marked stale", |s| s.contains("reconnecting"));
    assert!(screen.contains("controls: none while not connected"), "{screen}");
    common::expect_success(&env.cli(&["server", "start"]), "server start");
    let screen = tmux.wait_for("the view recovers", |s| {
        s.contains("● live") && !s.contains("reconnecting")
    });
    assert!(
        screen.contains("· COMPLETED ·") && screen.contains("[R] restart"),
        "{screen}"
    );
}

#[test]
fn piw_starts_the_local_server_with_pi_workflows_server_start() {
    let env = Env::new();
    assert!(!env.dir().join("server/server.lock").exists());
    let tmux = Tmux::start("start", &env.piw());
    tmux.wait_for("an empty, live run list", |s| {
        s.contains("no runs yet") && s.contains("● live")
    });
    common::expect_success(&env.cli(&["server", "status"]), "server status");
}

#[test]
fn a_checkpoint_is_answered_from_the_tui_after_confirmation() {
    let env = Env::new();
    let input = format!(
        r#"{{"version":"1.2.0","check":"true","notesDir":"{}"}}"#,
        env.scratch.path().display()
    );
    let run = env.start(&common::example("release-gate"), Some(&input));
    let tmux = Tmux::start("answer", env.piw().arg(&run));
    tmux.wait_for("the run waits at its checkpoint", |s| {
        s.contains("◆ WAITING checkpoint") && s.contains("[a] answer")
    });
    tmux.keys(&["a"]);
    tmux.wait_for("the answer input", |s| s.contains("answer the checkpoint"));
    tmux.keys(&["-l", r#"{"approved": true, "by": "piw"}"#]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer is confirmed first", |s| {
        s.contains(r#"Answer the checkpoint with {"approved":true,"by":"piw"}?"#)
    });
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the run completes", |s| {
        s.lines().next().unwrap_or_default().contains("· COMPLETED")
    });
    assert!(screen.contains("checkpoint.answer: accepted"), "{screen}");
    // The answer settled the pinned run; the rest of the workflow runs in its continuation,
    // which the header names.
    let screen = tmux.wait_for("the header names the continuation", |s| s.contains("continues as run "));
    assert!(screen.contains("(piw run-"), "{screen}");
    // The step creates the note, then writes it: wait for its content, not for the file (a
    // read between the two found it empty under load).
    let note = env.scratch.path().join("release-1.2.0.md");
    let read_note = || std::fs::read_to_string(&note).unwrap_or_default();
    common::wait_until(
        "the release note says who approved",
        || read_note().contains("Approved by piw"),
        || format!("note: {:?}\nscreen:\n{screen}", read_note()),
    );
}

#[test]
fn a_protected_decision_is_answered_from_the_tui_with_its_text() {
    let env = Env::new();
    let run = env.start(
        &common::example("merge-approval"),
        Some(r#"{"branch":"fix-1","commit":"abc123def"}"#),
    );
    let tmux = Tmux::start("decide", env.piw().arg(&run));
    tmux.wait_for("the run waits for a person", |s| s.contains("[a] human-answer"));
    tmux.keys(&["a"]);
    tmux.wait_for("the answer input", |s| s.contains("answer the decision"));
    tmux.keys(&["-l", "changes split the migration"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer is confirmed first", |s| {
        s.contains(r#"Answer the decision with {"choice":"changes","text":"split the migration"}?"#)
    });
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the run completes", |s| {
        s.lines().next().unwrap_or_default().contains("· COMPLETED")
    });
    assert!(screen.contains("decision.answer: accepted"), "{screen}");
}

#[test]
fn a_relay_that_never_answers_is_one_clear_unavailable_error() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("ws://127.0.0.1:{port}/ws");
    let script = format!(
        "{} --connect {url}; echo \"piw exited $?\"; sleep 60",
        common::piw_bin().display()
    );
    let mut shell = Command::new("sh");
    shell.args(["-c", &script]).env("XDG_CONFIG_HOME", env.config.path());
    let tmux = Tmux::start("unavailable", &shell);
    let screen = tmux.wait_for("piw exits", |s| s.contains("piw exited"));
    assert!(screen.contains("piw exited 3"), "{screen}");
    assert!(
        screen.contains("no pi-workflows server answers") && screen.contains(&url),
        "{screen}"
    );
}

#[test]
fn older_attempts_are_paged_in_and_the_timeline_replays_from_the_first() {
    let env = Env::new();
    let run = env.start(&fixture("loops"), None);
    env.once_until(&run, "the run completes", |frame| frame.contains("· COMPLETED ·"));
    let tmux = Tmux::start("paging", env.piw().arg(&run));
    // The view inlines the newest 50 of the 61 attempts.
    tmux.wait_for("the view's window", |s| s.contains("50 of 61 attempts loaded"));
    tmux.keys(&["Tab"]);
    for _ in 0..6 {
        tmux.keys(&["PageUp"]);
    }
    tmux.wait_for("the older attempts are read", |s| {
        s.contains("61 of 61 attempts loaded")
    });
    tmux.keys(&["Home"]);
    let screen = tmux.wait_for("the timeline at the first attempt", |s| {
        s.contains("REPLAY  attempt 1/61")
    });
    assert!(
        screen.contains("graph · at the timeline cursor") && screen.contains("Done"),
        "{screen}"
    );
    tmux.keys(&["End"]);
    tmux.wait_for("the timeline is live again", |s| s.contains("LIVE  attempt 61/61"));
}

#[test]
fn the_attempt_tab_shows_a_failed_attempts_error_and_a_completed_attempts_output() {
    let env = Env::new();
    let run = env.start(&fixture("fails"), None);
    env.once_until(&run, "the run fails", |frame| frame.contains("· FAILED"));
    let tmux = Tmux::start("values", env.piw().arg(&run));
    tmux.wait_for("the view is live", |s| s.contains("● live"));
    // The attempt tab shows the newest attempt: the failed one, with its stored error.
    tmux.keys(&["2"]);
    let screen = tmux.wait_for("the failed attempt's error", |s| {
        s.contains(r#""message": "the fixture fails on purpose""#)
    });
    assert!(screen.contains("explode") && screen.contains("error "), "{screen}");
    assert!(screen.contains(r#""code": "nodeFailed""#), "{screen}");
    // The attempt before it completed: its output is read when it is selected.
    tmux.keys(&["Up"]);
    let screen = tmux.wait_for("the completed attempt's output", |s| s.contains(r#""ready": true"#));
    assert!(screen.contains("prepare") && screen.contains("output "), "{screen}");
    tmux.keys(&["q"]);
}

#[test]
fn a_running_run_is_cancelled_from_the_tui_after_confirmation() {
    let env = Env::new();
    let run = env.start(&fixture("sleeps"), None);
    let tmux = Tmux::start("cancel", env.piw().arg(&run));
    let header = |s: &str| s.lines().next().unwrap_or_default().to_string();
    tmux.wait_for("the pinned run runs", |s| {
        header(s).contains("· RUNNING") && s.contains("[c] cancel")
    });
    tmux.keys(&["c"]);
    tmux.wait_for("the cancel is confirmed first", |s| {
        s.contains(&format!("Cancel run {run}?"))
    });
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the run shows cancelled", |s| header(s).contains("· CANCELLED"));
    assert!(screen.contains("run.cancel: accepted"), "{screen}");
    assert!(
        !screen.contains("[c] cancel"),
        "an ended run offers no cancel:\n{screen}"
    );
}

#[test]
fn a_finished_run_is_restarted_from_the_tui_and_the_new_run_is_listed() {
    let env = Env::new();
    let run = env.start(&fixture("echo-task"), None);
    env.once_until(&run, "the run completes", |frame| frame.contains("· COMPLETED ·"));
    let tmux = Tmux::start("restart-run", &env.piw());
    tmux.wait_for("the finished run offers a restart", |s| {
        s.contains("runs (1)") && s.contains("[R] restart")
    });
    tmux.keys(&["R"]);
    tmux.wait_for("the restart is confirmed first", |s| {
        s.contains(&format!("Restart run {run}?"))
    });
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the restart is accepted", |s| {
        s.contains("run.restart: accepted (new run ")
    });
    let notice = screen
        .lines()
        .find(|line| line.contains("(new run "))
        .expect("the notice");
    let new_run = notice
        .split("(new run ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the new run's ID")
        .to_string();
    assert_ne!(new_run, run);
    tmux.wait_for("the browser lists the new run", |s| s.contains("runs (2)"));
    env.once_until(&new_run, "the new run completes", |frame| {
        frame.contains(&format!("run {new_run} · echo-task · COMPLETED"))
    });
}

/// Send `count` step updates (`log`/`line-N`, data N) to the run's pending agent request.
fn send_updates(env: &Env, run: &str, count: usize) {
    use pi_workflows::protocol::{JsonObject, Operation};
    use piw::connection::client::{Client, accepted, new_id};
    use piw::connection::transport::Endpoint;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let endpoint = Endpoint::Unix(env.socket());
        let (client, _events) = Client::connect(&endpoint, new_id("piw-test")).await.expect("connect");
        for index in 1..=count {
            let update = serde_json::json!({"type": "log", "key": format!("line-{index}"), "data": index});
            let mut payload = JsonObject::new();
            payload.insert("update".into(), update);
            let key = new_id("piw-update");
            let response = client
                .request(
                    Operation::InteractionUpdate,
                    Some(run),
                    payload,
                    Some(&key),
                    common::WAIT,
                )
                .await
                .expect("interaction.update");
            accepted(&response).expect("the update is accepted");
        }
    });
}

#[test]
fn older_step_updates_are_paged_in_on_the_updates_tab() {
    // An agent step that waits for a submission, so it can report updates.
    let env = Env::with_test_runner("steps=3,checkpoint-at=2,request-kind=agent");
    let run = env.start(&fixture("echo-task"), None);
    env.once_until(&run, "the agent step waits", |frame| frame.contains("· WAITING"));
    // More than the view's newest 20: the first ten only come with an older page.
    send_updates(&env, &run, 30);
    let tmux = Tmux::start("updates", env.piw().arg(&run));
    tmux.wait_for("the view is live", |s| s.contains("● live"));
    tmux.keys(&["4"]);
    let screen = tmux.wait_for("the view's updates", |s| {
        s.contains("20 updates, newest first") && s.contains("#30 log/line-30: 30")
    });
    assert!(!screen.contains("log/line-10:"), "{screen}");
    for _ in 0..3 {
        tmux.keys(&["PageDown"]);
    }
    tmux.wait_for("the oldest update is read and shown", |s| {
        s.contains("#1 log/line-1: 1")
    });
    for _ in 0..3 {
        tmux.keys(&["PageUp"]);
    }
    let screen = tmux.wait_for("every update counted", |s| s.contains("30 updates, newest first"));
    assert!(!screen.contains("PgDn reads older updates"), "{screen}");
    let _ = env.cli(&["run", "cancel", &run]);
}

#[test]
fn older_settings_changes_are_paged_in_on_the_settings_tab() {
    let env = Env::new();
    // The gate file never appears: the run stays running while its settings change.
    let gate = env.scratch.path().join("gate");
    let input = format!(r#"{{"gate":"{}"}}"#, gate.display());
    let run = env.start(&fixture("tuned"), Some(&input));
    // More changes than the settings page's first 50: change 0 comes only with an older page.
    for number in 1..=55 {
        let out = env.cli(&["run", "settings", &run, "--set", &format!("/greeting=v{number}")]);
        common::expect_success(&out, "run settings --set");
    }
    let tmux = Tmux::start("settings", env.piw().arg(&run));
    tmux.wait_for("the view is live", |s| s.contains("● live"));
    tmux.keys(&["3"]);
    let screen = tmux.wait_for("the newest changes", |s| {
        s.contains("change 55") && s.contains("#55 by")
    });
    assert!(!screen.contains("#0 by"), "{screen}");
    for _ in 0..7 {
        tmux.keys(&["PageDown"]);
    }
    let screen = tmux.wait_for("the first change is read and shown", |s| s.contains("#0 by"));
    assert!(!screen.contains("PgDn reads older changes"), "{screen}");
    let _ = env.cli(&["run", "cancel", &run]);
}
