//! The origin-session operations on the real server (docs/SESSIONS.md): a coordinator's view
//! names the next eligible step message, a second coordinator fences the first, a branch
//! report marks a message sent and re-presents it at most once after a branch change, a turn
//! shows the waiting run as running, and Escape (an aborted turn) pauses the run without a
//! second command. The runner is the scripted test runner (its agent step requests an
//! interaction and exits, as a real interactive step does).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_workflows::client::Client;
use pi_workflows::protocol::{EventKind, JsonObject, Operation, Outcome, Response};
use serde_json::{Value, json};

use common::{pi_workflows, wait_for_db};

const SESSION: &str = "session-0b1c";
const EVENT_WAIT: Duration = Duration::from_secs(20);

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    /// One interactive run of `SESSION` whose runner requests an agent interaction at step 1.
    fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("piws").tempdir_in("/tmp").expect("dir");
        let runs = [("run-0".to_string(), Some(SESSION.to_string()))];
        common::queue_runs_with_definition(dir.path(), &runs, 3);
        let script = "steps=3,checkpoint-at=1,request-kind=agent,verdict=accept";
        let out = pi_workflows(dir.path(), &["server", "start"], script);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        wait_for_db(
            dir.path(),
            "the run waits for its agent step",
            "SELECT count(*) FROM runs WHERE status = 'waiting'",
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.path().join("server").join("server.sock")
    }

    fn client(&self) -> Client {
        Client::connect(&self.socket()).expect("connect")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => panic!("an object"),
    }
}

fn accepted(response: &Response) -> &JsonObject {
    assert!(
        matches!(response.outcome, Outcome::Accepted | Outcome::Adopted),
        "{:?} {:?}",
        response.outcome,
        response.error
    );
    response.receipt.as_ref().expect("receipt")
}

fn code(response: &Response) -> Option<&str> {
    response.error.as_ref().map(|error| error.code.as_str())
}

/// Watch the session as its coordinator: the epoch and the client holding the subscription.
fn coordinate(server: &Server) -> (Client, u64) {
    let mut client = server.client();
    let payload = object(json!({"sessionId": SESSION, "coordinator": true}));
    let response = client.request(Operation::ViewSessionWatch, payload).expect("watch");
    let epoch = accepted(&response)["epoch"].as_u64().expect("an epoch");
    (client, epoch)
}

/// One snapshot shows one moment: the active run shows the origin turn's activity exactly
/// when the session has an open turn (a view read in pieces once showed a turn's run running
/// beside no open turn).
fn assert_consistent(view: &Value) {
    let turn_activity = view["activeRun"]["display"]["activity"]["kind"] == "originTurn";
    assert_eq!(turn_activity, !view["openTurn"].is_null(), "{view}");
}

/// The next session view event that satisfies `want` (every snapshot looked at is checked).
fn view_where(client: &mut Client, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + EVENT_WAIT;
    let mut last = Value::Null;
    for event in client.take_queued_events() {
        if event.event != EventKind::SessionSnapshot {
            continue;
        }
        assert_consistent(&event.payload["view"]);
        if want(&event.payload["view"]) {
            return event.payload["view"].clone();
        }
    }
    while Instant::now() < deadline {
        let Some(event) = client.next_event(Duration::from_millis(500)).expect("event") else {
            continue;
        };
        if event.event != EventKind::SessionSnapshot {
            continue;
        }
        last = event.payload["view"].clone();
        assert_consistent(&last);
        if want(&last) {
            return last;
        }
    }
    panic!("no session view where {what} within {EVENT_WAIT:?}; last: {last}");
}

fn report_branch(client: &mut Client, epoch: u64, found: Value) -> Response {
    let payload = object(json!({"sessionId": SESSION, "epoch": epoch, "isIdle": true,
                                "hasPendingMessages": false, "found": found}));
    client
        .request(Operation::WorkflowMessageReportBranch, payload)
        .expect("report branch")
}

fn report_turn(client: &mut Client, epoch: u64, turn: Value) -> Response {
    let mut payload = object(json!({"sessionId": SESSION, "epoch": epoch}));
    payload.extend(object(turn));
    client
        .request(Operation::WorkflowTurnReport, payload)
        .expect("report turn")
}

#[test]
fn only_the_active_coordinator_sees_the_next_message_and_may_report() {
    let server = Server::start();
    let (mut first, first_epoch) = coordinate(&server);
    let view = view_where(&mut first, "a pending step is eligible", |view| {
        view["nextEligible"].is_string()
    });
    let messages = view["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{view}");
    assert_eq!(messages[0]["kind"], "step");
    assert_eq!(messages[0]["reason"], "initial");
    assert_eq!(view["nextEligible"], messages[0]["workflowMessageId"]);
    assert_eq!(view["activeRun"]["runId"], "run-0");
    assert_eq!(view["activeRun"]["display"]["status"], "waiting");

    let (mut second, second_epoch) = coordinate(&server);
    assert!(second_epoch > first_epoch);
    view_where(&mut second, "the new coordinator sees the message", |view| {
        view["nextEligible"].is_string() && view["coordinator"]["active"] == true
    });
    let fenced = view_where(&mut first, "the old coordinator is fenced", |view| {
        view["coordinator"]["active"] == false
    });
    assert_eq!(fenced["nextEligible"], Value::Null);
    let refused = report_branch(&mut first, first_epoch, json!([]));
    assert_eq!(code(&refused), Some("coordinatorFenced"), "{:?}", refused.error);
    // A plain watcher (the widget of another Pi, `piw`) sees the view but never the next message.
    let mut watcher = server.client();
    let payload = object(json!({"sessionId": SESSION}));
    let watched = watcher.request(Operation::ViewSessionWatch, payload).expect("watch");
    assert!(accepted(&watched).get("epoch").is_none());
    let seen = view_where(&mut watcher, "a view", |view| view["messages"].is_array());
    assert_eq!(seen["nextEligible"], Value::Null);
    assert_eq!(seen["coordinator"], Value::Null);
}

