//! Live views on the real server with the scripted runner: `view.run.get`, history pages,
//! referenced content, and subscriptions (snapshots, patches, reconnects, unsubscribe, slow
//! subscribers).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use pi_workflows::client::Client;
use pi_workflows::protocol::{EventKind, JsonObject, Operation, Outcome, Response};
use pi_workflows::view::patch;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    /// Queue `runs` runs (each with a stored definition of `nodes` nodes), then start a
    /// server whose runners follow `script`.
    fn start(runs: usize, nodes: usize, script: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("piwv").tempdir_in("/tmp").expect("dir");
        common::queue_with_definition(dir.path(), runs, nodes);
        let out = common::pi_workflows(dir.path(), &["server", "start"], script);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    fn client(&self) -> Client {
        Client::connect(&self.dir.path().join("server").join("server.sock")).expect("connect")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

/// A definition snapshot like the resolver's, with `nodes` compute nodes.
fn request(client: &mut Client, operation: Operation, run_id: Option<&str>, payload: Value) -> Response {
    let payload: JsonObject = serde_json::from_value(payload).expect("object");
    client.request_for(operation, run_id, payload).expect("request")
}

fn receipt(response: Response) -> JsonObject {
    assert_eq!(response.outcome, Outcome::Accepted, "{:?}", response.error);
    response.receipt.expect("receipt")
}

fn view_of(client: &mut Client, run_id: &str) -> Value {
    receipt(request(client, Operation::ViewRunGet, Some(run_id), json!({})))["view"].clone()
}

fn wait_for_status(client: &mut Client, run_id: &str, status: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let view = view_of(client, run_id);
        if view["display"]["status"] == status {
            return view;
        }
        assert!(Instant::now() < deadline, "run never became {status}: {view}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn watch(client: &mut Client, run_id: &str, payload: Value) -> String {
    let receipt = receipt(request(client, Operation::ViewRunWatch, Some(run_id), payload));
    receipt["subscriptionId"].as_str().expect("subscription ID").to_string()
}

/// Apply events of `subscription` to `view` until `done(view)`; returns the events' kinds
/// and revisions.
fn follow(
    client: &mut Client,
    subscription: &str,
    view: &mut Value,
    done: impl Fn(&Value) -> bool,
) -> Vec<(EventKind, u64)> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !done(view) {
        assert!(
            Instant::now() < deadline,
            "view never reached the expected state: {view}"
        );
        let Some(event) = client.next_event(Duration::from_millis(200)).expect("event") else {
            continue;
        };
        assert_eq!(event.subscription_id.as_str(), subscription);
        let revision = event.revision.expect("revisioned").get();
        match event.event {
            EventKind::RunSnapshot => *view = event.payload["view"].clone(),
            EventKind::RunPatch => {
                assert_eq!(
                    event.payload["fromRevision"], view["revision"],
                    "a patch applies to the view held"
                );
                patch::apply(view, &event.payload["patch"]);
            }
            other => panic!("unexpected event {other:?}"),
        }
        assert_eq!(view["revision"], revision, "the event's revision is the view's");
        seen.push((event.event, revision));
    }
    seen
}

fn status_of(client: &mut Client, run_id: &str) -> JsonObject {
    receipt(request(client, Operation::RunStatus, Some(run_id), json!({})))
}

/// A polled `run.status` is answered from the last read while the store is unchanged; it
/// must still show every change at once. A status read right after a control's answer shows
/// the control, however often the run was polled just before; a polled run's revision never
/// goes back; and the end matches the store.
#[test]
fn a_polled_status_shows_every_change_at_once() {
    let server = Server::start(1, 1000, "steps=12,step-delay-ms=30");
    let mut client = server.client();
    wait_for_status(&mut client, "run-0", "running");
    for round in 0..3 {
        for _ in 0..5 {
            status_of(&mut client, "run-0");
        }
        receipt(request(&mut client, Operation::RunPause, Some("run-0"), json!({})));
        let paused = status_of(&mut client, "run-0");
        assert_eq!(paused["paused"], true, "round {round}: {paused:?}");
        for _ in 0..5 {
            assert_eq!(status_of(&mut client, "run-0")["paused"], true, "round {round}");
        }
        receipt(request(&mut client, Operation::RunResume, Some("run-0"), json!({})));
        let resumed = status_of(&mut client, "run-0");
        assert_eq!(resumed["paused"], false, "round {round}: {resumed:?}");
    }
    let deadline = Instant::now() + WAIT;
    let mut revision_seen = 0;
    let last = loop {
        let status = status_of(&mut client, "run-0");
        let revision = status["revision"].as_i64().expect("revision");
        assert!(
            revision >= revision_seen,
            "the revision went back: {revision_seen} then {status:?}"
        );
        revision_seen = revision;
        if status["status"] == "completed" {
            break status;
        }
        assert!(Instant::now() < deadline, "the run never completed: {status:?}");
        std::thread::sleep(Duration::from_millis(2));
    };
    let stored_revision: i64 = common::query_db(server.dir.path(), "SELECT revision FROM runs WHERE run_id = 'run-0'");
    let stored_steps: i64 = common::query_db(
        server.dir.path(),
        "SELECT count(*) FROM node_attempts WHERE run_id = 'run-0' AND status = 'completed'",
    );
    assert_eq!(last["revision"], stored_revision, "{last:?}");
    assert_eq!(last["completedSteps"], stored_steps, "{last:?}");
    assert_eq!(
        status_of(&mut client, "run-0"),
        last,
        "unchanged store, the same answer"
    );
}

#[test]
fn a_watcher_gets_one_snapshot_then_patches_that_rebuild_the_final_view() {
    let server = Server::start(1, 30, "steps=30,step-delay-ms=15");
    let mut client = server.client();
    let subscription = watch(&mut client, "run-0", json!({}));
    let mut view = Value::Null;
    // Completed, and its runner gone: worker activity is part of the view too.
    let seen = follow(&mut client, &subscription, &mut view, |view| {
        view["display"]["status"] == "completed" && view["display"]["activity"]["kind"] == "none"
    });
    assert_eq!(seen[0].0, EventKind::RunSnapshot, "the first event is a snapshot");
    assert!(
        seen[1..].iter().all(|(kind, _)| *kind == EventKind::RunPatch),
        "{seen:?}"
    );
    assert!(seen.len() > 2, "the run's progress arrived as patches: {seen:?}");
    assert!(
        seen.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "revisions only grow: {seen:?}"
    );
    let fresh = view_of(&mut client, "run-0");
    assert_eq!(view, fresh, "patched view equals a fresh read");
    assert_eq!(fresh["run"]["completedSteps"], 30);
    assert_eq!(fresh["display"]["controls"], json!(["restart"]));
    assert_eq!(fresh["workflow"]["nodes"]["total"], 30);
}

/// A run's live view wakes for its own run's commits only (`store::run_news`), so a missed
/// wake would leave a watcher on a stale view. Watchers of runs that queue and go at once,
/// each on its own connection, must each follow their own run to its end through every other
/// run's commits, and a finished run watched meanwhile must get nothing more.
#[test]
fn watchers_of_runs_going_at_once_each_follow_their_own_run_to_its_end() {
    const RUNS: usize = 4;
    let server = Server::start(RUNS + 1, 20, "steps=20,step-delay-ms=3");
    let mut bystander = server.client();
    wait_for_status(&mut bystander, "run-0", "completed");
    let quiet = watch(&mut bystander, "run-0", json!({}));
    let mut quiet_view = Value::Null;
    follow(&mut bystander, &quiet, &mut quiet_view, |view| {
        view["display"]["activity"]["kind"] == "none"
    });
    let watchers: Vec<_> = (1..=RUNS)
        .map(|run| {
            let mut client = server.client();
            let run_id = format!("run-{run}");
            std::thread::spawn(move || {
                let subscription = watch(&mut client, &run_id, json!({}));
                let mut view = Value::Null;
                follow(&mut client, &subscription, &mut view, |view| {
                    view["display"]["status"] == "completed" && view["display"]["activity"]["kind"] == "none"
                });
                assert_eq!(
                    view,
                    view_of(&mut client, &run_id),
                    "{run_id}: the patched view is a fresh read"
                );
                assert_eq!(view["run"]["completedSteps"], 20, "{run_id}");
            })
        })
        .collect();
    for watcher in watchers {
        watcher.join().expect("every watcher saw its run's end");
    }
    assert!(
        bystander
            .next_event(Duration::from_millis(300))
            .expect("events")
            .is_none(),
        "the finished run's view did not move while the others ran"
    );
    assert_eq!(quiet_view, view_of(&mut bystander, "run-0"));
}

#[test]
fn a_reconnect_from_a_retained_revision_gets_a_patch_and_a_stale_one_a_snapshot() {
    let server = Server::start(1, 400, "steps=400,step-delay-ms=5");
    let mut first = server.client();
    let subscription = watch(&mut first, "run-0", json!({}));
    let mut view = Value::Null;
    follow(&mut first, &subscription, &mut view, |view| {
        view["run"]["completedSteps"].as_i64().unwrap_or(0) >= 3
    });
    let held = view["revision"].as_i64().expect("revision");
    drop(first);

    let mut second = server.client();
    let subscription = watch(&mut second, "run-0", json!({"sinceRevision": held}));
    let event = second.next_event(WAIT).expect("event").expect("an event");
    assert_eq!(event.subscription_id.as_str(), subscription);
    // The feed of this run may have ended with the first connection; then the revision is
    // no longer retained and a snapshot is the documented answer.
    match event.event {
        EventKind::RunPatch => {
            assert_eq!(event.payload["fromRevision"], json!(held));
            patch::apply(&mut view, &event.payload["patch"]);
        }
        EventKind::RunSnapshot => view = event.payload["view"].clone(),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(view["revision"], json!(event.revision.expect("revision").get()));

    // Revisions that were never published (0, and one from the future) are not retained.
    for stale in [0, 1_000_000_000] {
        let mut third = server.client();
        let subscription = watch(&mut third, "run-0", json!({"sinceRevision": stale}));
        let event = third.next_event(WAIT).expect("event").expect("an event");
        assert_eq!(event.subscription_id.as_str(), subscription);
        assert_eq!(event.event, EventKind::RunSnapshot, "revision {stale} is not retained");
    }
}

#[test]
fn a_live_second_watcher_from_a_retained_revision_gets_a_patch() {
    let server = Server::start(1, 400, "steps=400,step-delay-ms=5");
    let mut keeper = server.client();
    let kept = watch(&mut keeper, "run-0", json!({}));
    let mut view = Value::Null;
    follow(&mut keeper, &kept, &mut view, |view| {
        view["run"]["completedSteps"].as_i64().unwrap_or(0) >= 2
    });
    let held = view["revision"].as_i64().expect("revision");
    // The keeper still watches, so the feed retains recent revisions.
    let mut second = server.client();
    watch(&mut second, "run-0", json!({"sinceRevision": held}));
    let event = second.next_event(WAIT).expect("event").expect("an event");
    assert_eq!(event.event, EventKind::RunPatch, "{:?}", event.payload);
    assert_eq!(event.payload["fromRevision"], json!(held));
}

#[test]
fn unwatch_stops_the_events_and_an_unknown_run_is_not_found() {
    let server = Server::start(1, 200, "steps=200,step-delay-ms=10");
    let mut client = server.client();
    let subscription = watch(&mut client, "run-0", json!({}));
    assert!(client.next_event(WAIT).expect("event").is_some());
    let removed = receipt(request(
        &mut client,
        Operation::ViewRunUnwatch,
        None,
        json!({"subscriptionId": subscription}),
    ));
    assert_eq!(removed["removed"], true);
    // Events written before the unwatch answer arrived before it; none may follow it.
    client.take_queued_events();
    assert!(
        client.next_event(Duration::from_millis(400)).expect("read").is_none(),
        "no event after the unwatch answer"
    );
    let unknown = request(&mut client, Operation::ViewRunWatch, Some("run-missing"), json!({}));
    assert_eq!(unknown.outcome, Outcome::NotFound);
}

#[test]
fn history_pages_walk_every_attempt_once_and_content_reads_verify() {
    let server = Server::start(1, 120, "steps=120");
    let mut client = server.client();
    let view = wait_for_status(&mut client, "run-0", "completed");
    assert_eq!(view["history"]["total"], 120);
    assert_eq!(
        view["history"]["items"].as_object().expect("items").len(),
        50,
        "a bounded window"
    );

    let mut after: Option<i64> = None;
    let mut nodes = Vec::new();
    loop {
        let mut payload = json!({"kind": "attempts", "limit": 7});
        if let Some(after) = after {
            payload["after"] = json!(after);
        }
        let page = receipt(request(&mut client, Operation::ViewPage, Some("run-0"), payload));
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 7);
        nodes.extend(
            items
                .iter()
                .map(|item| item["nodeId"].as_str().expect("node").to_string()),
        );
        match page.get("nextAfter") {
            Some(next) => after = next.as_i64(),
            None => break,
        }
    }
    let expected: Vec<String> = (1..=120).map(|i| format!("step{i}")).collect();
    assert_eq!(nodes, expected, "every attempt once, in order");

    let reference = view["workflow"]["definition"].clone();
    let bytes = read_content(&mut client, "run-0", &reference, 1000);
    assert_eq!(bytes.len() as u64, reference["byteLength"].as_u64().expect("length"));
    let value: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(value, common::definition(120));

    let mut wrong_media = reference.clone();
    wrong_media["mediaType"] = json!("application/json");
    let refused = request(
        &mut client,
        Operation::ViewContent,
        Some("run-0"),
        content_payload(&wrong_media, 0, 10),
    );
    assert_eq!(
        refused.outcome,
        Outcome::NotFound,
        "media type is part of the reference"
    );
    let other_run = request(
        &mut client,
        Operation::ViewContent,
        Some("run-x"),
        content_payload(&reference, 0, 10),
    );
    assert_eq!(other_run.outcome, Outcome::NotFound, "the run is part of the reference");
    let too_long = request(
        &mut client,
        Operation::ViewContent,
        Some("run-0"),
        content_payload(&reference, 0, 512 * 1024 + 1),
    );
    assert_eq!(too_long.error.expect("error").code, "badRange");
}

fn content_payload(reference: &Value, offset: u64, length: u64) -> Value {
    json!({"digest": reference["digest"], "mediaType": reference["mediaType"], "offset": offset, "length": length})
}

/// Read referenced content in `chunk`-byte parts and verify it against the reference.
fn read_content(client: &mut Client, run_id: &str, reference: &Value, chunk: u64) -> Vec<u8> {
    use base64::Engine as _;
    let total = reference["byteLength"].as_u64().expect("length");
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < total {
        let part = receipt(request(
            client,
            Operation::ViewContent,
            Some(run_id),
            content_payload(reference, bytes.len() as u64, chunk),
        ));
        assert_eq!(part["digest"], reference["digest"]);
        let data = base64::engine::general_purpose::STANDARD
            .decode(part["data"].as_str().expect("data"))
            .expect("base64");
        assert!(!data.is_empty() && data.len() as u64 <= chunk);
        bytes.extend(data);
    }
    let digest = format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes));
    assert_eq!(
        json!(digest),
        reference["digest"],
        "assembled bytes match the reference"
    );
    bytes
}

