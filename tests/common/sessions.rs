//! Helpers for origin-session store tests (tests/store_sessions.rs, tests/store_deadlines.rs):
//! an interactive run waiting at a step of session `SESSION`, branch and turn reports, and
//! small reads of the rows they change.

use pi_workflows::decision::DecisionRequest;
use pi_workflows::store::attempts::{self, NewAttempt};
use pi_workflows::store::blobs::put_json;
use pi_workflows::store::claims::ClaimAuthority;
use pi_workflows::store::decisions::NewDecision;
use pi_workflows::store::interactions::{self, InteractionKind, NewInteraction, Submission};
use pi_workflows::store::messages::{self, BranchOutcome, BranchReport};
use pi_workflows::store::runs::{self, ExecutionMode, NewRun};
use pi_workflows::store::session_view::{self, SessionFacts};
use pi_workflows::store::turns::{self, Ownership, TurnOutcome, TurnPhase, TurnReceipt};
use pi_workflows::store::{Store, StoreResult, verify};

use super::new_run;

pub const SESSION: &str = "session-1";
pub const OTHER_SESSION: &str = "session-2";
pub const RUN: &str = "run-1";
pub const REQUEST: &str = "req-1";

// Helpers ----------------------------------------------------------------------------------

pub fn interactive_run(run_id: &str, session: &str) -> NewRun {
    NewRun {
        execution: ExecutionMode::Interactive {
            origin_session_id: session.to_string(),
        },
        ..new_run(run_id)
    }
}

pub fn queue_interactive(store: &Store, run_id: &str, session: &str) {
    let run = interactive_run(run_id, session);
    store.write(move |tx| runs::queue_run(tx, &run)).expect("queue");
}

pub fn claim(store: &Store, run_id: &str) -> ClaimAuthority {
    let run_id = run_id.to_string();
    let authority = store
        .write(move |tx| Ok(runs::start_run(tx, &run_id, "server-1")?.value))
        .expect("start");
    let running = authority.clone();
    store
        .write(move |tx| runs::mark_running(tx, &running, None))
        .expect("running");
    authority
}

/// Start attempt `a-<request>` and request `request` of `kind`: the run waits, unclaimed.
pub fn request(store: &Store, run_id: &str, request_id: &str, kind: InteractionKind) {
    request_timed(store, run_id, request_id, kind, Timing::default());
}

/// A step's time limits as its runner commits them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    /// The model-time budget (agent and assistant steps).
    pub timeout_ms: Option<i64>,
    /// The wall-clock deadline (checkpoints and decisions).
    pub deadline_at: Option<i64>,
    /// A protected decision's `onTimeout` choice (it needs `deadline_at`).
    pub default_choice: Option<&'static str>,
}

/// The contract of a scripted request of `kind`: a protected decision (choices `ship`, and
/// `fix` with text) carries its decision; others a prompt.
pub fn contract_of(kind: InteractionKind, timing: Timing) -> serde_json::Value {
    if kind != InteractionKind::Decision {
        return serde_json::json!({"prompt": "count to three"});
    }
    let mut decision = serde_json::json!({
        "audience": "operator", "title": "Ship it?",
        "presentation": {"schema": "pi-workflows.decision-presentation.v1", "summary": "All checks pass."},
        "choices": [{"id": "ship", "label": "Ship"},
                    {"id": "fix", "label": "Fix first", "input": {"label": "What to fix", "maxLength": 40}}],
    });
    if let Some(deadline) = timing.deadline_at {
        decision["deadlineAt"] = deadline.into();
    }
    if let Some(choice) = timing.default_choice {
        decision["onTimeout"] = serde_json::json!({"choice": choice});
    }
    serde_json::json!({"prompt": "Ship it?", "decision": decision})
}

/// `request` with the attempt's `timing`.
pub fn request_timed(store: &Store, run_id: &str, request_id: &str, kind: InteractionKind, timing: Timing) {
    let authority = claim(store, run_id);
    let request_id = request_id.to_string();
    store
        .write(move |tx| {
            let attempt_id = format!("a-{request_id}");
            let attempt = NewAttempt {
                attempt_id: attempt_id.clone(),
                node_id: "ask".to_string(),
                node_path: "ask".to_string(),
                visit: 1,
                node_type: "agent".to_string(),
                deadline_at: timing.deadline_at,
                timeout_ms: timing.timeout_ms,
                settings_change_number: None,
            };
            attempts::start_attempt(tx, &authority, None, &attempt)?;
            let contract = contract_of(kind, timing);
            let decision = match kind {
                InteractionKind::Decision => Some(NewDecision {
                    request: DecisionRequest::from_contract(&contract)?,
                    subject: serde_json::json!({"commit": "abc123"}),
                }),
                _ => None,
            };
            let interaction = NewInteraction {
                request_id,
                attempt_id,
                kind,
                contract_hash: put_json(tx, &contract, 4096)?,
                deadline_at: timing.deadline_at,
                decision,
            };
            interactions::request(tx, &authority, None, &interaction)
        })
        .expect("request");
}