#[test]
fn a_branch_report_marks_a_message_sent_and_re_presents_it_once_after_a_branch_change() {
    let server = Server::start();
    let (mut client, epoch) = coordinate(&server);
    let view = view_where(&mut client, "a pending step", |view| view["nextEligible"].is_string());
    let message_id = view["nextEligible"].as_str().expect("id").to_string();
    let sent = report_branch(
        &mut client,
        epoch,
        json!([{"workflowMessageId": message_id, "piEntryId": "a1b2c3d4"}]),
    );
    assert_eq!(accepted(&sent)["sent"], json!([message_id]));
    let view = view_where(&mut client, "the message is sent", |view| {
        view["messages"][0]["status"] == "sent"
    });
    assert_eq!(view["messages"][0]["piEntryId"], "a1b2c3d4");
    assert_eq!(view["nextEligible"], Value::Null, "a sent step is not sent again");

    // The branch changed (`/tree`): the step's entry is gone, so it is presented once more.
    let moved = report_branch(&mut client, epoch, json!([]));
    let created = accepted(&moved)["created"].as_array().expect("created").clone();
    assert_eq!(created.len(), 1, "{moved:?}");
    let again = report_branch(&mut client, epoch, json!([]));
    assert_eq!(accepted(&again)["created"], json!([]), "a repeat creates nothing");
    let view = view_where(&mut client, "a resumed step is eligible", |view| {
        view["nextEligible"] == created[0]
    });
    let resumed = view["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|message| message["workflowMessageId"] == created[0])
        .expect("the new message in the window")
        .clone();
    assert_eq!(resumed["reason"], "resumed");
    // A report may only name messages of this session's window.
    let foreign = report_branch(
        &mut client,
        epoch,
        json!([{"workflowMessageId": "msg-not-ours-1", "piEntryId": "ffff0000"}]),
    );
    assert_eq!(foreign.outcome, Outcome::Rejected, "{:?}", foreign.error);
}

#[test]
fn a_turn_shows_the_waiting_run_running_and_escape_pauses_it() {
    let server = Server::start();
    let (mut client, epoch) = coordinate(&server);
    let view = view_where(&mut client, "a pending step", |view| view["nextEligible"].is_string());
    let message_id = view["nextEligible"].as_str().expect("id").to_string();
    accepted(&report_branch(
        &mut client,
        epoch,
        json!([{"workflowMessageId": message_id, "piEntryId": "a1b2c3d4"}]),
    ));
    let started = report_turn(
        &mut client,
        epoch,
        json!({"turnId": "turn-1", "phase": "start", "workflowMessageId": message_id}),
    );
    assert_eq!(accepted(&started)["ownership"], "active");
    let repeat = report_turn(
        &mut client,
        epoch,
        json!({"turnId": "turn-1", "phase": "start", "workflowMessageId": message_id}),
    );
    assert_eq!(accepted(&repeat)["ownership"], "active", "a repeat adopts");
    let view = view_where(&mut client, "the turn shows the run running", |view| {
        view["activeRun"]["display"]["status"] == "running"
    });
    assert_eq!(view["openTurn"]["turnId"], "turn-1");
    assert_eq!(view["activeRun"]["display"]["activity"]["kind"], "originTurn");

    // Escape: one aborted end report pauses the run; no pause command is sent.
    let ended = report_turn(
        &mut client,
        epoch,
        json!({"turnId": "turn-1", "phase": "end", "outcome": "aborted"}),
    );
    assert_eq!(accepted(&ended)["ownership"], "settled");
    let view = view_where(&mut client, "the run is paused", |view| {
        view["activeRun"]["display"]["status"] == "paused"
    });
    assert_eq!(view["openTurn"], Value::Null);
    // While paused, the model's submissions and updates are refused and change nothing.
    let coordinator = json!({"sessionId": SESSION, "epoch": epoch});
    let submitted = client
        .request_for(
            Operation::InteractionSubmit,
            Some("run-0"),
            object(json!({"output": {"n": 1}, "coordinator": coordinator})),
        )
        .expect("submit");
    assert_eq!(submitted.outcome, Outcome::Rejected, "{:?}", submitted.error);
    let updated = client
        .request_for(
            Operation::InteractionUpdate,
            Some("run-0"),
            object(json!({"update": {"type": "progress", "key": "k", "data": 1}, "coordinator": coordinator})),
        )
        .expect("update");
    assert_eq!(updated.outcome, Outcome::Rejected, "{:?}", updated.error);
    // A stale turn ID changes nothing.
    let stale = report_turn(
        &mut client,
        epoch,
        json!({"turnId": "turn-0", "phase": "end", "outcome": "completed"}),
    );
    assert_eq!(accepted(&stale)["ownership"], "absent");

    // Resume re-presents the step exactly once.
    let resumed = client
        .request_for(Operation::RunResume, Some("run-0"), JsonObject::new())
        .expect("resume");
    accepted(&resumed);
    let view = view_where(&mut client, "a resumed step is eligible", |view| {
        view["nextEligible"].is_string() && view["nextEligible"] != json!(message_id)
    });
    let pending: Vec<&Value> = view["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["status"] == "pending")
        .collect();
    assert_eq!(pending.len(), 1, "{view}");
    assert_eq!(pending[0]["reason"], "resumed");
}
