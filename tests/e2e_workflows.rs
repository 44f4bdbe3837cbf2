//! End to end on the real binary with the real Node runner (`packages/pi-workflows/dist`):
//! the example workflows run to completion (with includes and a checkpoint), a SIGKILL of
//! the runner during a shell effect parks it as ambiguous and never repeats it, a SIGKILL of
//! the server resumes after a restart with every node committed once, an edited workflow
//! file parks the run before changed code runs, `run restart` begins a new run, a headless
//! agent step runs the pinned `pi` against the scripted mock model, and bad input is
//! refused before any run exists.
//!
//! Each test has its own state directory (and so its own server) under /tmp; the server is
//! stopped by a drop guard. Failures print the tails of the server and runner logs.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::e2e::*;
use serde_json::Value;

fn kill9(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
}

/// `/proc/<pid>/stat` fields after the command name: state, ppid, pgrp, ...
fn proc_stat(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split(' ').map(str::to_string).collect())
}

/// A process that still runs (a zombie left for a non-reaping init does not).
fn alive(pid: i64) -> bool {
    proc_stat(&pid.to_string()).is_some_and(|fields| fields[0] != "Z" && fields[0] != "X")
}

/// Live processes matching `keep(pid, stat fields, cmdline)`.
fn live_processes(keep: impl Fn(i64, &[String], &str) -> bool) -> Vec<i64> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i64>() else { continue };
        let Some(fields) = proc_stat(&name) else { continue };
        if fields[0] == "Z" || fields[0] == "X" {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{name}/cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        if keep(pid, &fields, &cmdline) {
            found.push(pid);
        }
    }
    found
}

fn live_group_members(pgid: i64) -> Vec<i64> {
    live_processes(|_, fields, _| fields.get(2).and_then(|pgrp| pgrp.parse::<i64>().ok()) == Some(pgid))
}

fn live_with_cmdline(needle: &str) -> Vec<i64> {
    live_processes(|_, _, cmdline| cmdline.contains(needle))
}

/// Live processes whose environment contains `entry` (e.g. `PI_CODING_AGENT_DIR=<dir>`).
fn live_with_env(entry: &str) -> Vec<i64> {
    live_processes(|pid, _, _| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|item| item == entry.as_bytes()))
    })
}

/// An idle warm runner: a direct child of the server running the Node runner that no run
/// has been assigned (no `run_workers` row names it; the caller checks after the run ended).
/// A warm runner: the plain entry, or a start from the pool's snapshot (`pi-workflows-runner`).
fn is_warm_runner_of(pid: i64, server: i64) -> bool {
    is_child_running(pid, server, b"runner-main.js") || is_child_running(pid, server, b"pi-workflows-runner")
}

/// The server's warm source resolver (`resolver-main.js --serve`).
fn is_warm_resolver_of(pid: i64, server: i64) -> bool {
    is_child_running(pid, server, b"resolver-main.js")
}

/// The warm resolver or a child of it (its esbuild service).
fn in_warm_resolver(pid: i64, server: i64) -> bool {
    let parent = supervisors::process::parent_of(pid as i32).map(|(parent, _)| i64::from(parent));
    is_warm_resolver_of(pid, server) || parent.is_some_and(|parent| is_warm_resolver_of(parent, server))
}

fn is_child_running(pid: i64, server: i64, script: &[u8]) -> bool {
    let parent = supervisors::process::parent_of(pid as i32).map(|(parent, _)| i64::from(parent));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    parent == Some(server) && cmdline.windows(script.len()).any(|window| window == script)
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

// 1. A run completes ----------------------------------------------------------------------

#[test]
fn repo_facts_completes_with_its_summary_and_five_committed_nodes() {
    let env = Env::new();
    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start repo-facts --follow");
    let status = json_of(&out);
    let run_id = status["runId"].as_str().expect("runId");
    assert_eq!(status["status"], "completed", "{status}");
    let result = &status["result"];
    assert!(result["trackedFiles"].as_i64().unwrap_or(0) > 0, "{result}");
    assert!(result["sourceLines"].as_i64().unwrap_or(0) > 0, "{result}");
    assert_eq!(
        result["largest"].as_array().map(Vec::len),
        Some(5),
        "top defaults to 5: {result}"
    );

    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        5,
        "{}",
        env.diagnostics()
    );
    assert_eq!(env.count("SELECT count(*) FROM node_attempts"), 5);
    assert_eq!(
        env.texts("SELECT node_path FROM node_attempts ORDER BY rowid"),
        ["listFiles", "byExtension", "countLines", "recentCommits", "summary"]
    );
    // The three shell steps are managed effects, each applied once.
    assert_eq!(
        env.count("SELECT count(*) FROM effects WHERE status = 'applied' AND attempt_count = 1"),
        3
    );
    assert_eq!(env.count("SELECT count(*) FROM effects"), 3);
    // The run's stored output is what --follow printed.
    let output_hash = env.text(&format!("SELECT output_hash FROM runs WHERE run_id = '{run_id}'"));
    assert_eq!(&env.blob_json(&output_hash), result);

    let runs = env.cli(&["runs", "--json"]);
    env.expect_code(&runs, 0, "runs --json");
    let runs = json_of(&runs);
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(runs[0]["runId"], run_id);
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[0]["completedSteps"], 5);
}

