//! Checkpoint continuations in the store (docs/STATE.md `settle_by_continuation`): an
//! answered checkpoint settles its run (completed, detail `continued`, the answer as the
//! checkpoint's output, no terminal message) and queues one continuation run in the same
//! root tree and session, which takes the pending follow-ups; every refusal changes nothing.

mod common;

use common::sessions::*;
use common::{open_store, snapshot};
use pi_workflows::store::blobs::put_json;
use pi_workflows::store::continuations::{self, CheckpointAnswer, Continued};
use pi_workflows::store::interactions::{InteractionKind, Submission};
use pi_workflows::store::{Store, StoreError, StoreResult, messages, runs, verify};

const CONTINUATION: &str = "run-2";

fn answer(store: &Store, key: &'static str, continuation: &'static str) -> StoreResult<Continued> {
    store.write(move |tx| {
        let payload_hash = put_json(tx, &serde_json::json!({"approved": true}), 1024)?;
        let answer = CheckpointAnswer {
            answer: Submission {
                run_id: RUN,
                request_id: REQUEST,
                submission_id: &format!("sub-{key}"),
                idempotency_key: key,
                payload_hash: &payload_hash,
            },
            continuation_run_id: continuation,
        };
        continuations::answer_checkpoint(tx, &answer, None)
    })
}

fn row(store: &Store, sql: &'static str) -> String {
    value(store, sql)
}

#[test]
fn an_answer_settles_the_run_and_queues_one_continuation_in_its_tree_and_session() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Checkpoint);
    t.store
        .write(|tx| {
            let hash = put_json(tx, &serde_json::json!({"prompt": "then tidy up"}), 1024)?;
            messages::queue_follow_up(tx, RUN, "follow-up-a", &hash).map(|_| ())
        })
        .expect("follow-up");
    let continued = answer(&t.store, "key-1", CONTINUATION).expect("answer");
    assert_eq!(continued.continuation_run_id, CONTINUATION);
    assert_eq!(
        row(
            &t.store,
            "SELECT status || ' ' || status_detail FROM runs WHERE run_id = 'run-1'"
        ),
        "completed continued"
    );
    assert_eq!(
        row(
            &t.store,
            "SELECT CAST(b.content AS TEXT) FROM node_attempts a JOIN blobs b ON b.blob_hash = a.output_hash WHERE a.attempt_id = 'a-req-1'"
        ),
        r#"{"approved":true}"#,
        "the answer is the checkpoint's output"
    );
    assert_eq!(row(&t.store, "SELECT status FROM interactive_requests"), "settled");
    assert_eq!(
        row(
            &t.store,
            "SELECT origin || ' ' || parent_run_id || ' ' || parent_attempt_id || ' ' || root_run_id || ' ' || status
             FROM runs WHERE run_id = 'run-2'"
        ),
        "continuation run-1 a-req-1 run-1 queued"
    );
    assert_eq!(
        row(
            &t.store,
            "SELECT origin_session_id FROM run_bindings WHERE run_id = 'run-2'"
        ),
        SESSION,
        "the continuation holds the same session"
    );
    // The parent reports no outcome (its continuation will) and its follow-up moved on.
    let messages = messages_of(&t.store);
    assert!(
        messages
            .iter()
            .all(|(_, kind, _, status)| kind != "terminal" || status != "pending"),
        "{messages:?}"
    );
    assert_eq!(
        row(&t.store, "SELECT run_id FROM workflow_messages WHERE kind = 'followUp'"),
        CONTINUATION
    );
    let facts = view(&t);
    assert_eq!(facts.active_run_id.as_deref(), Some(CONTINUATION));
    assert_eq!(facts.retained_terminal_run_id, None);
    let summary = t
        .store
        .read(|conn| pi_workflows::store::run_summary::run_summary(conn, RUN))
        .expect("summary");
    assert_eq!(summary.continued_as.as_deref(), Some(CONTINUATION));
    assert_verified(&t.store);
}

#[test]
fn refusals_change_nothing() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Checkpoint);
    // The continuation's run ID is taken.
    queue_interactive(&t.store, "run-taken", OTHER_SESSION);
    let taken = snapshot(&t.store);
    let exists = answer(&t.store, "key-1", "run-taken");
    assert!(matches!(exists, Err(StoreError::RunExists { .. })), "{exists:?}");
    assert_eq!(snapshot(&t.store), taken);
    // Paused: no answer lands.
    t.store.write(|tx| runs::pause_unclaimed(tx, RUN, None)).expect("pause");
    let paused_state = snapshot(&t.store);
    let paused = answer(&t.store, "key-2", CONTINUATION);
    assert!(
        matches!(paused, Err(StoreError::InvalidTransition { .. })),
        "{paused:?}"
    );
    assert_eq!(snapshot(&t.store), paused_state);
}

#[test]
fn a_checkpoint_is_answered_only_by_its_continuation_and_an_agent_step_never_is() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Checkpoint);
    let before = snapshot(&t.store);
    let in_place = t.store.write(|tx| {
        let payload_hash = put_json(tx, &serde_json::json!({"approved": true}), 1024)?;
        let submission = Submission {
            run_id: RUN,
            request_id: REQUEST,
            submission_id: "sub-x",
            idempotency_key: "key-x",
            payload_hash: &payload_hash,
        };
        pi_workflows::store::interactions::submit(tx, &submission, None)
    });
    assert!(matches!(in_place, Err(StoreError::InvalidInput { .. })), "{in_place:?}");
    assert_eq!(snapshot(&t.store), before, "no in-place answer");

    let agent = open_store();
    waiting_at(&agent.store, InteractionKind::Agent);
    let before = snapshot(&agent.store);
    let refused = answer(&agent.store, "key-1", CONTINUATION);
    assert!(matches!(refused, Err(StoreError::InvalidInput { .. })), "{refused:?}");
    assert_eq!(snapshot(&agent.store), before);
    // A second answer finds no pending checkpoint.
    answer(&t.store, "key-1", CONTINUATION).expect("answer");
    let again = answer(&t.store, "key-2", "run-3");
    assert!(matches!(again, Err(StoreError::InvalidInput { .. })), "{again:?}");
    let report = t.store.read(verify::verify).expect("verify");
    assert!(report.is_clean(), "{report:?}");
}
