//! Effect contracts and reviewed recovery in the store (spec "Effects and retry safety"):
//! an interrupted idempotent effect applies again under the same key, a read-back one is
//! observed first, a manual one becomes ambiguous; a key never names two requests; a review
//! settles exactly one ambiguous effect, fenced by the run revision, and a refused review
//! changes nothing.

mod common;

use common::{open_store, snapshot};
use pi_workflows::store::claims::ClaimAuthority;
use pi_workflows::store::effects::{
    self, EFFECT_ATTEMPTS_MAX, EffectRecovery, EffectRequest, Reservation, ReviewResolution,
};
use pi_workflows::store::runs::{self, ParkReason};
use pi_workflows::store::{Store, StoreError};

const SERVER: &str = "server-a";

fn running(store: &Store, run_id: &str) -> ClaimAuthority {
    let new_run = common::new_run(run_id);
    store.write(move |tx| runs::queue_run(tx, &new_run)).expect("queue");
    let id = run_id.to_string();
    let authority = store
        .write(move |tx| runs::start_run(tx, &id, SERVER))
        .expect("start")
        .value;
    let claim = authority.clone();
    store
        .write(move |tx| runs::mark_running(tx, &claim, None))
        .expect("running");
    authority
}

fn request(key: &str, fingerprint: &str, recovery: EffectRecovery) -> EffectRequest {
    EffectRequest {
        effect_type: "ticket.create".to_string(),
        idempotency_key: key.to_string(),
        request_fingerprint: fingerprint.to_string(),
        recovery,
        attempt_id: Some("attempt-1".to_string()),
        request_summary: Some("create a ticket".to_string()),
    }
}

fn reserve(store: &Store, authority: &ClaimAuthority, request: &EffectRequest) -> Result<Reservation, StoreError> {
    let (authority, request) = (authority.clone(), request.clone());
    store
        .write(move |tx| effects::reserve(tx, &authority, None, &request))
        .map(|committed| committed.value)
}

/// The runner died while applying: the server interrupts its effects and parks the run.
fn crash_and_park(store: &Store, authority: &ClaimAuthority, reason: ParkReason) -> usize {
    let authority = authority.clone();
    store
        .write(move |tx| {
            let ambiguous = effects::interrupt_applying(tx, &authority.resource_id)?;
            runs::park_run(tx, &authority, None, reason)?;
            Ok(ambiguous)
        })
        .expect("interrupt and park")
}

fn resume(store: &Store, run_id: &str) -> ClaimAuthority {
    let id = run_id.to_string();
    store.write(move |tx| runs::resume_run(tx, &id, None)).expect("resume");
    running_again(store, run_id)
}

fn text(store: &Store, sql: &str) -> String {
    let sql = sql.to_string();
    store
        .read(move |conn| Ok(conn.query_row(&sql, [], |row| row.get::<_, String>(0))?))
        .expect("query")
}

fn revision(store: &Store, run_id: &str) -> i64 {
    let id = run_id.to_string();
    store
        .read(move |conn| Ok(conn.query_row("SELECT revision FROM runs WHERE run_id = ?1", [id], |row| row.get(0))?))
        .expect("revision")
}

fn review(
    store: &Store,
    run_id: &str,
    effect_id: &str,
    resolution: ReviewResolution,
    expected: Option<i64>,
) -> Result<i64, StoreError> {
    let (id, effect) = (run_id.to_string(), effect_id.to_string());
    store.write(move |tx| runs::review_effect(tx, &id, expected, &effect, resolution, None))
}

#[test]
fn a_pause_while_an_effect_applies_follows_its_contract_like_a_crash() {
    for (recovery, status, resumable) in [
        (EffectRecovery::Idempotent, "pending", true),
        (EffectRecovery::Manual, "ambiguous", false),
    ] {
        let t = open_store();
        let authority = running(&t.store, "run-1");
        reserve(&t.store, &authority, &request("k", "fp-a", recovery)).expect("reserve");
        t.store
            .write(move |tx| runs::pause_claimed(tx, &authority, None))
            .expect("pause");
        assert_eq!(text(&t.store, "SELECT status FROM effects"), status, "{recovery:?}");
        // Resuming an idempotent effect applies it again under its key; a manual one waits
        // for a review (resume is refused, nothing changes).
        let resumed = t.store.write(|tx| runs::resume_run(tx, "run-1", None));
        assert_eq!(resumed.is_ok(), resumable, "{recovery:?}: {resumed:?}");
        if resumable {
            let again = running_again(&t.store, "run-1");
            let reservation = reserve(&t.store, &again, &request("k", "fp-a", recovery)).expect("reserve again");
            assert!(reservation.execute, "applied again with the same key");
        }
    }
}

