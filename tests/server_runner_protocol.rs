//! The runner protocol beyond the happy path, on the real binary with the scripted runner:
//! the explicit first command with its narrow run state (inline, or by digest-bound
//! reference read in 512 KiB parts), checkpoints and validated submissions, progress and
//! notifications, and the process registry (direct children only; reaped when the runner
//! dies first).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{pi_workflows, query_db, wait_for_db};
use pi_workflows::store::continuations::{self, CheckpointAnswer, Continued};
use pi_workflows::store::interactions::{self, Submission, Submitted};
use pi_workflows::store::{Store, StoreError, StoreResult, SystemClock, blobs};

struct Dir(tempfile::TempDir);

impl Dir {
    fn new(runs: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("piwp").tempdir_in("/tmp").expect("dir");
        common::queue_runs_in(dir.path(), runs.iter().map(|run| run.to_string()));
        Self(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn start(&self, script: &str) {
        let out = pi_workflows(self.path(), &["server", "start"], script);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    fn stop(&self) {
        let out = pi_workflows(self.path(), &["server", "stop"], "");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    fn count(&self, sql: &str) -> i64 {
        query_db(self.path(), sql)
    }

    fn text(&self, sql: &str) -> String {
        query_db(self.path(), sql)
    }

    fn wait(&self, what: &str, sql: &str) {
        wait_for_db(self.path(), what, sql);
    }

    fn wait_completed(&self) {
        self.wait(
            "the run completes",
            "SELECT count(*) FROM runs WHERE status = 'completed'",
        );
    }

    fn wait_crashed(&self) {
        self.wait(
            "the runner crashed",
            "SELECT count(*) FROM run_workers WHERE status = 'crashed'",
        );
    }

    fn acks(&self) -> String {
        std::fs::read_to_string(self.path().join("acks")).unwrap_or_default()
    }

    /// The message kinds the server refused, in order (ack lines `<runner epoch> <message
    /// ID> <kind> <outcome>`).
    fn refused_kinds(&self) -> Vec<String> {
        self.acks()
            .lines()
            .filter(|line| line.ends_with(" rejected"))
            .filter_map(|line| line.split(' ').nth(2))
            .map(str::to_string)
            .collect()
    }

    fn wait_runner_exited(&self) {
        self.wait(
            "the runner exits",
            "SELECT count(*) FROM run_workers WHERE status = 'exited'",
        );
    }

    /// How many times `run_id` ended (completed or failed): 0 or 1.
    fn ended(&self, run_id: &str) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status IN ('completed', 'failed')"
        ))
    }

    fn script(&self, directives: &str) -> String {
        format!("{directives},ack-file={}", self.path().join("acks").display())
    }

    /// Submit a candidate for the run's pending agent request while no server runs (the test
    /// plays the client operation `interaction.submit`).
    fn submit(&self, run_id: &str, key: &str, payload: serde_json::Value) -> Submitted {
        let store = Store::open(&self.path().join("state.sqlite"), Arc::new(SystemClock)).expect("store");
        let (run, key) = (run_id.to_string(), key.to_string());
        store
            .write(move |tx| {
                let payload_hash = blobs::put_json(tx, &payload, 4096)?;
                let request_id = format!("req-{run}");
                let submission = Submission {
                    run_id: &run,
                    request_id: &request_id,
                    submission_id: &format!("sub-{key}"),
                    idempotency_key: &key,
                    payload_hash: &payload_hash,
                };
                interactions::submit(tx, &submission, None)
            })
            .expect("submit")
    }

    /// Answer the run's pending checkpoint while no server runs (the test plays the client
    /// operation `checkpoint.answer`): the run is settled by continuation `continuation`.
    fn answer(
        &self,
        run_id: &str,
        key: &str,
        continuation: &str,
        payload: serde_json::Value,
    ) -> StoreResult<Continued> {
        let store = Store::open(&self.path().join("state.sqlite"), Arc::new(SystemClock)).expect("store");
        let (run, key, continuation) = (run_id.to_string(), key.to_string(), continuation.to_string());
        store.write(move |tx| {
            let payload_hash = blobs::put_json(tx, &payload, 4096)?;
            let request_id = format!("req-{run}");
            let answer = CheckpointAnswer {
                answer: Submission {
                    run_id: &run,
                    request_id: &request_id,
                    submission_id: &format!("sub-{key}"),
                    idempotency_key: &key,
                    payload_hash: &payload_hash,
                },
                continuation_run_id: &continuation,
            };
            continuations::answer_checkpoint(tx, &answer, None)
        })
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = pi_workflows(self.path(), &["server", "stop"], "");
    }
}

#[test]
fn a_resumed_runner_gets_resume_with_its_run_state_and_skips_committed_nodes() {
    let dir = Dir::new(&["run-r"]);
    // ready, step1, step2, step3 → crash (step 3's commit may or may not land).
    dir.start(&dir.script("steps=5,crash-after=4,crash-first-only"));
    dir.wait_crashed();
    let committed = dir.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'");
    assert!(committed >= 2, "{committed} nodes committed before the crash");
    let resume = pi_workflows(dir.path(), &["run", "resume", "run-r"], "");
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    dir.wait_completed();
    // Each node completed exactly once across both runners: the run state told the
    // second runner what was already committed.
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        5
    );
    assert_eq!(
        dir.count("SELECT count(DISTINCT node_id) FROM node_attempts WHERE status = 'completed'"),
        5
    );
    let acks = dir.acks();
    assert!(acks.contains("command start inline"), "{acks}");
    assert!(acks.contains("command resume inline"), "{acks}");
}