#[test]
fn a_waiting_run_shows_its_checkpoint_and_the_answer_control() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2");
    let mut client = server.client();
    let view = wait_for_status(&mut client, "run-0", "waiting");
    let display = &view["display"];
    assert_eq!(display["controls"], json!(["pause", "cancel", "answer"]));
    assert_eq!(display["request"]["kind"], "checkpoint");
    assert!(
        display.get("currentNode").is_none(),
        "a waiting run has no running node"
    );
    assert_eq!(display["waitingOn"]["nodeId"], "step2");
    assert_eq!(
        view["queue"],
        json!({"status": "parked"}),
        "the queue carries display metadata only"
    );
}

#[test]
fn a_subscriber_that_never_reads_does_not_delay_another_client() {
    let server = Server::start(2, 300, "steps=300,output-bytes=2000");
    // This client subscribes to both runs and the run list, then never reads a byte.
    let mut stuck = server.client();
    watch(&mut stuck, "run-0", json!({}));
    watch(&mut stuck, "run-1", json!({}));
    receipt(request(&mut stuck, Operation::ViewRunsWatch, None, json!({})));
    // Another client keeps working while both runs change hundreds of times.
    let mut other = server.client();
    wait_for_status(&mut other, "run-0", "completed");
    wait_for_status(&mut other, "run-1", "completed");
    let page = receipt(request(&mut other, Operation::ViewRunsPage, None, json!({"limit": 1})));
    assert_eq!(page["items"].as_array().expect("items").len(), 1);
    assert!(page.contains_key("nextBefore"), "a cursor to the next page");
    let rest = receipt(request(
        &mut other,
        Operation::ViewRunsPage,
        None,
        json!({"limit": 5, "before": page["nextBefore"]}),
    ));
    let ids: Vec<&str> = page["items"]
        .as_array()
        .into_iter()
        .chain(rest["items"].as_array())
        .flatten()
        .map(|item| item["runId"].as_str().expect("run ID"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["run-0", "run-1"], "each run once across pages");
}

fn cli(server: &Server, args: &[&str]) -> std::process::Output {
    common::pi_workflows(server.dir.path(), args, "steps=40,step-delay-ms=5")
}

#[test]
fn cli_view_follows_a_run_to_its_end_and_once_prints_one_view() {
    let server = Server::start(1, 40, "steps=40,step-delay-ms=5");
    let out = cli(&server, &["view", "run-0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.rsplit("run run-0").next().expect("a drawn view");
    assert!(last.contains("completed") && last.contains("40 of 40 steps"), "{text}");
    assert!(
        last.contains("✓ root/step40"),
        "the history shows the last node: {last}"
    );
    assert!(last.contains("controls: restart"), "{last}");

    let once = cli(&server, &["view", "run-0", "--once", "--json"]);
    assert!(once.status.success());
    let lines: Vec<&str> = std::str::from_utf8(&once.stdout).expect("UTF-8").lines().collect();
    assert_eq!(lines.len(), 1, "one JSON document");
    let view: Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(view["schema"], "pi-workflows.run-view.v1");
    assert_eq!(view["display"]["status"], "completed");

    let missing = cli(&server, &["view", "run-nope", "--once"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run run-nope"));
}

#[test]
fn cli_runs_watch_prints_the_run_list_as_it_changes() {
    use std::io::BufRead;
    let server = Server::start(1, 40, "steps=40,step-delay-ms=5");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(server.dir.path())
        .args(["runs", "--watch", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let deadline = Instant::now() + WAIT;
    let mut completed = false;
    while !completed {
        assert!(Instant::now() < deadline, "the list never showed the run completed");
        let line = lines.next().expect("a line").expect("read");
        let page: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(page["schema"], "pi-workflows.run-list.v1");
        completed = page["items"][0]["display"]["status"] == "completed";
    }
    child.kill().expect("kill");
    let _ = child.wait();
}

fn submit(client: &mut Client, operation: Operation, key: &str, payload: Value) -> Response {
    let payload: JsonObject = serde_json::from_value(payload).expect("object");
    client
        .request_keyed(operation, Some("run-0"), payload, Some(key.to_string()))
        .expect("submit")
}

#[test]
fn an_agent_submission_answers_only_after_the_runner_accepted_it() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2,request-kind=agent,verdict=accept");
    let mut client = server.client();
    let view = wait_for_status(&mut client, "run-0", "waiting");
    assert_eq!(
        view["display"]["controls"],
        json!(["pause", "cancel", "submit", "update"])
    );
    let wrong = submit(&mut client, Operation::DecisionAnswer, "k-0", json!({"answer": "yes"}));
    assert_eq!(
        wrong.outcome,
        Outcome::Rejected,
        "a decision answer does not fit an agent step"
    );

    let accepted = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-1",
        json!({"output": {"summary": "done"}}),
    );
    assert_eq!(accepted.outcome, Outcome::Accepted, "{:?}", accepted.error);
    let receipt = accepted.receipt.expect("receipt");
    assert_eq!(receipt["outcome"], "accepted", "answered after the runner's verdict");
    // The verdict is durable before the answer: the submission row already says so.
    let settled: String = common::query_db(server.dir.path(), "SELECT outcome FROM interactive_submissions");
    assert_eq!(settled, "accepted");
    let again = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-1",
        json!({"output": {"summary": "done"}}),
    );
    assert_eq!(again.outcome, Outcome::Adopted);
    assert_eq!(again.receipt.expect("receipt"), receipt);
    wait_for_status(&mut client, "run-0", "completed");
}

#[test]
fn a_rejected_submission_is_refused_with_the_checks_message_and_the_run_waits_again() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2,request-kind=agent,verdict=reject");
    let mut client = server.client();
    wait_for_status(&mut client, "run-0", "waiting");
    let refused = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-1",
        json!({"output": "bad"}),
    );
    assert_eq!(refused.outcome, Outcome::Rejected);
    let error = refused.error.expect("error");
    assert_eq!(error.code, "submissionRejected");
    assert!(error.message.contains("scripted rejection"), "{}", error.message);
    let retried = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-1",
        json!({"output": "bad"}),
    );
    assert_eq!(
        retried.error.expect("error").code,
        "submissionRejected",
        "a retry gets the same outcome"
    );
    let view = wait_for_status(&mut client, "run-0", "waiting");
    assert_eq!(
        view["display"]["request"]["kind"], "agent",
        "the request is still pending"
    );
    assert_eq!(
        common::query_db::<i64>(server.dir.path(), "SELECT count(*) FROM interactive_submissions"),
        1,
        "the retry recorded no second candidate"
    );
}

#[test]
fn a_protected_decision_is_answered_with_decision_answer_only() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2,request-kind=decision,verdict=accept");
    let mut client = server.client();
    let view = wait_for_status(&mut client, "run-0", "waiting");
    assert_eq!(view["display"]["controls"], json!(["pause", "cancel", "human-answer"]));
    let wrong = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-0",
        json!({"output": "ship"}),
    );
    assert_eq!(wrong.outcome, Outcome::Rejected);
    let answered = submit(&mut client, Operation::DecisionAnswer, "k-1", json!({"answer": "ship"}));
    assert_eq!(answered.outcome, Outcome::Accepted, "{:?}", answered.error);
    wait_for_status(&mut client, "run-0", "completed");
}

