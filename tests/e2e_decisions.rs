//! Protected human decisions end to end on the real binary with the real Node runner: the
//! merge-approval example waits for a person, survives a SIGKILL of the server while it waits,
//! takes the first valid answer (with its text) and refuses a second one; a decision nobody
//! answers is settled by its declared default at the deadline, even when the server was down
//! across it, with no runner waiting.

mod common;

use common::e2e::*;

fn kill9_server(env: &Env) {
    let pid = env.server_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    env.wait_until("the killed server is gone", || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
    });
}

#[test]
fn a_person_answers_the_merge_approval_after_a_server_crash_and_the_first_answer_wins() {
    let env = Env::new();
    let status = start_merge_approval(&env);
    let run_id = status["runId"].as_str().expect("runId").to_string();
    assert_eq!(status["pendingRequest"]["kind"], "decision", "{status}");
    let request = &status["request"]["decision"];
    assert_eq!(request["title"], "Merge fix-1?", "{status}");
    assert!(
        !status["request"].to_string().contains("\"subject\""),
        "the subject stays out of the shown request: {status}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM human_decisions WHERE audience = 'operator' AND deadline_at IS NOT NULL"),
        1
    );
    env.wait_runner_gone(&run_id);

    kill9_server(&env);
    // The CLI starts the server again; the decision is still pending, answered with text.
    let refused = env.cli(&["decision", "answer", &run_id, "changes"]);
    env.expect_code(&refused, 1, "a choice that needs text, without it");
    assert!(stderr_of(&refused).contains("needs text"), "{}", stderr_of(&refused));
    let answered = env.cli(&[
        "decision",
        "answer",
        &run_id,
        "changes",
        "split the migration",
        "--follow",
        "--json",
    ]);
    env.expect_code(&answered, 0, "decision answer --follow");
    let status = json_of(&answered);
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["result"], serde_json::json!({"changes": "split the migration"}));
    assert_eq!(
        env.node_output(&run_id, "approve"),
        serde_json::json!({"choice": "changes", "text": "split the migration", "provenance": "human"})
    );

    let second = env.cli(&["decision", "answer", &run_id, "approve"]);
    env.expect_code(&second, 1, "a second person's answer");
    assert!(
        stderr_of(&second).contains("already settled (human)"),
        "{}",
        stderr_of(&second)
    );
    assert_eq!(
        env.texts("SELECT provenance FROM human_decision_resolutions"),
        ["human"]
    );
    assert_eq!(
        env.texts("SELECT node_path FROM node_attempts WHERE status = 'completed' ORDER BY rowid"),
        ["approve", "revise"]
    );
}

#[test]
fn the_default_wins_at_the_deadline_even_across_a_server_outage() {
    let env = Env::new();
    let run_id = env.start_fixture("decision-timeout", None);
    env.wait_for_count(
        "the run waits at its decision",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'waiting'"),
    );
    env.wait_runner_gone(&run_id);
    kill9_server(&env);
    let deadline = env.count("SELECT deadline_at FROM human_decisions");
    // Wait out the deadline with no server at all.
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
        <= deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let late = env.cli(&["decision", "answer", &run_id, "go"]);
    env.expect_code(&late, 1, "an answer after the deadline");
    let refusal = stderr_of(&late);
    assert!(
        refusal.contains("deadline passed") || refusal.contains("already settled (timeout_policy)"),
        "{refusal}"
    );
    env.wait_for_count(
        "the run completes by its default",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"),
    );
    assert_eq!(
        env.node_output(&run_id, "ask"),
        serde_json::json!({"choice": "hold", "provenance": "timeout_policy"})
    );
    assert_eq!(
        env.node_output(&run_id, "hold"),
        serde_json::json!({"held": true, "by": "timeout_policy"})
    );
    assert_eq!(
        env.texts("SELECT provenance FROM human_decision_resolutions"),
        ["timeout_policy"]
    );
}