#[test]
fn weekly_digest_runs_its_included_workflow_under_the_mount_path() {
    let env = Env::new();
    let out = env.cli(&["run", "start", &example("weekly-digest"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start weekly-digest --follow");
    let status = json_of(&out);
    assert_eq!(status["workflowName"], "weekly-digest");
    let result = &status["result"];
    assert!(
        result["headline"]
            .as_str()
            .is_some_and(|line| line.contains(" files, ")),
        "{result}"
    );
    assert_eq!(
        result["largest"].as_array().map(Vec::len),
        Some(3),
        "the include asks for top 3: {result}"
    );

    let paths = env.texts("SELECT node_path FROM node_attempts WHERE status = 'completed' ORDER BY rowid");
    assert_eq!(
        paths,
        [
            "facts/listFiles",
            "facts/byExtension",
            "facts/countLines",
            "facts/recentCommits",
            "facts/summary",
            "digest"
        ],
        "{}",
        env.diagnostics()
    );
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE status <> 'completed'"),
        0
    );
    assert_eq!(env.count("SELECT count(*) FROM effects WHERE status = 'applied'"), 3);
}

#[test]
fn release_gate_waits_at_its_checkpoint_and_the_answer_writes_the_note_once() {
    let env = Env::new();
    let notes = short_temp_dir("piwn");
    let input = serde_json::json!({"version": "1.2.0", "check": "true", "notesDir": notes.path()}).to_string();
    let out = env.cli(&[
        "run",
        "start",
        &example("release-gate"),
        "--input-json",
        &input,
        "--follow",
        "--json",
    ]);
    env.expect_code(&out, 5, "run start release-gate --follow (waits at the checkpoint)");
    let status = json_of(&out);
    let run_id = status["runId"].as_str().expect("runId").to_string();
    assert_eq!(status["status"], "waiting", "{status}");
    assert_eq!(status["pendingRequest"]["kind"], "checkpoint", "{status}");
    assert_eq!(status["currentNode"]["nodePath"], "approve", "{status}");
    let note = notes.path().join("release-1.2.0.md");
    assert!(!note.exists(), "the note is written only after approval");
    // A waiting run keeps no runner.
    env.wait_for_count(
        "the runner of the waiting run exits",
        "SELECT count(*) FROM run_workers WHERE status = 'exited'",
    );
    assert_eq!(
        env.count("SELECT count(*) FROM run_workers WHERE status IN ('starting', 'ready')"),
        0
    );

    let answer = env.cli(&[
        "checkpoint",
        "answer",
        &run_id,
        r#"{"approved":true,"by":"t"}"#,
        "--follow",
        "--json",
    ]);
    env.expect_code(&answer, 0, "checkpoint answer --follow");
    let status = json_of(&answer);
    // The answer settled the run; its continuation went on from the checkpoint.
    let continuation = continuation_of(&env, &run_id);
    assert_eq!(
        status["runId"],
        continuation.as_str(),
        "--follow follows the continuation"
    );
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(
        env.text(&format!(
            "SELECT status || ' ' || status_detail FROM runs WHERE run_id = '{run_id}'"
        )),
        "completed continued"
    );
    assert_eq!(status["result"]["released"], true, "{status}");
    let written = std::fs::read_to_string(&note).expect("the release note exists");
    assert!(written.contains("Approved by t."), "{written}");
    assert_eq!(
        env.texts("SELECT node_path FROM node_attempts WHERE status = 'completed' ORDER BY rowid"),
        ["runChecks", "approve", "writeNotes", "done"]
    );
    assert_eq!(
        env.node_output(&run_id, "approve"),
        serde_json::json!({"approved": true, "by": "t"})
    );

    // Answering the settled checkpoint again, with another payload, is refused: nothing
    // changes and the note is not written again.
    let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'"));
    let again = env.cli(&["checkpoint", "answer", &run_id, r#"{"approved":false,"by":"u"}"#]);
    env.expect_code(&again, 1, "a second, different answer");
    assert!(stderr_of(&again).contains("not waiting"), "{}", stderr_of(&again));
    assert_eq!(std::fs::read_to_string(&note).expect("note"), written);
    assert_eq!(
        env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'")),
        revision
    );
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM interactive_submissions WHERE outcome = 'accepted'"),
        1
    );
    assert_eq!(env.count("SELECT count(*) FROM interactive_submissions"), 1);
    // The manual effect was applied exactly once.
    assert_eq!(
        env.count("SELECT count(*) FROM effects WHERE effect_type = 'release.notes' AND status = 'applied' AND attempt_count = 1"),
        1
    );
}

// 2. SIGKILL of the runner during a shell effect ------------------------------------------

struct KilledShell {
    env: Env,
    marker: PathBuf,
    run_id: String,
    /// The registered `sh` child (its own process group).
    child_pid: i64,
    _work: tempfile::TempDir,
}

/// Start `kill-during-shell`, wait until its shell step appended its line, SIGKILL the
/// runner, and wait until the run parked.
fn kill_runner_during_shell() -> KilledShell {
    let env = Env::new();
    let work = short_temp_dir("piwm");
    let marker = work.path().join("marker");
    let input = serde_json::json!({"marker": marker}).to_string();
    let run_id = env.start_fixture("kill-during-shell", Some(&input));
    env.wait_until("the shell step appended its line", || line_count(&marker) == 1);
    env.wait_for_count(
        "the shell child is registered",
        "SELECT count(*) FROM runner_processes WHERE unregistered_at IS NULL",
    );
    let child_pid = env.count("SELECT pid FROM runner_processes");
    assert!(
        !live_group_members(child_pid).is_empty(),
        "the shell step runs in its own process group"
    );
    assert_eq!(env.text("SELECT status FROM effects"), "applying");
    let runner_pid = env.count(&format!(
        "SELECT pid FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
    ));
    kill9(runner_pid as i32);
    env.wait_for_count(
        "the run parks",
        &format!("SELECT count(*) FROM run_queue WHERE run_id = '{run_id}' AND status = 'parked'"),
    );
    KilledShell {
        env,
        marker,
        run_id,
        child_pid,
        _work: work,
    }
}

#[test]
fn sigkill_of_the_runner_during_a_shell_effect_parks_it_ambiguous_and_reaps_the_child() {
    let KilledShell {
        env,
        marker,
        run_id,
        child_pid,
        _work,
    } = kill_runner_during_shell();
    assert_eq!(
        env.text(&format!(
            "SELECT status || ' ' || coalesce(status_detail, '-') FROM runs WHERE run_id = '{run_id}'"
        )),
        "running effectAmbiguous",
        "{}",
        env.diagnostics()
    );
    assert_eq!(env.text("SELECT status FROM effects"), "ambiguous");
    assert_eq!(env.text("SELECT outcome FROM effect_attempts"), "ambiguous");
    assert_eq!(env.text("SELECT status FROM run_workers"), "crashed");
    // Before the run was parked the server stopped the registered process group (sh and its
    // sleep) and recorded it: no new runner can ever overlap with the old one's children.
    assert!(
        live_group_members(child_pid).is_empty(),
        "the group is gone before the park"
    );
    assert!(live_with_cmdline(&marker.display().to_string()).is_empty());
    assert_eq!(
        env.count("SELECT count(*) FROM runner_processes WHERE unregistered_at IS NULL"),
        0
    );
    assert_eq!(line_count(&marker), 1);
    // `run status` shows the park reason; --follow would report "parked for review".
    let status = env.cli(&["run", "status", &run_id, "--json"]);
    env.expect_code(&status, 0, "run status");
    let status = json_of(&status);
    assert_eq!(status["queueStatus"], "parked", "{status}");
    assert_eq!(status["detail"], "effectAmbiguous", "{status}");
}

/// `kill_runner_during_shell`, then wait until the shell's group and the runner are gone.
fn killed_and_cleaned_up() -> KilledShell {
    let killed = kill_runner_during_shell();
    killed.env.wait_until("the shell step's process group is gone", || {
        live_group_members(killed.child_pid).is_empty()
    });
    killed.env.wait_runner_gone(&killed.run_id);
    killed
}

// An ambiguous effect blocks `resume` until an operator reviews it; a review `--failed`
// then routes the node's failure through `$result.outcome`, and the effect never runs again.
// (Regression too: an `interrupted` attempt once looked unfinished to the engine, which
// reused its ID and was refused on every resume; it now reruns as a new attempt.)
#[test]
fn an_ambiguous_effect_is_reviewed_before_resume_and_a_failed_review_routes_the_failure() {
    let KilledShell {
        env,
        marker,
        run_id,
        _work,
        ..
    } = killed_and_cleaned_up();
    let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'"));
    let view = json_of(&env.cli(&["run", "status", &run_id, "--json"]));
    assert_eq!(view["display"]["status"], "ambiguous", "{view}");
    assert_eq!(
        view["display"]["controls"],
        serde_json::json!(["cancel", "review"]),
        "{view}"
    );
    assert_eq!(view["display"]["reason"]["code"], "effectAmbiguous", "{view}");
    // Resume is refused while the effect is ambiguous, and changes nothing.
    let resume = env.cli(&["run", "resume", &run_id]);
    assert_ne!(resume.status.code(), Some(0), "resume past an ambiguous effect");
    assert!(stderr_of(&resume).contains("run review"), "{}", stderr_of(&resume));
    assert_eq!(
        env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'")),
        revision
    );
    // The listing names the effect without its request (only the command's name).
    let listing = env.cli(&["run", "review", &run_id]);
    env.expect_code(&listing, 0, "run review");
    let listed = String::from_utf8_lossy(&listing.stdout).to_string();
    assert!(listed.contains("1 ambiguous effect"), "{listed}");
    assert!(listed.contains("node append (visit 1)"), "{listed}");
    assert!(listed.contains("request: sh"), "{listed}");
    assert!(
        !listed.contains(&marker.display().to_string()),
        "the request's arguments are private: {listed}"
    );
    let review = env.cli(&[
        "run",
        "review",
        &run_id,
        "--failed",
        "--note",
        "the marker shows one start only",
    ]);
    env.expect_code(&review, 0, "run review --failed");
    assert!(String::from_utf8_lossy(&review.stdout).contains("run resume"));
    // A second review of the same effect is refused.
    let again = env.cli(&["run", "review", &run_id, "--applied"]);
    assert_ne!(again.status.code(), Some(0), "a second review");
    let view = json_of(&env.cli(&["run", "status", &run_id, "--json"]));
    assert_eq!(
        view["display"]["controls"],
        serde_json::json!(["resume", "cancel"]),
        "{view}"
    );
    assert_eq!(view["display"]["reason"]["code"], "effectReviewed", "{view}");

    let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'"));
    let resume = env.cli(&["run", "resume", &run_id]);
    env.expect_code(&resume, 0, "run resume");
    env.wait_settled_after(&run_id, revision);
    assert_eq!(line_count(&marker), 1, "a reviewed-failed effect never runs again");
    assert_eq!(env.text("SELECT status FROM effects"), "rejected");
    assert_eq!(env.count("SELECT count(*) FROM effect_attempts"), 1);
    assert_eq!(env.text("SELECT review FROM effect_attempts"), "failed");
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed",
        "{}",
        env.diagnostics()
    );
    let output_hash = env.text(&format!("SELECT output_hash FROM runs WHERE run_id = '{run_id}'"));
    assert_eq!(
        env.blob_json(&output_hash),
        serde_json::json!({"route": "failed", "code": "effectRejected"})
    );
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE node_path = 'finished'"),
        0
    );
}

// A reviewed retry applies the effect again as attempt 2 (the operator accepted a possible
// duplicate); a review `--applied` continues the node with the supplied result.
#[test]
fn a_reviewed_retry_applies_again_and_a_reviewed_success_continues_with_its_result() {
    for resolution in ["--retry", "--applied"] {
        let KilledShell {
            env,
            marker,
            run_id,
            _work,
            ..
        } = killed_and_cleaned_up();
        let mut args = vec!["run", "review", run_id.as_str(), resolution];
        let receipt = r#"{"exitCode":0,"signal":null,"stdout":"seen","stderr":"","timedOut":false}"#;
        if resolution == "--applied" {
            args.extend(["--result", receipt]);
        }
        let review = env.cli(&args);
        env.expect_code(&review, 0, "run review");
        if resolution == "--retry" {
            assert!(
                stderr_of(&review).contains("twice"),
                "the retry warns: {}",
                stderr_of(&review)
            );
        }
        let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'"));
        env.expect_code(&env.cli(&["run", "resume", &run_id]), 0, "run resume");
        env.wait_settled_after(&run_id, revision);
        assert_eq!(
            env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
            "completed",
            "{resolution}: {}",
            env.diagnostics()
        );
        assert_eq!(env.text("SELECT status FROM effects"), "applied");
        let output_hash = env.text(&format!("SELECT output_hash FROM runs WHERE run_id = '{run_id}'"));
        assert_eq!(
            env.blob_json(&output_hash),
            serde_json::json!({"route": "ok"}),
            "{resolution}"
        );
        match resolution {
            "--retry" => {
                assert_eq!(line_count(&marker), 2, "the retry applied again");
                assert_eq!(env.count("SELECT count(*) FROM effect_attempts"), 2);
            }
            _ => {
                assert_eq!(line_count(&marker), 1, "an applied review never runs it again");
                assert_eq!(env.count("SELECT count(*) FROM effect_attempts"), 1);
                assert_eq!(env.node_output(&run_id, "append")["stdout"], "seen");
            }
        }
    }
}

/// SIGKILL the runner of `run_id` once `ready` holds, and wait until the run parked.
fn kill_runner_when(env: &Env, run_id: &str, what: &str, ready: impl FnMut() -> bool) {
    env.wait_until(what, ready);
    let runner_pid = env.count(&format!(
        "SELECT pid FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
    ));
    kill9(runner_pid as i32);
    env.wait_for_count(
        "the run parks",
        &format!("SELECT count(*) FROM run_queue WHERE run_id = '{run_id}' AND status = 'parked'"),
    );
    env.wait_runner_gone(run_id);
}

/// Resume `run_id` and wait until it settles; its final status.
fn resume_to_end(env: &Env, run_id: &str) -> String {
    let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{run_id}'"));
    env.expect_code(&env.cli(&["run", "resume", run_id]), 0, "run resume");
    env.wait_settled_after(run_id, revision);
    env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'"))
}

// An idempotent effect interrupted by a crash is applied again with the same engine key,
// which the external system deduplicates: it ran twice, it took effect once.
#[test]
fn an_interrupted_idempotent_effect_is_applied_again_with_the_same_key() {
    let env = Env::new();
    let work = short_temp_dir("piwl");
    let ledger = work.path().join("ledger");
    let tries = work.path().join("ledger.tries");
    let input = serde_json::json!({"ledger": ledger}).to_string();
    let run_id = env.start_fixture("idempotent-ledger", Some(&input));
    kill_runner_when(&env, &run_id, "the first try recorded its key", || {
        line_count(&ledger) == 1
    });
    // Not ambiguous: the contract says a repeat is safe, so the run only waits for a resume.
    assert_eq!(
        env.text("SELECT status FROM effects"),
        "pending",
        "{}",
        env.diagnostics()
    );
    assert_eq!(env.text("SELECT outcome FROM effect_attempts"), "interrupted");
    assert_eq!(
        env.text(&format!("SELECT status_detail FROM runs WHERE run_id = '{run_id}'")),
        "workerCrashed"
    );
    assert_eq!(resume_to_end(&env, &run_id), "completed", "{}", env.diagnostics());
    let key = env.text("SELECT idempotency_key FROM effects");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        read(&tries),
        format!("{key}\n{key}\n"),
        "both tries saw the engine's key"
    );
    assert_eq!(read(&ledger), format!("{key}\n"), "the system recorded it once");
    assert_eq!(env.text("SELECT status FROM effects"), "applied");
    assert_eq!(
        env.texts("SELECT outcome FROM effect_attempts ORDER BY attempt_number"),
        ["interrupted", "applied"]
    );
}