#[test]
fn an_assistant_message_step_takes_the_visible_reply_with_interaction_assistant_only() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2,request-kind=assistant,verdict=accept");
    let mut client = server.client();
    wait_for_status(&mut client, "run-0", "waiting");
    let wrong = submit(
        &mut client,
        Operation::InteractionSubmit,
        "k-0",
        json!({"output": "done"}),
    );
    assert_eq!(
        wrong.outcome,
        Outcome::Rejected,
        "an agent submission does not fit an assistant step"
    );
    let empty = submit(
        &mut client,
        Operation::InteractionAssistant,
        "k-1",
        json!({"text": "  "}),
    );
    assert_eq!(empty.error.expect("error").code, "invalidRequest");
    let replied = submit(
        &mut client,
        Operation::InteractionAssistant,
        "k-2",
        json!({"text": "All set."}),
    );
    assert_eq!(replied.outcome, Outcome::Accepted, "{:?}", replied.error);
    wait_for_status(&mut client, "run-0", "completed");
}

#[test]
fn follow_ups_are_refused_for_a_headless_run_with_what_to_do() {
    let server = Server::start(1, 3, "steps=3");
    let mut client = server.client();
    let refused = submit(
        &mut client,
        Operation::FollowUpQueue,
        "f-1",
        json!({"prompt": "and then?"}),
    );
    assert_eq!(refused.outcome, Outcome::Rejected);
    assert!(refused.error.expect("error").message.contains("headless"));
    let empty = submit(&mut client, Operation::FollowUpQueue, "f-2", json!({"prompt": " "}));
    assert_eq!(empty.error.expect("error").code, "invalidRequest");
    let long = "x".repeat(pi_workflows::store::messages::FOLLOW_UP_PROMPT_BYTES_MAX + 1);
    let too_long = submit(&mut client, Operation::FollowUpQueue, "f-4", json!({ "prompt": long }));
    let error = too_long.error.expect("error");
    assert_eq!(error.code, "invalidRequest");
    assert!(error.message.contains("65536 bytes"), "{}", error.message);
    let bad_id = submit(
        &mut client,
        Operation::FollowUpRemove,
        "f-3",
        json!({"followUpId": "x"}),
    );
    assert_eq!(bad_id.error.expect("error").code, "invalidRequest");
}