/// Admit a queued run again (after a resume).
fn running_again(store: &Store, run_id: &str) -> ClaimAuthority {
    let id = run_id.to_string();
    let authority = store
        .write(move |tx| runs::start_run(tx, &id, SERVER))
        .expect("start again")
        .value;
    let claim = authority.clone();
    store
        .write(move |tx| runs::mark_running(tx, &claim, None))
        .expect("running again");
    authority
}

#[test]
fn a_key_never_names_two_requests() {
    let t = open_store();
    let authority = running(&t.store, "run-1");
    let first = reserve(&t.store, &authority, &request("k", "fp-a", EffectRecovery::Idempotent)).expect("reserve");
    assert!(first.execute);
    let before = snapshot(&t.store);
    let err = reserve(&t.store, &authority, &request("k", "fp-b", EffectRecovery::Idempotent))
        .expect_err("another request under the same key");
    assert!(matches!(err, StoreError::EffectRequestChanged { .. }), "{err}");
    assert_eq!(err.refusal_code(), Some("effectRequestChanged"));
    assert_eq!(snapshot(&t.store), before, "a refused reservation changed rows");
    // The same request again is adopted, never executed twice.
    let again = reserve(&t.store, &authority, &request("k", "fp-a", EffectRecovery::Idempotent)).expect("adopt");
    assert!(!again.execute);
    assert_eq!(again.effect_id, first.effect_id);
}

#[test]
fn an_interrupted_idempotent_effect_applies_again_under_its_key() {
    let t = open_store();
    let authority = running(&t.store, "run-1");
    let req = request("k", "fp", EffectRecovery::Idempotent);
    let first = reserve(&t.store, &authority, &req).expect("reserve");
    assert_eq!((first.execute, first.attempt), (true, 1));
    assert_eq!(crash_and_park(&t.store, &authority, ParkReason::WorkerCrashed), 0);
    assert_eq!(text(&t.store, "SELECT status FROM effects"), "pending");
    assert_eq!(text(&t.store, "SELECT outcome FROM effect_attempts"), "interrupted");
    let authority = resume(&t.store, "run-1");
    let second = reserve(&t.store, &authority, &req).expect("reserve again");
    assert_eq!((second.execute, second.attempt, second.observe_first), (true, 2, false));
    assert_eq!(second.effect_id, first.effect_id, "the same effect, the same key");
    assert_eq!(text(&t.store, "SELECT status FROM effects"), "applying");
}

#[test]
fn an_interrupted_read_back_effect_is_observed_first_and_a_manual_one_is_ambiguous() {
    let t = open_store();
    let authority = running(&t.store, "run-1");
    let read_back = request("k-read", "fp", EffectRecovery::ReadBack);
    let manual = request("k-manual", "fp", EffectRecovery::Manual);
    reserve(&t.store, &authority, &read_back).expect("reserve read-back");
    reserve(&t.store, &authority, &manual).expect("reserve manual");
    assert_eq!(crash_and_park(&t.store, &authority, ParkReason::EffectAmbiguous), 1);
    assert_eq!(
        text(
            &t.store,
            "SELECT group_concat(recovery || '=' || status, ',') FROM (SELECT * FROM effects ORDER BY recovery)"
        ),
        "manual=ambiguous,readBack=pending"
    );
    let err = {
        let store = &t.store;
        store
            .write(|tx| runs::resume_run(tx, "run-1", None))
            .expect_err("resume past an ambiguous effect")
    };
    assert!(matches!(err, StoreError::EffectsAmbiguous { count: 1, .. }), "{err}");
    let manual_id = text(&t.store, "SELECT effect_id FROM effects WHERE recovery = 'manual'");
    review(&t.store, "run-1", &manual_id, ReviewResolution::Applied, None).expect("review applied");
    let authority = resume(&t.store, "run-1");
    let observed = reserve(&t.store, &authority, &read_back).expect("reserve read-back again");
    assert_eq!(
        (observed.execute, observed.attempt, observed.observe_first),
        (true, 2, true)
    );
    let adopted = reserve(&t.store, &authority, &manual).expect("the reviewed manual effect");
    assert_eq!((adopted.execute, adopted.status.as_str()), (false, "applied"));
}