// A read-back effect interrupted by a crash is observed first: a proved "applied" adopts
// the observed result without running it again; a proved "not applied" applies it again.
#[test]
fn an_interrupted_read_back_effect_applies_again_only_when_observed_not_applied() {
    for sleep_before in [false, true] {
        let env = Env::new();
        let work = short_temp_dir("piwr");
        let system = work.path().join("system");
        let input = serde_json::json!({"system": system, "sleepBefore": sleep_before}).to_string();
        let run_id = env.start_fixture("read-back", Some(&input));
        match sleep_before {
            false => kill_runner_when(&env, &run_id, "the first try wrote", || line_count(&system) == 1),
            true => {
                kill_runner_when(&env, &run_id, "the first try is applying", || {
                    env.count("SELECT count(*) FROM effects WHERE status = 'applying'") == 1
                });
                assert_eq!(line_count(&system), 0, "killed before it wrote");
            }
        }
        assert_eq!(
            env.text("SELECT status FROM effects"),
            "pending",
            "{}",
            env.diagnostics()
        );
        assert_eq!(resume_to_end(&env, &run_id), "completed", "{}", env.diagnostics());
        let key = env.text("SELECT idempotency_key FROM effects");
        assert_eq!(
            line_count(&system),
            1,
            "written exactly once (sleepBefore {sleep_before})"
        );
        let output_hash = env.text(&format!("SELECT output_hash FROM runs WHERE run_id = '{run_id}'"));
        // Observed applied → the observed result; observed not applied → the new run's result.
        assert_eq!(
            env.blob_json(&output_hash),
            serde_json::json!({"published": key, "observed": !sleep_before}),
            "sleepBefore {sleep_before}"
        );
        assert_eq!(env.count("SELECT count(*) FROM effect_attempts"), 2);
    }
}

