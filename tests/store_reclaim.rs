//! The reclaim of a running row while the server lives (`recovery::reclaim_expired`, the
//! reclaimer's step): a live claim is never taken and a refused reclaim changes nothing; an
//! expired (or given-up) claim is taken under a new generation that fences the old holder,
//! and the run is requeued at a boundary — or parked for review once its runners stalled
//! `STALLS_BEFORE_REVIEW` times in a row.

mod common;

use pi_workflows::store::claims::{self, ClaimAuthority, RUN_CLAIM_LEASE_MS};
use pi_workflows::store::recovery::{self, Reclaimed, STALLS_BEFORE_REVIEW};
use pi_workflows::store::runs::{self, ParkReason, QueueStatus, RunStatus};
use pi_workflows::store::workers::{self, NewWorker, WorkerOutcome};
use pi_workflows::store::{StoreError, WriteTx};

const RUN: &str = "run-1";

fn started(t: &common::TestStore) -> ClaimAuthority {
    let new_run = common::new_run(RUN);
    t.store.write(move |tx| runs::queue_run(tx, &new_run)).expect("queue");
    t.store
        .write(|tx| runs::start_run(tx, RUN, "server-a"))
        .expect("start")
        .value
}

fn reclaim(t: &common::TestStore) -> Result<Reclaimed, StoreError> {
    t.store.write(|tx| recovery::reclaim_expired(tx, "server-a", RUN, &[]))
}

/// A runner epoch of generation `generation` that became ready and ended with `outcome`.
fn ended_runner(tx: &WriteTx<'_>, epoch: &str, generation: i64, outcome: WorkerOutcome) {
    let worker = NewWorker {
        runner_epoch: epoch.to_string(),
        run_id: RUN.to_string(),
        generation,
        server_epoch: 1,
        launch_envelope_hash: "a".repeat(64),
    };
    workers::record_launch(tx, &worker).expect("launch");
    assert!(workers::record_ready(tx, epoch, tx.now_ms()).expect("ready"));
    workers::record_outcome(tx, epoch, outcome, None, Some(9)).expect("outcome");
}

#[test]
fn a_live_claim_is_never_reclaimed_and_the_refusal_changes_nothing() {
    let t = common::open_store();
    started(&t);
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS - 1);
    let before = common::snapshot(&t.store);
    assert!(matches!(reclaim(&t), Err(StoreError::ClaimHeld { .. })));
    assert_eq!(common::snapshot(&t.store), before);
    let now = t.store.now_ms();
    let expired = t
        .store
        .read(move |conn| recovery::expired_runs(conn, now, 8))
        .expect("expired");
    assert!(expired.is_empty(), "{expired:?}");
}

#[test]
fn an_expired_claim_is_reclaimed_under_a_new_generation_and_the_run_requeued() {
    let t = common::open_store();
    let old = started(&t);
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS);
    let now = t.store.now_ms();
    let expired = t
        .store
        .read(move |conn| recovery::expired_runs(conn, now, 8))
        .expect("expired");
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].run_id, RUN);
    let reclaimed = reclaim(&t).expect("reclaim");
    assert_eq!(
        reclaimed,
        Reclaimed {
            generation: old.generation + 1,
            reason: ParkReason::Boundary,
            requeued: true
        }
    );
    let run = t.store.read(|conn| runs::read_run_on(conn, RUN)).expect("run");
    assert_eq!((run.status, run.queue), (RunStatus::Queued, QueueStatus::Queued));
    // The old holder is fenced: it can neither renew nor write.
    let renewed = t.store.write(move |tx| claims::renew(tx, &old, RUN_CLAIM_LEASE_MS));
    assert!(matches!(renewed, Err(StoreError::ClaimLost(_))), "{renewed:?}");
}

#[test]
fn a_claim_given_up_by_its_holder_is_reclaimed_at_once_and_only_the_holder_can_give_it_up() {
    let t = common::open_store();
    let holder = started(&t);
    let forged = holder.with_forged_token_for_test().expect("forge");
    let refused = t.store.write(move |tx| claims::expire_now(tx, &forged));
    assert!(matches!(refused, Err(StoreError::ClaimLost(_))), "{refused:?}");
    assert!(matches!(reclaim(&t), Err(StoreError::ClaimHeld { .. })));
    let given_up = holder.clone();
    t.store
        .write(move |tx| claims::expire_now(tx, &given_up))
        .expect("give up");
    // Renewed by `start_run` this millisecond: the claim lapses the next one.
    assert!(matches!(reclaim(&t), Err(StoreError::ClaimHeld { .. })));
    t.clock.advance_ms(1);
    assert_eq!(reclaim(&t).expect("reclaim").generation, holder.generation + 1);
    // A given-up claim is not live again for its old holder.
    let renewed = t.store.write(move |tx| claims::renew(tx, &holder, RUN_CLAIM_LEASE_MS));
    assert!(matches!(renewed, Err(StoreError::ClaimLost(_))), "{renewed:?}");
}

#[test]
fn runners_that_stalled_in_a_row_park_the_run_for_review_instead_of_requeueing_it() {
    let t = common::open_store();
    let holder = started(&t);
    // One stall after an ordinary end, then a second stall in a row.
    let generation = holder.generation;
    t.store
        .write(move |tx| {
            ended_runner(tx, "e1-a", generation, WorkerOutcome::TimedOut);
            ended_runner(tx, "e1-b", generation, WorkerOutcome::Crashed);
            for index in 0..STALLS_BEFORE_REVIEW {
                ended_runner(tx, &format!("e1-s{index}"), generation, WorkerOutcome::TimedOut);
            }
            claims::expire_now(tx, &holder)
        })
        .expect("stalls");
    t.clock.advance_ms(1);
    let reclaimed = reclaim(&t).expect("reclaim");
    assert_eq!(reclaimed.reason, ParkReason::RunnerNoProgress);
    assert!(!reclaimed.requeued);
    let run = t.store.read(|conn| runs::read_run_on(conn, RUN)).expect("run");
    assert_eq!((run.status, run.queue), (RunStatus::Running, QueueStatus::Parked));
    assert_eq!(run.detail.as_deref(), Some("runnerNoProgress"));
}
