//! Startup recovery (spec "Recovery", the steps that need no Pi). Runs once, after the new
//! server took the global lock and the server lease, before any runner is admitted. Holding
//! the lock proves every older server is gone, so their run claims are taken over at once.
//!
//! Ends with every run resumable (queued), parked for review, waiting, or terminal.

use rusqlite::OptionalExtension;

use super::claims::{self, OwnerType, RUN_CLAIM_LEASE_MS, ResourceType};
use super::effects;
use super::error::StoreResult;
use super::runs::{self, ParkReason};
use super::writer::WriteTx;
use crate::store::workers::{self, WorkerOutcome};

/// A runner epoch an older server left active, with its recorded start identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleWorker {
    pub runner_epoch: String,
    pub process_start_identity: Option<String>,
}

/// What recovery did, in counts (for the log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub orphaned_workers: usize,
    pub reclaimed_runs: usize,
    pub ambiguous_runs: usize,
    pub requeued_runs: usize,
}

/// Step 2 (first half): runner epochs still marked active, whose processes an older server
/// owned. The caller signals each only if its start identity still matches.
pub fn stale_workers(conn: &rusqlite::Connection) -> StoreResult<Vec<StaleWorker>> {
    let workers = conn
        .prepare_cached(
            "SELECT runner_epoch, process_start_identity FROM run_workers WHERE status IN ('starting', 'ready')",
        )?
        .query_map([], |row| {
            Ok(StaleWorker {
                runner_epoch: row.get(0)?,
                process_start_identity: row.get(1)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(workers)
}

/// Steps 2 (second half) to 6 in one transaction: close stale runner epochs as `orphaned`;
/// take over every run an older server was running (new generation); park runs whose
/// effect was applying as `effectAmbiguous` (never retried automatically); park the rest at
/// a boundary; then requeue every run parked at a boundary (not paused) for a new runner.
pub fn recover(tx: &WriteTx<'_>, server_id: &str, stale: &[StaleWorker]) -> StoreResult<RecoveryReport> {
    let mut report = RecoveryReport::default();
    for worker in stale {
        if workers::record_outcome(tx, &worker.runner_epoch, WorkerOutcome::Orphaned, None, None)? {
            report.orphaned_workers += 1;
        }
    }
    for run_id in run_ids(
        tx,
        "SELECT run_id FROM run_queue WHERE status IN ('starting', 'running')",
    )? {
        let authority = claims::take_over(
            tx,
            ResourceType::Run,
            &run_id,
            OwnerType::Host,
            server_id,
            RUN_CLAIM_LEASE_MS,
        )?;
        let ambiguous = effects::mark_applying_ambiguous(tx, &run_id)?;
        let reason = if ambiguous > 0 {
            ParkReason::EffectAmbiguous
        } else {
            ParkReason::Boundary
        };
        runs::park_run(tx, &authority, None, reason)?;
        report.reclaimed_runs += 1;
        report.ambiguous_runs += usize::from(ambiguous > 0);
    }
    let boundary = "SELECT r.run_id FROM runs r JOIN run_queue q ON q.run_id = r.run_id
                    WHERE r.status = 'running' AND q.status = 'parked' AND r.paused = 0 AND r.status_detail = 'boundary'";
    for run_id in run_ids(tx, boundary)? {
        runs::resume_run(tx, &run_id, None)?;
        report.requeued_runs += 1;
    }
    Ok(report)
}

/// Requeue `run_id` if it is parked at a boundary and not paused (its runner was stopped
/// from outside while the server keeps running, e.g. a restart of the runners subtree);
/// true when it was requeued. Any other park stays for review.
pub fn requeue_boundary(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<bool> {
    let parked: Option<String> = tx
        .conn()
        .prepare_cached(
            "SELECT r.run_id FROM runs r JOIN run_queue q ON q.run_id = r.run_id
             WHERE r.run_id = ?1 AND r.status = 'running' AND q.status = 'parked' AND r.paused = 0
               AND r.status_detail = 'boundary'",
        )?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    if parked.is_none() {
        return Ok(false);
    }
    runs::resume_run(tx, run_id, None)?;
    Ok(true)
}

fn run_ids(tx: &WriteTx<'_>, sql: &str) -> StoreResult<Vec<String>> {
    let ids = tx
        .conn()
        .prepare_cached(sql)?
        .query_map([], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}