#[test]
fn a_run_state_above_the_frame_limit_is_read_by_reference_in_parts() {
    let dir = Dir::new(&["run-big"]);
    // Six 200 KB outputs (1.2 MB of run state) before the crash.
    dir.start(&dir.script("steps=8,output-bytes=200000,crash-after=7,crash-first-only,bad-reads"));
    dir.wait_crashed();
    let resume = pi_workflows(dir.path(), &["run", "resume", "run-big"], "");
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    dir.wait_completed();
    let acks = dir.acks();
    assert!(acks.contains("command resume reference"), "{acks}");
    // Each bad read gets a bounded, named failure and the runner carries on.
    for line in [
        "read unknown-digest rejected contentUnavailable",
        "read wrong-media-type rejected contentUnavailable",
        "read zero-length rejected badRange",
        "read part-too-large rejected badRange",
        "read past-the-end rejected badRange",
    ] {
        assert!(acks.contains(line), "missing `{line}`:\n{acks}");
    }
    let parts = acks
        .lines()
        .filter(|line| line.contains(" content.read accepted"))
        .count();
    assert!(
        parts >= 3,
        "a 1.2 MB run state takes at least three 512 KiB parts; got {parts}\n{acks}"
    );
    assert_eq!(
        dir.count("SELECT count(DISTINCT node_id) FROM node_attempts WHERE status = 'completed'"),
        8
    );
    assert_eq!(
        dir.count("SELECT count(*) FROM blobs WHERE media_type = 'application/vnd.pi-workflows.run-state+json'"),
        1
    );
    // content.read is a read: it leaves no receipt.
    assert_eq!(
        dir.count("SELECT count(*) FROM runner_messages WHERE kind = 'content.read'"),
        0
    );
}