// A declared deadline that passes with no `timed_out` route ends the run `timed_out` with
// failure class workerTimedOut — not `failed`, which is for workflow code that failed.
#[test]
fn an_unrouted_timeout_ends_the_run_timed_out_not_failed() {
    let env = Env::new();
    let run_id = env.start_fixture("times-out", None);
    env.wait_for_count(
        "the run ends",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND finished_at IS NOT NULL"),
    );
    assert_eq!(
        env.text(&format!(
            "SELECT status || ' ' || status_detail FROM runs WHERE run_id = '{run_id}'"
        )),
        "timed_out workerTimedOut",
        "{}",
        env.diagnostics()
    );
    let view = json_of(&env.cli(&["run", "status", &run_id, "--json"]));
    assert_eq!(view["display"]["status"], "timed_out", "{view}");
    assert_eq!(view["display"]["reason"]["code"], "timedOut", "{view}");
}

// 3. SIGKILL of the server mid-run --------------------------------------------------------

#[test]
fn sigkill_of_the_server_mid_run_resumes_after_restart_with_each_node_committed_once() {
    let env = Env::new();
    let run_id = env.start_fixture("slow-steps", None);
    env.wait_for_count(
        "two nodes completed",
        "SELECT count(*) >= 2 FROM node_attempts WHERE status = 'completed'",
    );
    let first_generation = env.count(&format!(
        "SELECT generation FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
    ));
    let old_runner = env.count(&format!(
        "SELECT pid FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
    ));
    kill9(env.server_pid());
    assert!(
        env.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'") < 8,
        "the server must die mid-run for this test to mean anything"
    );

    let start = env.cli(&["server", "start"]);
    env.expect_code(&start, 0, "server start after SIGKILL");
    env.wait_for_count(
        "the run completes after the restart",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND finished_at IS NOT NULL"),
    );
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed",
        "{}",
        env.diagnostics()
    );
    assert_eq!(
        env.count("SELECT count(DISTINCT node_id) FROM node_attempts WHERE status = 'completed'"),
        8
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM (SELECT node_id FROM node_attempts WHERE status = 'completed' \
             GROUP BY node_id HAVING count(*) > 1)"
        ),
        0,
        "a node was committed twice{}",
        env.diagnostics()
    );
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        8
    );
    let output_hash = env.text(&format!("SELECT output_hash FROM runs WHERE run_id = '{run_id}'"));
    assert_eq!(env.blob_json(&output_hash), serde_json::json!({"index": 8, "sum": 36}));
    let last_generation = env.count(&format!(
        "SELECT max(generation) FROM run_workers WHERE run_id = '{run_id}'"
    ));
    assert!(
        last_generation > first_generation,
        "generation {first_generation} → {last_generation}"
    );
    assert!(
        env.count("SELECT max(server_epoch) FROM run_workers") >= 2,
        "the new server ran the rest"
    );
    // The old server's runner does not outlive it.
    env.wait_until("the old runner is gone", || !alive(old_runner));
}