#[test]
fn step_updates_show_in_the_live_view_latest_per_key_and_are_rate_limited() {
    let server = Server::start(1, 3, "steps=3,checkpoint-at=2,request-kind=agent,verdict=accept");
    let mut client = server.client();
    wait_for_status(&mut client, "run-0", "waiting");
    let subscription = watch(&mut client, "run-0", json!({}));
    let mut view = Value::Null;
    follow(&mut client, &subscription, &mut view, |view| {
        view["display"]["status"] == "waiting"
    });
    for (key, completed) in [("u-1", 1), ("u-2", 2)] {
        let update =
            json!({"update": {"type": "progress", "key": "overall", "data": {"completed": completed, "total": 3}}});
        let sent = submit(&mut client, Operation::InteractionUpdate, key, update);
        assert_eq!(sent.outcome, Outcome::Accepted, "{:?}", sent.error);
    }
    let completed = |view: &Value| {
        let data = view["display"]["request"]["updates"][0]["dataJson"]
            .as_str()
            .unwrap_or("{}");
        serde_json::from_str::<Value>(data).expect("JSON")["completed"].clone()
    };
    follow(&mut client, &subscription, &mut view, |view| completed(view) == 2);
    let updates = view["display"]["request"]["updates"].as_array().expect("updates");
    assert_eq!(updates.len(), 1, "the latest value per type and key: {updates:?}");
    assert_eq!(updates[0]["seq"], 2);

    let bad = submit(
        &mut client,
        Operation::InteractionUpdate,
        "u-3",
        json!({"update": {"type": "Bad", "key": "k"}}),
    );
    assert_eq!(bad.error.expect("error").code, "invalidRequest");
    // The bucket holds 100 and refills 20 a second: 600 sends stay unlimited only if each
    // took over 40 ms (150 needed just 17 ms, which a loaded CI machine can reach), and 600
    // keys stay under the 1,024 a step keeps.
    let mut limited = false;
    for index in 0..600 {
        let update = json!({"update": {"type": "log", "key": format!("line-{index}"), "data": index}});
        let sent = submit(
            &mut client,
            Operation::InteractionUpdate,
            &format!("burst-{index}"),
            update,
        );
        if sent.error.as_ref().is_some_and(|error| error.code == "rateLimited") {
            limited = true;
            break;
        }
    }
    assert!(limited, "a burst above 100 updates is limited");
    // Updates never complete the step: it still waits for its submission.
    let view = view_of(&mut client, "run-0");
    assert_eq!(view["display"]["status"], "waiting");

    // Beyond the view's newest 20, `view.page` kind `updates` pages the rest, newest first.
    let request_id = view["display"]["request"]["requestId"]
        .as_str()
        .expect("request ID")
        .to_string();
    let (mut before, mut keys) = (None::<i64>, Vec::new());
    loop {
        let mut payload = json!({"kind": "updates", "requestId": request_id, "limit": 30});
        if let Some(before) = before {
            payload["before"] = json!(before);
        }
        let page = receipt(request(&mut client, Operation::ViewPage, Some("run-0"), payload));
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 30);
        keys.extend(items.iter().map(|item| item["key"].as_str().expect("key").to_string()));
        match page.get("nextBefore") {
            Some(next) => before = next.as_i64(),
            None => break,
        }
    }
    assert_eq!(
        keys.last().map(String::as_str),
        Some("overall"),
        "the oldest update comes last"
    );
    assert!(keys.len() > 20, "more than the view holds: {}", keys.len());
    let foreign = request(
        &mut client,
        Operation::ViewPage,
        Some("run-0"),
        json!({"kind": "updates", "requestId": "req-of-another-run"}),
    );
    assert_eq!(foreign.error.expect("refused").code, "invalidRequest");
}