#[test]
fn a_review_settles_one_ambiguous_effect_once_and_refusals_change_nothing() {
    let t = open_store();
    let authority = running(&t.store, "run-1");
    let effect = reserve(&t.store, &authority, &request("k", "fp", EffectRecovery::Manual)).expect("reserve");
    // While a runner holds the run, a review is refused.
    let err = review(&t.store, "run-1", &effect.effect_id, ReviewResolution::Retry, None).expect_err("claimed");
    assert!(matches!(err, StoreError::ClaimHeld { .. }), "{err}");
    crash_and_park(&t.store, &authority, ParkReason::EffectAmbiguous);
    let before = snapshot(&t.store);
    let current = revision(&t.store, "run-1");
    let refusals = [
        review(
            &t.store,
            "run-unknown",
            &effect.effect_id,
            ReviewResolution::Applied,
            None,
        )
        .expect_err("unknown run"),
        review(&t.store, "run-1", "no-such-effect", ReviewResolution::Applied, None).expect_err("unknown effect"),
        review(
            &t.store,
            "run-1",
            &effect.effect_id,
            ReviewResolution::Applied,
            Some(current - 1),
        )
        .expect_err("stale"),
    ];
    assert!(matches!(refusals[0], StoreError::RunNotFound { .. }), "{}", refusals[0]);
    assert!(
        matches!(refusals[1], StoreError::EffectNotFound { .. }),
        "{}",
        refusals[1]
    );
    assert!(
        matches!(refusals[2], StoreError::RevisionMismatch { .. }),
        "{}",
        refusals[2]
    );
    assert_eq!(snapshot(&t.store), before, "a refused review changed rows");

    let reviewed = review(
        &t.store,
        "run-1",
        &effect.effect_id,
        ReviewResolution::Retry,
        Some(current),
    )
    .expect("retry");
    assert_eq!(reviewed, current + 1);
    // A second review of the same effect (e.g. a concurrent one) finds it settled.
    let before = snapshot(&t.store);
    let err = review(&t.store, "run-1", &effect.effect_id, ReviewResolution::Applied, None).expect_err("second");
    assert!(matches!(err, StoreError::EffectNotAmbiguous { .. }), "{err}");
    assert_eq!(snapshot(&t.store), before);
    assert_eq!(text(&t.store, "SELECT review FROM effect_attempts"), "retry");
    // The retry is a new numbered attempt, executed without observing.
    let authority = resume(&t.store, "run-1");
    let retried = reserve(&t.store, &authority, &request("k", "fp", EffectRecovery::Manual)).expect("retry");
    assert_eq!(
        (retried.execute, retried.attempt, retried.observe_first),
        (true, 2, false)
    );
}

#[test]
fn an_ended_run_records_what_happened_but_is_never_retried() {
    let t = open_store();
    let authority = running(&t.store, "run-1");
    let effect = reserve(&t.store, &authority, &request("k", "fp", EffectRecovery::Idempotent)).expect("reserve");
    let claim = authority.clone();
    t.store
        .write(move |tx| runs::cancel_claimed(tx, &claim, None))
        .expect("cancel");
    // Cancellation makes even an idempotent effect ambiguous: nothing will apply it again.
    assert_eq!(text(&t.store, "SELECT status FROM effects"), "ambiguous");
    let err = review(&t.store, "run-1", &effect.effect_id, ReviewResolution::Retry, None).expect_err("retry of ended");
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err}");
    review(&t.store, "run-1", &effect.effect_id, ReviewResolution::Failed, None).expect("record failed");
    assert_eq!(text(&t.store, "SELECT status FROM effects"), "rejected");
    assert_eq!(text(&t.store, "SELECT status FROM runs"), "cancelled");
}

#[test]
fn an_effect_interrupted_at_every_attempt_becomes_ambiguous_at_the_bound() {
    let t = open_store();
    let mut authority = running(&t.store, "run-1");
    let req = request("k", "fp", EffectRecovery::Idempotent);
    for attempt in 1..=EFFECT_ATTEMPTS_MAX {
        let reservation = reserve(&t.store, &authority, &req).expect("reserve");
        assert_eq!((reservation.execute, reservation.attempt), (true, attempt));
        crash_and_park(&t.store, &authority, ParkReason::WorkerCrashed);
        authority = resume(&t.store, "run-1");
    }
    let last = reserve(&t.store, &authority, &req).expect("reserve past the bound");
    assert_eq!((last.execute, last.status.as_str()), (false, "ambiguous"));
}