// 4. Editing the workflow file parks the run ----------------------------------------------

struct GatedProject {
    env: Env,
    project: tempfile::TempDir,
    run_id: String,
}

impl GatedProject {
    fn root(&self) -> PathBuf {
        self.project.path().join("gated-edit.workflow.ts")
    }

    fn part(&self) -> PathBuf {
        self.project.path().join("gated-part.workflow.ts")
    }

    fn marker(&self) -> PathBuf {
        self.project.path().join("changed-code-ran")
    }
}

/// Copy the gated fixture into a temporary project and run it to its checkpoint.
fn start_gated() -> GatedProject {
    let env = Env::new();
    let project = short_temp_dir("piwp");
    for name in ["gated-edit", "gated-part"] {
        std::fs::copy(fixture(name), project.path().join(format!("{name}.workflow.ts"))).expect("copy fixture");
    }
    let out = env.cli_in(
        project.path(),
        &["run", "start", "./gated-edit.workflow.ts", "--follow", "--json"],
    );
    env.expect_code(&out, 5, "run start gated-edit --follow (waits at the checkpoint)");
    let status = json_of(&out);
    assert_eq!(status["currentNode"]["nodePath"], "gate", "{status}");
    let run_id = status["runId"].as_str().expect("runId").to_string();
    // Answer only once the waiting run's runner is gone: an earlier answer is another test
    // (`an_answer_while_the_waiting_runner_still_exits_continues_the_run`).
    env.wait_runner_gone(&run_id);
    GatedProject { env, project, run_id }
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read fixture");
    assert!(text.contains(from), "{} has no `{from}`", path.display());
    std::fs::write(path, text.replace(from, to)).expect("edit fixture");
}

const AFTER_ORIGINAL: &str = r#"after: compute({ run: () => ({ after: "original" }) }),"#;

/// The continuation run that an answer to `run_id`'s checkpoint started.
fn continuation_of(env: &Env, run_id: &str) -> String {
    env.text(&format!(
        "SELECT run_id FROM runs WHERE parent_run_id = '{run_id}' AND origin = 'continuation'"
    ))
}

/// Answer the gated checkpoint: its continuation parks `workflowSourceChanged`. Returns the
/// continuation's run ID.
fn answer_expecting_source_changed(gated: &GatedProject) -> String {
    let env = &gated.env;
    let answer = env.cli_in(
        gated.project.path(),
        &[
            "checkpoint",
            "answer",
            &gated.run_id,
            r#"{"go":true}"#,
            "--follow",
            "--json",
        ],
    );
    env.expect_code(
        &answer,
        6,
        "checkpoint answer --follow after the edit (parked for review)",
    );
    let status = json_of(&answer);
    let why = format!("{status}{}", env.diagnostics());
    assert_eq!(status["status"], "running", "{why}");
    assert_eq!(status["queueStatus"], "parked", "{why}");
    assert_eq!(status["detail"], "workflowSourceChanged", "{why}");
    let continuation = continuation_of(env, &gated.run_id);
    assert_eq!(status["runId"], continuation.as_str(), "{why}");
    assert_eq!(
        env.text(&format!(
            "SELECT status_detail FROM runs WHERE run_id = '{continuation}'"
        )),
        "workflowSourceChanged"
    );
    // Changed code never executed: no node after the checkpoint, no marker.
    assert!(!gated.marker().exists(), "changed workflow code ran");
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE node_path = 'after'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        3,
        "only `before`, `part/partStep` and the answered `gate` ran{}",
        env.diagnostics()
    );
    continuation
}