#[test]
fn a_checkpoint_waits_without_a_runner_and_its_answer_continues_the_run() {
    let dir = Dir::new(&["run-c"]);
    let script = dir.script("steps=3,checkpoint-at=2");
    dir.start(&script);
    dir.wait("the run waits", "SELECT count(*) FROM runs WHERE status = 'waiting'");
    dir.wait_runner_exited();
    assert_eq!(dir.text("SELECT status FROM run_queue"), "parked");
    assert_eq!(dir.text("SELECT status FROM interactive_requests"), "pending");
    assert_eq!(
        dir.text("SELECT status FROM node_attempts WHERE node_id = 'step2'"),
        "waiting"
    );
    assert_eq!(
        dir.count("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL"),
        0
    );
    // A headless run has no origin session: no workflow message.
    assert_eq!(dir.count("SELECT count(*) FROM workflow_messages"), 0);
    dir.stop();

    let answer = serde_json::json!({"approved": true});
    let continued = dir.answer("run-c", "k1", "run-c2", answer.clone()).expect("answer");
    assert_eq!(continued.continuation_run_id, "run-c2");
    // A second answer finds no pending checkpoint: refused, nothing changes.
    let again = dir.answer("run-c", "k2", "run-c3", answer.clone());
    assert!(matches!(again, Err(StoreError::InvalidInput { .. })), "{again:?}");
    assert_eq!(dir.count("SELECT count(*) FROM runs"), 2);
    assert_eq!(
        dir.text("SELECT status || ' ' || status_detail FROM runs WHERE run_id = 'run-c'"),
        "completed continued",
        "the answer settled the run by its continuation"
    );
    dir.start(&script);
    dir.wait(
        "the continuation completes",
        "SELECT count(*) FROM runs WHERE run_id = 'run-c2' AND status = 'completed'",
    );
    let output: String = dir.text(
        "SELECT CAST(b.content AS TEXT) FROM node_attempts a JOIN blobs b ON b.blob_hash = a.output_hash
         WHERE a.node_id = 'step2' AND a.status = 'completed'",
    );
    assert_eq!(output, r#"{"approved":true}"#);
    assert_eq!(dir.text("SELECT status FROM interactive_requests"), "settled");
    // The continuation ran only what follows the checkpoint.
    assert_eq!(
        dir.text("SELECT group_concat(node_id) FROM node_attempts WHERE run_id = 'run-c2'"),
        "step3"
    );
    assert_eq!(
        dir.text("SELECT parent_run_id || ' ' || origin || ' ' || root_run_id FROM runs WHERE run_id = 'run-c2'"),
        "run-c continuation run-c"
    );
    assert!(dir.acks().contains("command continue inline"), "{}", dir.acks());
}

#[test]
fn a_validating_runner_accepts_or_rejects_a_submitted_answer() {
    for (verdict, run_status, request_status, submission) in [
        ("accept", "completed", "settled", "accepted"),
        ("reject", "waiting", "pending", "rejected"),
    ] {
        let dir = Dir::new(&["run-v"]);
        let script = dir.script(&format!("steps=2,checkpoint-at=1,request-kind=agent,verdict={verdict}"));
        dir.start(&script);
        wait_for_db(
            dir.path(),
            "the run waits",
            "SELECT count(*) FROM runs WHERE status = 'waiting'",
        );
        dir.stop();
        dir.submit("run-v", "k1", serde_json::json!({"text": "candidate"}));
        assert_eq!(dir.text("SELECT outcome FROM interactive_submissions"), "validating");
        dir.start(&script);
        wait_for_db(
            dir.path(),
            "the validating runner exits",
            "SELECT count(*) FROM run_workers WHERE status = 'exited' AND generation = 2",
        );
        dir.stop();
        assert_eq!(dir.text("SELECT status FROM runs"), run_status, "{verdict}");
        assert_eq!(
            dir.text("SELECT status FROM interactive_requests"),
            request_status,
            "{verdict}"
        );
        assert_eq!(
            dir.text("SELECT outcome FROM interactive_submissions"),
            submission,
            "{verdict}"
        );
    }
}

#[test]
fn progress_updates_and_notifications_are_recorded_as_events() {
    let dir = Dir::new(&["run-u"]);
    dir.start(&dir.script("steps=2,updates"));
    dir.wait_completed();
    assert_eq!(
        dir.count("SELECT count(*) FROM events WHERE event_type = 'node.updated' AND payload_hash IS NOT NULL"),
        1
    );
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE node_type = 'notify' AND status = 'completed'"),
        1
    );
}

