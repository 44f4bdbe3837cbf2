//! Command receipts: accepted once, adopted on retry, conflicts change nothing, rejections
//! are stored and repeated, and a request ID never names two payloads.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{open_store, snapshot};
use pi_workflows::digest::sha256_hex;
use pi_workflows::store::commands::{self, Accepted, CommandOutcome, CommandReceipt, CommandRequest};
use pi_workflows::store::runs;
use pi_workflows::store::{Store, StoreResult};
use serde_json::json;

fn request(request_id: &str, key: &str, payload: &serde_json::Value) -> CommandRequest {
    // The durable fingerprint covers everything but the request ID.
    let durable = json!({"clientId": "client-1", "idempotencyKey": key, "operation": "run.pause", "payload": payload});
    CommandRequest {
        request_id: request_id.to_string(),
        client_id: "client-1".to_string(),
        operation: "run.pause".to_string(),
        idempotency_key: key.to_string(),
        run_id: Some("run-1".to_string()),
        fingerprint: sha256_hex(&serde_json_canonicalizer::to_vec(&durable).expect("canonical")),
    }
}

/// Pause run-1 as a durable command, counting how often the change really runs.
fn pause(store: &Store, request: CommandRequest, applied: &Arc<AtomicUsize>) -> StoreResult<CommandReceipt> {
    let applied = Arc::clone(applied);
    store.write(move |tx| {
        commands::run_command(tx, &request, |tx| {
            applied.fetch_add(1, Ordering::SeqCst);
            let revision = runs::pause_unclaimed(tx, "run-1", None)?;
            Ok(Accepted {
                revision: Some(revision),
                receipt: json!({"paused": true, "revision": revision}),
            })
        })
    })
}

fn queued_store() -> common::TestStore {
    let t = open_store();
    let new_run = common::new_run("run-1");
    t.store.write(move |tx| runs::queue_run(tx, &new_run)).expect("queue");
    t
}

#[test]
fn a_retry_with_a_new_request_id_adopts_the_stored_receipt() {
    let t = queued_store();
    let applied = Arc::new(AtomicUsize::new(0));
    let payload = json!({"reason": "lunch"});
    let first = pause(&t.store, request("req-1", "key-1", &payload), &applied).expect("first");
    assert_eq!(first.outcome, CommandOutcome::Accepted);
    assert_eq!(first.revision, Some(2));

    let retry = pause(&t.store, request("req-2", "key-1", &payload), &applied).expect("retry");
    assert_eq!(retry.outcome, CommandOutcome::Adopted);
    assert_eq!(retry.receipt, first.receipt);
    assert_eq!(retry.revision, first.revision);
    let again = pause(&t.store, request("req-1", "key-1", &payload), &applied).expect("same request again");
    assert_eq!(again.outcome, CommandOutcome::Adopted);
    assert_eq!(applied.load(Ordering::SeqCst), 1, "the change ran more than once");
}

#[test]
fn another_payload_under_the_same_key_is_a_conflict_and_changes_nothing() {
    let t = queued_store();
    let applied = Arc::new(AtomicUsize::new(0));
    pause(
        &t.store,
        request("req-1", "key-1", &json!({"reason": "lunch"})),
        &applied,
    )
    .expect("first");
    let before = snapshot(&t.store);
    let conflict = pause(
        &t.store,
        request("req-2", "key-1", &json!({"reason": "dinner"})),
        &applied,
    )
    .expect("conflict");
    assert_eq!(conflict.outcome, CommandOutcome::Conflict);
    assert_eq!(conflict.error.as_ref().map(|e| e.code.as_str()), Some("conflict"));
    assert_eq!(snapshot(&t.store), before);
    assert_eq!(applied.load(Ordering::SeqCst), 1);
}

#[test]
fn one_request_id_never_names_two_payloads() {
    let t = queued_store();
    let applied = Arc::new(AtomicUsize::new(0));
    pause(
        &t.store,
        request("req-1", "key-1", &json!({"reason": "lunch"})),
        &applied,
    )
    .expect("first");
    // A retry under a new request ID records that ID too.
    pause(
        &t.store,
        request("req-2", "key-1", &json!({"reason": "lunch"})),
        &applied,
    )
    .expect("adopt");
    let before = snapshot(&t.store);
    for request_id in ["req-1", "req-2"] {
        let reuse = pause(
            &t.store,
            request(request_id, "key-2", &json!({"reason": "other"})),
            &applied,
        )
        .expect("reuse");
        assert_eq!(
            reuse.outcome,
            CommandOutcome::Conflict,
            "{request_id} named a second payload"
        );
    }
    assert_eq!(snapshot(&t.store), before);
}

#[test]
fn a_rejected_command_is_stored_and_repeats_its_error() {
    let t = queued_store();
    let applied = Arc::new(AtomicUsize::new(0));
    pause(&t.store, request("req-1", "key-1", &json!({})), &applied).expect("pause");
    let run_before = t.store.read(|conn| runs::read_run_on(conn, "run-1")).expect("run");
    // Pausing a paused run is refused; its partial work (none here) is rolled back.
    let rejected = pause(&t.store, request("req-2", "key-2", &json!({})), &applied).expect("stored rejection");
    assert_eq!(rejected.outcome, CommandOutcome::Rejected);
    let error = rejected.error.clone().expect("error stored");
    assert_eq!(error.code, "invalidTransition");
    let repeat = pause(&t.store, request("req-3", "key-2", &json!({})), &applied).expect("repeat");
    assert_eq!(repeat.outcome, CommandOutcome::Rejected);
    assert_eq!(repeat.error, Some(error));
    assert_eq!(
        applied.load(Ordering::SeqCst),
        2,
        "the rejected change ran again on retry"
    );
    let run_after = t.store.read(|conn| runs::read_run_on(conn, "run-1")).expect("run");
    assert_eq!(run_after, run_before, "a rejected command changed the run");
}

#[test]
fn invalid_input_and_a_busy_session_are_stored_rejections_not_crashes() {
    use pi_workflows::store::attempts::{self, NewAttempt};
    use pi_workflows::store::runs::ExecutionMode;

    let t = open_store();
    let interactive = |run_id: &str| {
        let mut run = common::new_run(run_id);
        run.execution = ExecutionMode::Interactive {
            origin_session_id: "session-1".to_string(),
        };
        run
    };
    let first = interactive("run-a");
    t.store
        .write(move |tx| runs::queue_run(tx, &first))
        .expect("first interactive run");
    let second = interactive("run-b");
    let err = t
        .store
        .write(move |tx| runs::queue_run(tx, &second))
        .expect_err("the session is reserved");
    assert!(
        matches!(err, pi_workflows::store::StoreError::SessionBusy { .. }),
        "{err}"
    );

    let authority = t
        .store
        .write(|tx| runs::start_run(tx, "run-a", "server"))
        .expect("start")
        .value;
    let live = authority.clone();
    t.store
        .write(move |tx| runs::mark_running(tx, &live, None))
        .expect("live");
    let before = snapshot(&t.store);
    let bad_visit = NewAttempt {
        attempt_id: "attempt-0".to_string(),
        node_id: "n".to_string(),
        node_path: "n".to_string(),
        visit: 0,
        node_type: "compute".to_string(),
        deadline_at: None,
        timeout_ms: None,
        settings_change_number: None,
    };
    let err = t
        .store
        .write(move |tx| attempts::start_attempt(tx, &authority, None, &bad_visit))
        .expect_err("visit 0 is invalid");
    assert!(
        matches!(err, pi_workflows::store::StoreError::InvalidInput { .. }),
        "{err}"
    );
    assert_eq!(snapshot(&t.store), before);
}