#[test]
fn editing_the_workflow_file_while_it_waits_parks_it_before_changed_code_runs() {
    let gated = start_gated();
    let marker = gated.marker().display().to_string();
    edit(
        &gated.root(),
        AFTER_ORIGINAL,
        &format!(
            r#"after: compute({{ run: async () => {{ (await import("node:fs")).writeFileSync({marker:?}, "ran"); return {{ after: "edited" }}; }} }}),"#
        ),
    );
    answer_expecting_source_changed(&gated);
}

#[test]
fn editing_an_included_workflow_file_parks_the_run_without_loading_it() {
    let gated = start_gated();
    let marker = gated.marker().display().to_string();
    // A top-level statement: it would run as soon as the changed file were loaded.
    edit(
        &gated.part(),
        r#"import { compute, defineWorkflow } from "pi-workflows";"#,
        &format!(
            "import {{ compute, defineWorkflow }} from \"pi-workflows\";\n\
             import {{ writeFileSync }} from \"node:fs\";\nwriteFileSync({marker:?}, \"loaded\");"
        ),
    );
    answer_expecting_source_changed(&gated);
}

// Regression: parking once closed the answered (waiting) checkpoint attempt as `interrupted`
// and the accepted answer was lost; a waiting attempt now stays waiting through a park, and
// the engine also carries a settled answer over to a rerun of an interrupted attempt.
#[test]
fn restoring_the_edited_file_and_resuming_completes_the_run_with_the_answer() {
    let gated = start_gated();
    let env = &gated.env;
    let original = std::fs::read_to_string(gated.root()).expect("read");
    let marker = gated.marker().display().to_string();
    edit(
        &gated.root(),
        AFTER_ORIGINAL,
        &format!(
            r#"after: compute({{ run: async () => {{ (await import("node:fs")).writeFileSync({marker:?}, "ran"); return {{ after: "edited" }}; }} }}),"#
        ),
    );
    let continuation = answer_expecting_source_changed(&gated);
    std::fs::write(gated.root(), original).expect("restore");
    // Resume only once the parked run's runner is gone (an earlier resume races like an
    // early answer: see `an_answer_while_the_waiting_runner_still_exits_continues_the_run`).
    env.wait_runner_gone(&continuation);
    let revision = env.count(&format!("SELECT revision FROM runs WHERE run_id = '{continuation}'"));
    let resume = env.cli_in(gated.project.path(), &["run", "resume", &continuation]);
    env.expect_code(&resume, 0, "run resume after restoring the file");
    env.wait_settled_after(&continuation, revision);
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{continuation}'")),
        "completed",
        "{}",
        env.diagnostics()
    );
    assert!(!gated.marker().exists());
    assert_eq!(
        env.node_output(&gated.run_id, "gate"),
        serde_json::json!({"go": true}),
        "the answer"
    );
    assert_eq!(
        env.node_output(&continuation, "after"),
        serde_json::json!({"after": "original"})
    );
}

// Regression: an answer that requeued a run while its previous runner was still exiting once
// launched the next generation at once and hit `run_workers_one_active_per_run` (parked
// `runnerNoProgress`); admission now waits for the previous runner epoch to end.
#[test]
fn an_answer_while_the_waiting_runner_still_exits_continues_the_run() {
    let env = Env::new();
    let fixture = fixture("slow-exit-checkpoint");
    let out = env.cli(&[
        "run",
        "start",
        fixture.to_str().expect("path"),
        "--input-json",
        r#"{"exitDelayMs":1500}"#,
        "--follow",
        "--json",
    ]);
    env.expect_code(&out, 5, "run start slow-exit-checkpoint --follow (waits)");
    let run_id = run_id_of(&out);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
        )),
        1,
        "the first runner is still exiting when the answer arrives"
    );
    let answer = env.cli(&["checkpoint", "answer", &run_id, r#"{"go":1}"#, "--follow", "--json"]);
    env.expect_code(&answer, 0, "checkpoint answer --follow while the old runner exits");
    let status = json_of(&answer);
    assert_eq!(status["result"], serde_json::json!({"answer": {"go": 1}}), "{status}");
    assert_eq!(
        env.count("SELECT count(*) FROM run_workers WHERE status = 'crashed'"),
        0,
        "{}",
        env.diagnostics()
    );
}

// 5. Restart --------------------------------------------------------------------------------

#[test]
fn restart_creates_a_new_run_that_executes_every_node_again() {
    let env = Env::new();
    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start repo-facts --follow");
    let old = run_id_of(&out);
    let old_row = |env: &Env| {
        env.text(&format!(
            "SELECT status || ' ' || revision || ' ' || output_hash || ' ' || finished_at FROM runs WHERE run_id = '{old}'"
        ))
    };
    let before = old_row(&env);

    let restart = env.cli(&["run", "restart", &old, "--follow", "--json"]);
    env.expect_code(&restart, 0, "run restart --follow");
    let status = json_of(&restart);
    let new = status["runId"].as_str().expect("runId").to_string();
    assert_ne!(new, old);
    assert_eq!(status["status"], "completed", "{status}");
    assert!(status["result"]["trackedFiles"].as_i64().unwrap_or(0) > 0, "{status}");

    assert_eq!(
        env.text(&format!(
            "SELECT origin || ' ' || parent_run_id || ' ' || status FROM runs WHERE run_id = '{new}'"
        )),
        format!("restart {old} completed")
    );
    // Every node ran again in the new run, with its own attempts and effects.
    assert_eq!(
        env.texts(&format!(
            "SELECT node_path FROM node_attempts WHERE run_id = '{new}' AND status = 'completed' ORDER BY rowid"
        )),
        ["listFiles", "byExtension", "countLines", "recentCommits", "summary"],
        "{}",
        env.diagnostics()
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM effects WHERE run_id = '{new}' AND status = 'applied'"
        )),
        3
    );
    // Its effects were applied again under its own keys, not adopted from the old run.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM effects n JOIN effects o USING (idempotency_key) \
             WHERE n.run_id = '{new}' AND o.run_id = '{old}'"
        )),
        0
    );
    assert!(env.count(&format!("SELECT count(*) FROM run_workers WHERE run_id = '{new}'")) >= 1);
    // The old run is unchanged.
    assert_eq!(old_row(&env), before);
    assert_eq!(
        env.count(&format!("SELECT count(*) FROM node_attempts WHERE run_id = '{old}'")),
        5
    );
    assert_eq!(
        env.count(&format!("SELECT count(*) FROM effects WHERE run_id = '{old}'")),
        3
    );
    let runs = json_of(&env.cli(&["runs", "--json"]));
    let ids: Vec<&str> = runs
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|run| run["runId"].as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{runs}");
    assert!(ids.contains(&old.as_str()) && ids.contains(&new.as_str()), "{runs}");
}