/// An interactive run waiting at an agent step whose initial message is pending.
pub fn waiting_step(store: &Store) {
    waiting_at(store, InteractionKind::Agent);
}

/// An interactive run waiting at a request of `kind` whose message is pending.
pub fn waiting_at(store: &Store, kind: InteractionKind) {
    queue_interactive(store, RUN, SESSION);
    request(store, RUN, REQUEST, kind);
}

/// The session's only message, reported on the branch as `entry-1` (now `sent`).
pub fn send_only_message(store: &Store) -> String {
    let message = only_message(store);
    branch(store, false, &[(&message, "entry-1")]).expect("sent");
    message
}

pub fn read(store: &Store, session: &str, now: i64) -> SessionFacts {
    let session = session.to_string();
    store
        .read(move |conn| session_view::read_session(conn, &session, now))
        .expect("read session")
}

pub fn view(t: &super::TestStore) -> SessionFacts {
    read(&t.store, SESSION, t.store.now_ms())
}

pub fn branch(store: &Store, idle: bool, found: &[(&str, &str)]) -> StoreResult<BranchOutcome> {
    let found: Vec<(String, String)> = found.iter().map(|(m, e)| (m.to_string(), e.to_string())).collect();
    store.write(move |tx| {
        messages::report_branch(
            tx,
            &BranchReport {
                session_id: SESSION,
                is_idle: idle,
                has_pending_messages: false,
                found: &found,
            },
        )
    })
}

pub fn start(store: &Store, turn: &str, message: &str) -> StoreResult<TurnReceipt> {
    let (turn, phase) = (
        turn.to_string(),
        TurnPhase::Start {
            workflow_message_id: message.to_string(),
        },
    );
    store.write(move |tx| turns::report_turn(tx, SESSION, &turn, &phase))
}

pub fn end(store: &Store, turn: &str, outcome: TurnOutcome) -> StoreResult<TurnReceipt> {
    let turn = turn.to_string();
    let phase = TurnPhase::End {
        outcome,
        response_entry_id: None,
    };
    store.write(move |tx| turns::report_turn(tx, SESSION, &turn, &phase))
}

/// (id, kind, reason, status) of every message of the session, in order.
pub fn messages_of(store: &Store) -> Vec<(String, String, Option<String>, String)> {
    store
        .read(|conn| {
            Ok(conn
                .prepare(
                    "SELECT workflow_message_id, kind, reason, status FROM workflow_messages
                     WHERE target_session_id = ?1 ORDER BY order_number",
                )?
                .query_map([SESSION], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                })?
                .collect::<Result<Vec<_>, _>>()?)
        })
        .expect("messages")
}

pub fn only_message(store: &Store) -> String {
    let all = messages_of(store);
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].0.clone()
}

pub fn value<T: rusqlite::types::FromSql + Send + 'static>(store: &Store, sql: &'static str) -> T {
    store
        .read(move |conn| Ok(conn.query_row(sql, [], |row| row.get(0))?))
        .expect(sql)
}

pub fn revision(store: &Store) -> i64 {
    value(store, "SELECT revision FROM runs WHERE run_id = 'run-1'")
}

pub fn unproductive(store: &Store) -> i64 {
    value(
        store,
        "SELECT unproductive_turn_ends FROM interactive_requests WHERE request_id = 'req-1'",
    )
}

pub fn assert_verified(store: &Store) {
    let report = store.read(verify::verify).expect("verify");
    assert!(report.is_clean(), "{report:?}");
}

/// The step's initial message, sent (found on the branch) and with turn `turn-1` open on it.
pub fn step_in_turn(t: &super::TestStore) -> String {
    waiting_step(&t.store);
    let message = send_only_message(&t.store);
    let started = start(&t.store, "turn-1", &message).expect("start");
    assert_eq!(started.ownership, Ownership::Active);
    message
}

/// Mark the newest pending message sent and open `turn` on it.
pub fn send_and_start(t: &super::TestStore, turn: &str) -> String {
    let pending = messages_of(&t.store)
        .into_iter()
        .rev()
        .find(|(_, _, _, status)| status == "pending")
        .expect("a pending message")
        .0;
    branch(&t.store, false, &[(&pending, &format!("entry-{turn}"))]).expect("sent");
    assert_eq!(
        start(&t.store, turn, &pending).expect("start").ownership,
        Ownership::Active
    );
    pending
}

/// Record a validating submission `sub-1` for the pending request.
pub fn submit_candidate(store: &Store) {
    store
        .write(|tx| {
            let payload_hash = put_json(tx, &serde_json::json!({"n": 3}), 1024)?;
            let submission = Submission {
                run_id: RUN,
                request_id: REQUEST,
                submission_id: "sub-1",
                idempotency_key: "key-1",
                payload_hash: &payload_hash,
            };
            interactions::submit(tx, &submission, None)
        })
        .expect("submit");
}