#[test]
fn a_registered_child_group_is_reaped_when_its_runner_dies_first() {
    let dir = Dir::new(&["run-p"]);
    // ready, register, step1 → crash with the registered `sleep` still running.
    dir.start(&dir.script("steps=3,register-child,crash-after=3"));
    dir.wait_crashed();
    let acks = dir.acks();
    let pid: i32 = acks
        .lines()
        .find_map(|line| line.strip_prefix("register ")?.strip_suffix(" accepted")?.parse().ok())
        .unwrap_or_else(|| panic!("the registration was not accepted:\n{acks}"));
    dir.wait(
        "the registration is closed",
        "SELECT count(*) FROM runner_processes WHERE unregistered_at IS NOT NULL",
    );
    let deadline = std::time::Instant::now() + common::SERVER_WAIT;
    while !supervisors::process::group_members(pid).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "registered group {pid} survived its runner"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_process_that_is_not_a_direct_child_of_the_runner_cannot_register() {
    let dir = Dir::new(&["run-f"]);
    dir.start(&dir.script("steps=1,register-foreign"));
    dir.wait_completed();
    let acks = dir.acks();
    assert!(
        acks.lines()
            .any(|line| line.starts_with("register ") && line.ends_with(" rejected")),
        "{acks}"
    );
    assert_eq!(dir.count("SELECT count(*) FROM runner_processes"), 0);
}

#[test]
fn the_server_renews_a_live_runs_claim_while_its_runner_is_silent() {
    let dir = Dir::new(&["run-quiet"]);
    // One node that works 12 s between node.started and node.finished: longer than the
    // renewal interval (a third of the 30 s claim), with no runner message in between.
    dir.start(&dir.script("steps=1,work-ms=12000"));
    dir.wait(
        "the node starts",
        "SELECT count(*) FROM node_attempts WHERE status = 'running'",
    );
    let started: i64 = dir.count("SELECT heartbeat_at FROM leases WHERE resource_type = 'run'");
    dir.wait(
        "the claim is renewed without a runner message",
        &format!(
            "SELECT count(*) FROM leases l JOIN node_attempts a ON a.run_id = l.resource_id
             WHERE l.resource_type = 'run' AND l.heartbeat_at > {started} AND a.status = 'running'"
        ),
    );
    dir.wait_completed();
}

#[test]
fn a_ready_without_a_proposal_soon_is_recorded_alone_at_the_revision_its_answer_named() {
    let dir = Dir::new(&["run-ready"]);
    // Fenced as the Node runner is: its first proposal expects the revision the ready answer
    // named. It waits 3 s between its command and that proposal, far past the server's wait
    // for a proposal to record the ready.
    dir.start(&dir.script("steps=2,step-delay-ms=3000,fenced"));
    dir.wait(
        "the ready is recorded",
        "SELECT count(*) FROM run_workers WHERE status = 'ready' AND ready_at IS NOT NULL",
    );
    // Recorded alone, before any node: the run running, its runner shown ready.
    assert_eq!(dir.count("SELECT count(*) FROM node_attempts"), 0);
    assert_eq!(dir.text("SELECT status FROM run_queue"), "running");
    dir.wait_completed();
    dir.wait_runner_exited();
    // The runner's proposals expected the revision the answer named, one past `run.running`.
    let order = dir.text(
        "SELECT group_concat(event_type, ' ') FROM (SELECT event_type FROM events
         WHERE run_id = 'run-ready' AND resource_revision >=
           (SELECT resource_revision FROM events WHERE event_type = 'run.running')
         ORDER BY resource_revision)",
    );
    assert!(order.starts_with("run.running node.finished node.finished"), "{order}");
    assert!(dir.refused_kinds().is_empty(), "{}", dir.acks());
    assert_eq!(
        dir.count("SELECT count(*) FROM events WHERE event_type = 'run.running'"),
        1
    );
}