// 6. A headless agent step: the real pinned pi against the mock model -----------------------

/// `scripts/mock-model.mjs` on 127.0.0.1, stopped on drop.
struct MockModel {
    child: std::process::Child,
    port: u16,
    requests: PathBuf,
}

impl MockModel {
    fn start(script: &str, dir: &Path) -> Self {
        let requests = dir.join("requests.jsonl");
        let mut child = Command::new("node")
            .arg(repo_root().join("packages/pi-workflows/scripts/mock-model.mjs"))
            .args(["--script", script])
            .env("MOCK_REQUEST_LOG", &requests)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the mock model (node)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("mock model port line");
        let port: Value = serde_json::from_str(line.trim()).unwrap_or_else(|err| panic!("mock said {line:?}: {err}"));
        let port = port["port"].as_u64().expect("port") as u16;
        Self { child, port, requests }
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.requests)
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).expect("request line"))
            .collect()
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pinned Pi 1.6 (installed on first use, with the Node 22 it needs, by
/// `scripts/install-pi.sh`): the launcher `.tools/bin/pi` it prints runs Pi with that Node,
/// while the server and its runners keep the `node` on `PATH` (Node 20 is enough for them).
fn pi_binary() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("packages/pi-workflows/scripts/install-pi.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run install-pi.sh");
    assert!(out.status.success(), "install-pi.sh failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
    assert!(bin.is_file(), "install-pi.sh printed {stdout:?}");
    bin
}

/// A `PI_CODING_AGENT_DIR` whose models.json/settings.json point Pi at the mock model.
fn pi_agent_dir(root: &Path, port: u16) -> PathBuf {
    let agent = root.join("agent");
    std::fs::create_dir_all(&agent).expect("agent dir");
    std::fs::create_dir_all(root.join("home")).expect("home dir");
    let models = serde_json::json!({
        "providers": {
            "mock": {
                "baseUrl": format!("http://127.0.0.1:{port}/v1"),
                "api": "openai-completions",
                "apiKey": "sk-mock-not-a-real-key",
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false, "supportsStore": false},
                "models": [{"id": "mock-model", "name": "Mock Model", "reasoning": false, "input": ["text"],
                            "contextWindow": 128000, "maxTokens": 4096}]
            }
        }
    });
    let settings = serde_json::json!({
        "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true, "enableInstallTelemetry": false
    });
    std::fs::write(agent.join("models.json"), models.to_string()).expect("models.json");
    std::fs::write(agent.join("settings.json"), settings.to_string()).expect("settings.json");
    agent
}

#[test]
fn a_headless_agent_step_runs_the_pinned_pi_against_the_mock_model() {
    let pi = pi_binary();
    headless_agent_step_against_the_mock_model(&pi.display().to_string());
}

/// With `PI_WORKFLOWS_PI_BIN` empty the runner looks Pi up itself: the project-local
/// `.tools/pi` JavaScript entry, run with `.tools/node22` although the runner is on the
/// server's `node`.
#[test]
fn a_headless_agent_step_finds_the_project_local_pi_and_its_node() {
    pi_binary();
    headless_agent_step_against_the_mock_model("");
}

fn headless_agent_step_against_the_mock_model(pi_bin: &str) {
    let root = short_temp_dir("piwi");
    let mock = MockModel::start("echo", root.path());
    let agent = pi_agent_dir(root.path(), mock.port);
    let env = Env::with_vars(vec![
        ("PI_CODING_AGENT_DIR".into(), agent.display().to_string()),
        ("PI_WORKFLOWS_PI_BIN".into(), pi_bin.into()),
        ("HOME".into(), root.path().join("home").display().to_string()),
        ("PI_OFFLINE".into(), "1".into()),
    ]);
    let fixture = fixture("agent-echo");
    let out = env.cli(&["run", "start", fixture.to_str().expect("path"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start agent-echo --follow");
    let status = json_of(&out);
    let run_id = status["runId"].as_str().expect("runId").to_string();
    assert_eq!(
        status["result"],
        serde_json::json!({"doubled": 84, "word": "e2e-pineapple"}),
        "{status}"
    );
    // The agent node's output is what the mock submitted through the bridge's `workflow` tool.
    assert_eq!(
        env.node_output(&run_id, "ask"),
        serde_json::json!({"answer": 42, "word": "e2e-pineapple"})
    );
    // The mock received the prompt (with the expected-output contract).
    let requests = mock.requests();
    let prompted = requests.iter().any(|request| {
        request["body"]["messages"].as_array().is_some_and(|messages| {
            messages.iter().any(|message| {
                message["role"] == "user"
                    && message["content"].to_string().contains("e2e-pineapple")
                    && message["content"].to_string().contains("Expected output")
            })
        })
    });
    assert!(prompted, "no request carried the prompt: {requests:#?}");
    // The pi child was registered, then unregistered, and nothing of it survives.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM runner_processes p JOIN run_workers w USING (runner_epoch) WHERE w.run_id = '{run_id}'"
        )),
        1,
        "{}",
        env.diagnostics()
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runner_processes WHERE unregistered_at IS NULL"),
        0
    );
    let pi_pid = env.count("SELECT pid FROM runner_processes");
    // Pi renames its process (`pi`), so look for anything with this test's agent directory
    // in its environment: after the run only the server may have it, and the server's idle
    // warm runner and resolver (started ahead for the next run, holding no run).
    let server = i64::from(env.server_pid());
    env.wait_until("no pi process survives", || {
        !alive(pi_pid)
            && live_group_members(pi_pid).is_empty()
            && live_with_env(&format!("PI_CODING_AGENT_DIR={}", agent.display()))
                .into_iter()
                .all(|pid| pid == server || is_warm_runner_of(pid, server) || in_warm_resolver(pid, server))
    });
}

