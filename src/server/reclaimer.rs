//! The reclaimer (a supervised task under the root, transient: a panic restarts it, a stop
//! ends it): every `interval` it looks for running rows whose claim expired (or is absent)
//! and that no runner of this server serves, and reclaims each through the same per-run
//! path as startup recovery (`recovery::reclaim_run`: a new generation, effects read first,
//! then parked for review or requeued at a boundary for a new runner).
//!
//! What leaves such a row while the server lives: a runner stopped for stalling
//! (`runners/liveness.rs`) gives its claim up; a runner that lost its claim at renewal (e.g.
//! the whole server was suspended past the lease) leaves the run alone; a runner actor that
//! ended without settling leaves its epoch active and its claim to expire.
//!
//! Architecture Invariant: a live claim is never taken. The store proves expiry in the
//! reclaim's own transaction (`Takeover::Expired`); a run whose runner is still registered
//! is skipped even when its claim expired, since that runner stops itself at its next
//! renewal and only then may a new one start. The task holds nothing the store does not
//! know, so a restarted reclaimer simply looks again.

use std::sync::Arc;
use std::time::Duration;

use super::blocking;
use super::empty_look::EmptyLook;
use super::runners::registry::Runners;
use super::runners::settle::{reap_registered, stop_stale_runners};
use super::shared::Shared;
use crate::store::StoreError;
use crate::store::recovery::{self, ExpiredRun};

/// Runs reclaimed in one look at most (the rest wait for the next one).
pub const RECLAIM_BATCH_MAX: usize = 64;

#[derive(Clone)]
pub struct ReclaimArgs {
    pub shared: Arc<Shared>,
    pub runners: Arc<Runners>,
    pub interval: Duration,
}

/// Look every `interval` until the server stops. While the last look found no run starting
/// or running, nothing can expire: the reclaimer then waits for a watched commit (the only
/// way a run starts) and an `interval` after it, so an idle server's reclaimer never wakes.
pub async fn reclaimer(args: ReclaimArgs) -> Result<(), String> {
    let mut commits = args.shared.store.commits();
    let mut no_running_run = EmptyLook::default();
    loop {
        if no_running_run.still_empty(*commits.borrow_and_update()) {
            tokio::select! {
                // A closed channel (the writer gone) falls through to the timed look, whose
                // read reports it.
                _ = commits.changed() => {}
                _ = args.shared.stopped() => return Ok(()),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = args.shared.stopped() => return Ok(()),
        }
        if args.shared.stop_requested().is_some() {
            return Ok(());
        }
        reclaim_once(&args, &mut no_running_run).await;
    }
}

async fn reclaim_once(args: &ReclaimArgs, no_running_run: &mut EmptyLook) {
    let store = &args.shared.store;
    let count = store.commit_count();
    let now = store.now_ms();
    let read = blocking::read(store, move |conn| {
        Ok((
            recovery::expired_runs(conn, now, RECLAIM_BATCH_MAX)?,
            recovery::any_run_running(conn)?,
        ))
    });
    let expired = match read.await {
        Ok((expired, any_running)) => {
            no_running_run.record(count, !any_running);
            expired
        }
        Err(err) => {
            tracing::warn!(error = %err, "expired runs could not be read; looking again later");
            return;
        }
    };
    let mut requeued = false;
    for run in expired {
        if args.runners.runner_for(&run.run_id).is_some() {
            continue;
        }
        requeued |= reclaim(args, run).await;
    }
    if requeued {
        args.shared.wake_scheduler();
    }
}

/// Reclaim one run; true when it was requeued.
async fn reclaim(args: &ReclaimArgs, run: ExpiredRun) -> bool {
    let store = &args.shared.store;
    // An epoch still active here has no runner actor left to stop its processes: stop them
    // (identity-checked) and its registered groups before any new runner may start.
    stop_stale_runners(&run.stale).await;
    for worker in &run.stale {
        reap_registered(store, Some(worker.runner_epoch.clone())).await;
    }
    let (owner, run_id, stale) = (args.shared.server_id.clone(), run.run_id.clone(), run.stale);
    match blocking::write(store, move |tx| recovery::reclaim_expired(tx, &owner, &run_id, &stale)).await {
        Ok(reclaimed) => {
            tracing::info!(
                run_id = %run.run_id,
                generation = reclaimed.generation,
                reason = reclaimed.reason.as_str(),
                requeued = reclaimed.requeued,
                "reclaimed a run whose claim expired"
            );
            reclaimed.requeued
        }
        // Claimed again or ended meanwhile (a new claim, a cancellation): not ours.
        Err(StoreError::ClaimHeld { .. } | StoreError::InvalidTransition { .. }) => false,
        Err(err) => {
            tracing::warn!(run_id = %run.run_id, error = %err, "an expired run was not reclaimed; trying again later");
            false
        }
    }
}