#[test]
fn pipelined_pure_results_are_each_committed_and_answered_in_order() {
    let dir = Dir::new(&["run-pipe"]);
    // Up to 8 node results in flight; the scripted runner exits if an answer comes out of
    // order, so completion proves the order.
    dir.start(&dir.script("steps=40,pipeline=8"));
    dir.wait_completed();
    dir.wait_runner_exited();
    assert_eq!(
        dir.count("SELECT count(DISTINCT node_id) FROM node_attempts WHERE status = 'completed'"),
        40
    );
    // One receipt per proposal: 40 results, run.finished (`runner.ready` rides the first
    // result; the goodbye, `runner.exiting`, changes nothing: both are answered without one).
    assert_eq!(
        dir.count("SELECT count(*) FROM runner_messages WHERE outcome = 'accepted'"),
        41
    );
}

#[test]
fn a_run_end_sent_behind_unanswered_results_is_applied_after_them_in_order() {
    let dir = Dir::new(&["run-finish-ahead"]);
    // Ten results and the run's end in flight at once, fenced by revision as the Node
    // runner sends them: all accepted, in order (the runner exits on an answer out of order).
    dir.start(&dir.script("steps=10,pipeline=16,finish-ahead,fenced"));
    dir.wait_completed();
    // The goodbye's answer comes after the end's commit: read the answers once it exited.
    dir.wait_runner_exited();
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE run_id = 'run-finish-ahead' AND status = 'completed'"),
        10
    );
    let acks = dir.acks();
    let kinds: Vec<&str> = acks.lines().filter_map(|line| line.split(' ').nth(2)).collect();
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "node.finished").count(),
        10,
        "{acks}"
    );
    assert_eq!(kinds.last(), Some(&"runner.exiting"), "{acks}");
    assert_eq!(kinds.get(kinds.len() - 2), Some(&"run.finished"), "{acks}");
    // `<runner epoch> <message ID> <kind> <outcome>` per answer (the command line has three).
    let answers: Vec<&str> = acks.lines().filter(|line| line.split(' ').count() == 4).collect();
    assert_eq!(answers.len(), 13, "ready, ten results, the end, the goodbye: {acks}");
    assert!(answers.iter().all(|line| line.ends_with(" accepted")), "{acks}");
}

#[test]
fn a_run_end_behind_a_refused_result_is_refused_and_the_run_does_not_end() {
    let dir = Dir::new(&["run-finish-refused"]);
    // Step 4's result names a revision the run never had: refused. Steps 5 and 6 and the
    // run's end were sent behind it expecting what it would have led to: refused as well.
    dir.start(&dir.script("steps=6,pipeline=16,finish-ahead,fenced,bad-revision-at=4"));
    dir.wait_runner_exited();
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE run_id = 'run-finish-refused' AND status = 'completed'"),
        3,
        "only the results before the refused one committed"
    );
    assert_eq!(dir.ended("run-finish-refused"), 0, "the run did not end");
    assert_eq!(
        dir.refused_kinds(),
        ["node.finished", "node.finished", "node.finished", "run.finished"],
        "{}",
        dir.acks()
    );
}