// 7. Bad input ------------------------------------------------------------------------------

fn assert_no_run(env: &Env) {
    if env.dir().join("state.sqlite").exists() {
        assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    }
}

#[test]
fn bad_input_is_refused_before_any_run_exists() {
    let env = Env::new();
    let project = short_temp_dir("piwp");

    let missing = env.cli_in(project.path(), &["run", "start", "no-such-flow"]);
    env.expect_code(&missing, 1, "run start of an unknown workflow name");
    let message = stderr_of(&missing);
    assert!(message.contains("\"no-such-flow\""), "{message}");
    let project_dir = project.path().canonicalize().expect("canonical").join(".pi/workflows");
    assert!(message.contains(&project_dir.display().to_string()), "{message}");
    let global_dir = env.agent_dir.path().join("workflows");
    assert!(message.contains(&global_dir.display().to_string()), "{message}");
    assert_no_run(&env);

    let bad_graph = fixture("bad-edge");
    let invalid = env.cli(&["run", "start", bad_graph.to_str().expect("path")]);
    env.expect_code(&invalid, 1, "run start of an invalid graph");
    let message = stderr_of(&invalid);
    assert!(message.contains("nowhereNode"), "{message}");
    assert!(message.contains("invalidDefinition"), "{message}");
    assert_no_run(&env);

    let rejected = env.cli(&["run", "start", &example("repo-facts"), "--input-json", r#"{"top":0}"#]);
    env.expect_code(&rejected, 1, "run start with input the normalizer rejects");
    let message = stderr_of(&rejected);
    assert!(
        message.contains("input.top must be an integer from 1 to 50"),
        "{message}"
    );
    assert_no_run(&env);

    let not_json = env.cli(&["run", "start", &example("repo-facts"), "--input-json", "{"]);
    env.expect_code(&not_json, 1, "run start with --input-json that is not JSON");
    assert!(stderr_of(&not_json).contains("not JSON"), "{}", stderr_of(&not_json));
    assert_no_run(&env);

    // The project's own `.pi/workflows/<name>.workflow.ts` is found by name.
    let workflows = project.path().join(".pi/workflows");
    std::fs::create_dir_all(&workflows).expect("mkdir");
    std::fs::copy(fixture("bad-edge"), workflows.join("bad-edge.workflow.ts")).expect("copy");
    let by_name = env.cli_in(project.path(), &["run", "start", "bad-edge"]);
    env.expect_code(&by_name, 1, "run start bad-edge by name");
    assert!(stderr_of(&by_name).contains("nowhereNode"), "{}", stderr_of(&by_name));
    assert_no_run(&env);
}

// Warm runners ------------------------------------------------------------------------------

/// The warm runners the pool holds, as the server's tree shows them (`None` while it does not
/// answer). Unlike a look at the processes, this counts neither a run's own runner that is
/// still exiting nor a snapshot's check, and a refill shows all it started at once.
fn pool_runners(env: &Env) -> Option<Vec<i64>> {
    let tree = common::tree::poll_tree(env)?;
    let pool = common::tree::at(&tree, &["runners", "pool"])?;
    Some(
        common::tree::processes(pool)
            .into_iter()
            .map(|(pid, _)| i64::from(pid))
            .collect(),
    )
}

/// A warm runner (started ahead of the next run) holds no run and never outlives its
/// server: a graceful stop stops it, and after a SIGKILL of the server it sees its channel
/// close and exits on its own. The pool follows demand: a run's end refills it beyond the idle
/// number while runs arrive, and it shrinks back to one once they stop.
#[test]
fn warm_runners_hold_no_run_and_never_outlive_the_server() {
    // A demand window longer than any run here, so the run's end still sees runs arriving.
    let env = Env::with_vars(vec![("PI_WORKFLOWS_WARM_DEMAND_MS".into(), "8000".into())]);
    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start repo-facts --follow");
    let server = i64::from(env.server_pid());
    let pool_size = |size: usize| pool_runners(&env).is_some_and(|pool| pool.len() == size);
    env.wait_until(
        "the run's end starts two warm runners for the runs still arriving",
        || pool_size(2),
    );
    env.wait_until(
        "the pool shrinks back to one warm runner once runs stop arriving",
        || pool_size(1),
    );
    std::thread::sleep(Duration::from_millis(500));
    let warm = pool_runners(&env).expect("the server's tree");
    assert_eq!(warm.len(), 1, "one warm runner while idle: {warm:?}");
    assert!(
        warm.iter().all(|pid| is_warm_runner_of(*pid, server)),
        "the pool's runner is a live child of the server: {warm:?}"
    );
    let stop = env.cli(&["server", "stop"]);
    env.expect_code(&stop, 0, "server stop");
    env.wait_until("the graceful stop stops the warm runner", || {
        warm.iter().all(|pid| !alive(*pid))
    });

    // Started again by the next run; now SIGKILL the server itself.
    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow", "--json"]);
    env.expect_code(&out, 0, "second run start");
    let server = i64::from(env.server_pid());
    env.wait_until("a warm runner waits again", || {
        pool_runners(&env).is_some_and(|pool| !pool.is_empty())
    });
    let warm = pool_runners(&env).expect("the server's tree");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the server");
    env.wait_until("the orphaned warm runner exits on its own", || {
        warm.iter().all(|pid| !alive(*pid))
    });
    assert_eq!(env.count("SELECT count(*) FROM runs WHERE status = 'completed'"), 2);
}
