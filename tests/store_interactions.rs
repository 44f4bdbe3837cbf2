//! Interactive requests in the store: a run waits only with its request recorded, a
//! submitted candidate is judged by a runner under a new claim, and a waiting attempt can
//! never be finished past a request that is still pending.

mod common;

use common::sessions::{claim, queue_interactive};
use common::{new_run, open_store, snapshot};
use pi_workflows::store::attempts::{self, AttemptOutcome, NewAttempt};
use pi_workflows::store::blobs::put_json;
use pi_workflows::store::claims::ClaimAuthority;
use pi_workflows::store::interactions::{self, InteractionKind, Judged, NewInteraction, Submission, Submitted};
use pi_workflows::store::{Store, StoreError, run_summary, run_view, runs};

const RUN: &str = "run-i";

/// A run whose agent step waits on a pending request, and a submitted candidate that
/// queued it again; returns the claim of the validating runner.
fn validating_run(store: &Store) -> ClaimAuthority {
    store.write(|tx| runs::queue_run(tx, &new_run(RUN))).expect("queue");
    let authority = claim(store, RUN);
    let owned = authority.clone();
    store
        .write(move |tx| {
            let attempt = NewAttempt {
                attempt_id: "a1".to_string(),
                node_id: "ask".to_string(),
                node_path: "ask".to_string(),
                visit: 1,
                node_type: "agent".to_string(),
                deadline_at: None,
                timeout_ms: None,
                settings_change_number: None,
            };
            attempts::start_attempt(tx, &owned, None, &attempt)?;
            let interaction = NewInteraction {
                request_id: "req-1".to_string(),
                attempt_id: "a1".to_string(),
                kind: InteractionKind::Agent,
                contract_hash: put_json(tx, &serde_json::json!({"prompt": "count"}), 1024)?,
                deadline_at: None,
                decision: None,
            };
            interactions::request(tx, &owned, None, &interaction)
        })
        .expect("request");
    let submitted = store
        .write(|tx| {
            let payload_hash = put_json(tx, &serde_json::json!({"n": 2}), 1024)?;
            let submission = Submission {
                run_id: RUN,
                request_id: "req-1",
                submission_id: "sub-1",
                idempotency_key: "key-1",
                payload_hash: &payload_hash,
            };
            interactions::submit(tx, &submission, None)
        })
        .expect("submit");
    assert!(matches!(submitted, Submitted::Recorded { .. }));
    claim(store, RUN)
}

/// The runner accepts `sub-1` as the answer to `req-1`: the request is settled and the
/// attempt completed in one write.
fn accept_candidate(store: &Store, authority: ClaimAuthority) {
    store
        .write(move |tx| {
            let output = put_json(tx, &serde_json::json!({"n": 2}), 1024)?;
            let judged = Judged {
                request_id: "req-1",
                submission_id: "sub-1",
                receipt_hash: &output,
            };
            interactions::accept(tx, &authority, None, &judged)
        })
        .expect("accept");
}

/// What a status poll, a run view and the contract read show of the run's pending request.
fn pending_reads(
    store: &Store,
) -> (
    run_summary::RunSummary,
    run_view::RunViewFacts,
    Option<serde_json::Value>,
) {
    store
        .read(|conn| {
            Ok((
                run_summary::run_summary(conn, RUN)?,
                run_view::run_view_facts(conn, RUN, 10)?,
                run_summary::pending_contract(conn, RUN)?,
            ))
        })
        .expect("read")
}

#[test]
fn a_waiting_attempt_cannot_be_finished_past_its_pending_request() {
    let test = open_store();
    let authority = validating_run(&test.store);
    let before = snapshot(&test.store);
    let owned = authority.clone();
    let refused = test.store.write(move |tx| {
        let outcome = AttemptOutcome::Completed { output: None };
        attempts::finish_attempt(tx, &owned, None, "a1", &outcome)
    });
    assert!(
        matches!(refused, Err(StoreError::AttemptNotActive { .. })),
        "{refused:?}"
    );
    assert_eq!(snapshot(&test.store), before, "a refused finish changes nothing");

    // The runner's verdict settles the request and completes the attempt in one write.
    accept_candidate(&test.store, authority);
    let conn = rusqlite::Connection::open(test.dir.path().join("state.sqlite")).expect("db");
    let row = |sql: &str| -> String { conn.query_row(sql, [], |row| row.get(0)).expect(sql) };
    assert_eq!(
        row("SELECT status FROM node_attempts WHERE attempt_id = 'a1'"),
        "completed"
    );
    assert_eq!(row("SELECT status FROM interactive_requests"), "settled");
    assert_eq!(row("SELECT outcome FROM interactive_submissions"), "accepted");
}