#[test]
fn pure_results_in_one_message_commit_each_node_at_its_own_revision() {
    let dir = Dir::new(&["run-batch"]);
    // Five pure results in one `nodes.finished`, the run's end sent behind it, fenced as the
    // Node runner sends them: the end expects the revision five past the batch's.
    dir.start(&dir.script("steps=5,batch,finish-ahead,fenced"));
    dir.wait_completed();
    dir.wait_runner_exited();
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE run_id = 'run-batch' AND status = 'completed'"),
        5
    );
    // One event and one viewer delta per node, at consecutive revisions in step order.
    let events = dir.text(
        "SELECT group_concat(e.resource_revision || ':' || a.node_id, ' ') FROM (
           SELECT resource_revision, row_number() OVER (ORDER BY resource_revision) AS n
           FROM events WHERE run_id = 'run-batch' AND event_type = 'node.finished') e
         JOIN (SELECT node_id, row_number() OVER (ORDER BY rowid) AS n
               FROM node_attempts WHERE run_id = 'run-batch') a ON a.n = e.n",
    );
    let revisions: Vec<(i64, &str)> = events
        .split(' ')
        .map(|pair| pair.split_once(':').expect("revision:node"))
        .map(|(revision, node)| (revision.parse().expect("revision"), node))
        .collect();
    let first = revisions[0].0;
    let expected: Vec<(i64, String)> = (0..5).map(|i| (first + i, format!("step{}", i + 1))).collect();
    let seen: Vec<(i64, String)> = revisions.iter().map(|(r, n)| (*r, n.to_string())).collect();
    assert_eq!(seen, expected, "{events}");
    assert_eq!(
        dir.count(&format!(
            "SELECT count(*) FROM viewer_deltas WHERE run_id = 'run-batch' AND resource_revision BETWEEN {first} AND {}",
            first + 4
        )),
        5
    );
    assert_eq!(
        dir.count("SELECT count(*) FROM runner_messages WHERE kind = 'nodes.finished'"),
        1,
        "one receipt for the batch"
    );
    // `<runner epoch> <message ID> <kind> <outcome>` per answer (the command line has three).
    let acks = dir.acks();
    let answers: Vec<&str> = acks.lines().filter(|line| line.split(' ').count() == 4).collect();
    let kinds: Vec<&str> = answers.iter().filter_map(|line| line.split(' ').nth(2)).collect();
    assert_eq!(
        kinds,
        ["runner.ready", "nodes.finished", "run.finished", "runner.exiting"],
        "{acks}"
    );
    assert!(answers.iter().all(|line| line.ends_with(" accepted")), "{acks}");
}

#[test]
fn a_batch_with_one_bad_result_is_refused_whole_and_changes_nothing() {
    let dir = Dir::new(&["run-batch-bad"]);
    // Step 3 of five claims a node type a batch may not carry: no step of the batch commits,
    // and the run's end sent behind it expects a revision the run never reached.
    dir.start(&dir.script("steps=5,batch,bad-node-type-at=3,finish-ahead,fenced"));
    dir.wait_runner_exited();
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE run_id = 'run-batch-bad'"),
        0,
        "no result of the refused batch committed"
    );
    assert_eq!(
        dir.count("SELECT count(*) FROM events WHERE run_id = 'run-batch-bad' AND event_type = 'node.finished'"),
        0
    );
    assert_eq!(dir.ended("run-batch-bad"), 0, "the run did not end");
    assert_eq!(
        dir.refused_kinds(),
        ["nodes.finished", "run.finished"],
        "{}",
        dir.acks()
    );
}

#[test]
fn a_runner_that_crashes_with_results_in_flight_resumes_without_repeating_committed_nodes() {
    let dir = Dir::new(&["run-pipe-crash"]);
    // Crash right after writing the 20th message, with up to 8 results unanswered.
    dir.start(&dir.script("steps=40,pipeline=8,crash-after=20,crash-first-only"));
    dir.wait_crashed();
    let committed = dir.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'");
    assert!(
        (1..=19).contains(&committed),
        "{committed} results committed before the crash"
    );
    let resume = pi_workflows(dir.path(), &["run", "resume", "run-pipe-crash"], "");
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    dir.wait_completed();
    assert_eq!(
        dir.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        40,
        "every node committed exactly once"
    );
}

#[test]
fn a_message_id_reused_for_another_message_is_refused_and_changes_nothing() {
    let dir = Dir::new(&["run-reuse"]);
    dir.start(&dir.script("steps=2,reuse-id"));
    dir.wait_completed();
    let acks = dir.acks();
    // Another message under a known ID: refused, nothing applied; the same message again:
    // its stored answer.
    assert!(acks.contains("reuse rejected messageIdReused"), "{acks}");
    assert!(acks.contains("repeat adopted "), "{acks}");
    assert_eq!(
        dir.count("SELECT count(*) FROM events WHERE run_id = 'run-reuse' AND event_type = 'node.updated'"),
        1,
        "only the first update was applied"
    );
}