/// What status polls, run lists and run views read of the pending request: the request, its
/// kind and its contract while it is pending, nothing once the runner accepted an answer.
#[test]
fn reads_name_the_pending_request_until_it_is_settled() {
    let test = open_store();
    let authority = validating_run(&test.store);
    let (summary, facts, contract) = pending_reads(&test.store);
    let pending = summary.pending_request.expect("a waiting run names its request");
    assert_eq!((pending.request_id.as_str(), pending.kind.as_str()), ("req-1", "agent"));
    let request = facts.pending_request.expect("the run view names the request");
    assert_eq!(request.request_id, "req-1");
    assert_eq!(request.attempt.map(|attempt| attempt.attempt_id).as_deref(), Some("a1"));
    assert_eq!(contract, Some(serde_json::json!({"prompt": "count"})));

    accept_candidate(&test.store, authority);
    let (summary, facts, contract) = pending_reads(&test.store);
    assert_eq!(summary.pending_request, None, "a settled request is not pending");
    assert!(facts.pending_request.is_none());
    assert_eq!(contract, None);
}

#[test]
fn a_rejected_candidate_leaves_the_request_pending_and_the_run_waiting() {
    let test = open_store();
    let authority = validating_run(&test.store);
    test.store
        .write(move |tx| {
            let error = put_json(
                tx,
                &serde_json::json!({"code": "invalid", "message": "n must be odd"}),
                1024,
            )?;
            let judged = Judged {
                request_id: "req-1",
                submission_id: "sub-1",
                receipt_hash: &error,
            };
            interactions::reject(tx, &authority, None, &judged)
        })
        .expect("reject");
    let conn = rusqlite::Connection::open(test.dir.path().join("state.sqlite")).expect("db");
    let row = |sql: &str| -> String { conn.query_row(sql, [], |row| row.get(0)).expect(sql) };
    assert_eq!(row("SELECT status FROM runs"), "waiting");
    assert_eq!(row("SELECT status FROM interactive_requests"), "pending");
    assert_eq!(row("SELECT outcome FROM interactive_submissions"), "rejected");
    assert_eq!(row("SELECT status FROM node_attempts"), "waiting");
    let holders: i64 = conn
        .query_row(
            "SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .expect("leases");
    assert_eq!(holders, 0, "a waiting run holds no claim");
}

fn follow_up_states(store: &Store, run_id: &str) -> Vec<String> {
    let run_id = run_id.to_string();
    store
        .read(move |conn| {
            Ok(conn
                .prepare("SELECT source_id || ' ' || status FROM workflow_messages WHERE run_id = ?1 AND kind = 'followUp' ORDER BY order_number")?
                .query_map([run_id], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()?)
        })
        .expect("read")
}

#[test]
fn follow_ups_queue_in_order_withdraw_and_die_with_a_failed_run() {
    use pi_workflows::store::messages;
    let t = open_store();
    queue_interactive(&t.store, "run-i", "session-1");
    t.store
        .write(|tx| runs::queue_run(tx, &new_run("run-h")))
        .expect("headless");
    let revision_before: i64 = t
        .store
        .read(|conn| Ok(conn.query_row("SELECT revision FROM runs WHERE run_id = 'run-i'", [], |r| r.get(0))?))
        .expect("revision");
    for id in ["follow-up-a", "follow-up-b"] {
        t.store
            .write(move |tx| {
                let hash = put_json(tx, &serde_json::json!({"prompt": id}), 1024)?;
                messages::queue_follow_up(tx, "run-i", id, &hash).map(|_| ())
            })
            .expect("queue");
    }
    assert_eq!(
        follow_up_states(&t.store, "run-i"),
        ["follow-up-a pending", "follow-up-b pending"]
    );
    let revision_after: i64 = t
        .store
        .read(|conn| Ok(conn.query_row("SELECT revision FROM runs WHERE run_id = 'run-i'", [], |r| r.get(0))?))
        .expect("revision");
    assert_eq!(
        revision_before, revision_after,
        "no run transition: a live runner is not fenced"
    );

    let headless = t.store.write(|tx| {
        let hash = put_json(tx, &serde_json::json!({"prompt": "x"}), 1024)?;
        messages::queue_follow_up(tx, "run-h", "follow-up-c", &hash).map(|_| ())
    });
    assert!(matches!(headless, Err(StoreError::InvalidInput { .. })), "{headless:?}");

    t.store
        .write(|tx| messages::remove_follow_up(tx, "run-i", "follow-up-a"))
        .expect("remove");
    let again = t
        .store
        .write(|tx| messages::remove_follow_up(tx, "run-i", "follow-up-a"));
    assert!(
        matches!(again, Err(StoreError::InvalidInput { .. })),
        "only a pending one can go"
    );
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, "run-i", None).map(|_| ()))
        .expect("cancel");
    assert_eq!(
        follow_up_states(&t.store, "run-i"),
        ["follow-up-a cancelled", "follow-up-b cancelled"],
        "a cancelled run cancels its pending follow-ups"
    );
    let late = t.store.write(|tx| {
        let hash = put_json(tx, &serde_json::json!({"prompt": "late"}), 1024)?;
        messages::queue_follow_up(tx, "run-i", "follow-up-d", &hash).map(|_| ())
    });
    assert!(
        matches!(late, Err(StoreError::InvalidInput { .. })),
        "not after a cancelled run"
    );
}
