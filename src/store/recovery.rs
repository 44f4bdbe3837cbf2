//! Recovery of running rows whose holder is gone (spec "Recovery", the steps that need no
//! Pi), by one per-run path, `reclaim_run`, used at two moments:
//!
//! - startup (`recover`): once, after the new server took the global lock and the server
//!   lease, before any runner is admitted. Holding the lock proves every older server is
//!   gone, so their run claims are taken over at once, whatever their expiry;
//! - while the server lives (`reclaim_expired`, the `reclaimer` task's step): a running row
//!   whose claim is absent or expired and that no runner of this server serves. The new
//!   claim is only acquired when the store proves, in the same transaction, that the old one
//!   expired: a live claim is never taken.
//!
//! Either way the run ends resumable (queued), parked for review, waiting, or terminal.

use rusqlite::{OptionalExtension, params};

use super::deadlines;
use super::effects;
use super::error::StoreResult;
use super::runs::{self, ParkReason, Takeover};
use super::writer::WriteTx;
use crate::store::workers::{self, WorkerOutcome};

/// Runner epochs in a row a run may lose to a stall (stopped for not answering) before a
/// reclaim parks it `runnerNoProgress` for review instead of requeueing it: a workflow that
/// hangs every time would otherwise be relaunched forever.
pub const STALLS_BEFORE_REVIEW: usize = 2;

/// A runner epoch still recorded active whose runner no actor of this server owns (an older
/// server's, or one whose actor ended without settling), with its recorded start identity.
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
    /// Step intervals an older server left growing (closed: its downtime is no model time).
    pub closed_intervals: usize,
    /// Steps whose time was up at startup, timed out before anything else was scheduled.
    pub timed_out_steps: usize,
    /// Terminal messages of ended interactive runs that had none (made once).
    pub terminal_messages: usize,
    /// Channel sends or edits in flight when the older server (and its adapters) stopped:
    /// now ambiguous, never sent again without an operator's `channel recover`.
    pub ambiguous_channel_attempts: usize,
}

/// How one reclaimed run continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// The claim generation the reclaim took (released again by the park).
    pub generation: i64,
    pub reason: ParkReason,
    /// Queued again for a new runner (a boundary park, not paused).
    pub requeued: bool,
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
/// reclaim every run an older server was running (`reclaim_run`); then requeue every other
/// run parked at a boundary (not paused), e.g. by the older server's own shutdown.
pub fn recover(tx: &WriteTx<'_>, server_id: &str, stale: &[StaleWorker]) -> StoreResult<RecoveryReport> {
    // The timeout path first (spec "Recovery"): the older server's downtime was no model
    // time, and a step whose time ran out is timed out before any other work is scheduled.
    let mut report = RecoveryReport {
        closed_intervals: deadlines::close_all_open(tx)?,
        timed_out_steps: deadlines::time_out_due(tx)?.len(),
        terminal_messages: super::messages::queue_missing_terminals(tx)?,
        ambiguous_channel_attempts: super::channels::interrupt_applying(tx, None)?,
        ..RecoveryReport::default()
    };
    for worker in stale {
        if workers::record_outcome(tx, &worker.runner_epoch, WorkerOutcome::Orphaned, None, None)? {
            report.orphaned_workers += 1;
        }
    }
    for run_id in run_ids(
        tx,
        "SELECT run_id FROM run_queue WHERE status IN ('starting', 'running')",
    )? {
        let reclaimed = reclaim_run(tx, &run_id, server_id, Takeover::OlderServerGone)?;
        report.reclaimed_runs += 1;
        report.ambiguous_runs += usize::from(reclaimed.reason == ParkReason::EffectAmbiguous);
        report.requeued_runs += usize::from(reclaimed.requeued);
    }
    let boundary = "SELECT r.run_id FROM runs r JOIN run_queue q ON q.run_id = r.run_id
                    WHERE r.status = 'running' AND q.status = 'parked' AND r.paused = 0 AND r.status_detail = 'boundary'";
    for run_id in run_ids(tx, boundary)? {
        runs::requeue_parked(tx, &run_id, None)?;
        report.requeued_runs += 1;
    }
    Ok(report)
}

/// The one recovery of a running row whose holder is gone (startup and the reclaimer):
/// take a new claim generation (proved by `takeover`); read effect state first — an effect
/// that was applying follows its contract, and one whose outcome cannot be proved parks the
/// run `effectAmbiguous` (never retried automatically); a run whose last runners stalled
/// [`STALLS_BEFORE_REVIEW`] times in a row parks `runnerNoProgress`; anything else parks at
/// a boundary and is requeued for a new runner from its last durable boundary.
pub fn reclaim_run(tx: &WriteTx<'_>, run_id: &str, owner_id: &str, takeover: Takeover) -> StoreResult<Reclaimed> {
    // A step past its deadline whose runner was stopped for it (or whose server was down past
    // it) is timed out, not interrupted and rerun: its next runner routes on `timed_out`. One
    // with an effect to judge is left to the effect's contract below. (The reclaim proves in
    // this same transaction that the run's holder is gone, or nothing of this commits.)
    let overdue = deadlines::time_out_overdue(tx, run_id)?;
    let authority = runs::reclaim(tx, run_id, owner_id, takeover)?.value;
    let interrupted_ambiguous = effects::interrupt_applying(tx, run_id)?;
    // An ambiguous effect from before also parks it for review: someone must look first.
    let ambiguous = interrupted_ambiguous > 0 || effects::ambiguous_count(tx.conn(), run_id)? > 0;
    let reason = if ambiguous {
        ParkReason::EffectAmbiguous
    } else if overdue == 0
        && workers::consecutive_stalls(tx.conn(), run_id, STALLS_BEFORE_REVIEW)? >= STALLS_BEFORE_REVIEW
    {
        ParkReason::RunnerNoProgress
    } else {
        ParkReason::Boundary
    };
    runs::park_run(tx, &authority, None, reason)?;
    let requeued = reason == ParkReason::Boundary && requeue_boundary(tx, run_id)?;
    Ok(Reclaimed {
        generation: authority.generation,
        reason,
        requeued,
    })
}

/// A running row whose claim is absent or expired, with the runner epochs still recorded
/// active for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredRun {
    pub run_id: String,
    pub stale: Vec<StaleWorker>,
}

/// Running rows whose claim is absent or expired at `now_ms`, longest expired first, at
/// most `limit` (the reclaimer's look; `reclaim_expired` checks expiry again).
pub fn expired_runs(conn: &rusqlite::Connection, now_ms: i64, limit: usize) -> StoreResult<Vec<ExpiredRun>> {
    let run_ids = conn
        .prepare_cached(
            "SELECT q.run_id FROM run_queue q
             LEFT JOIN leases l ON l.resource_type = 'run' AND l.resource_id = q.run_id
             WHERE q.status IN ('starting', 'running') AND (l.expires_at IS NULL OR l.expires_at <= ?1)
             ORDER BY l.expires_at, q.run_id LIMIT ?2",
        )?
        .query_map(params![now_ms, limit as i64], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    let mut expired = Vec::with_capacity(run_ids.len());
    for run_id in run_ids {
        let stale = conn
            .prepare_cached(
                "SELECT runner_epoch, process_start_identity FROM run_workers
                 WHERE run_id = ?1 AND status IN ('starting', 'ready')",
            )?
            .query_map([&run_id], |row| {
                Ok(StaleWorker {
                    runner_epoch: row.get(0)?,
                    process_start_identity: row.get(1)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        expired.push(ExpiredRun { run_id, stale });
    }
    Ok(expired)
}

/// Whether any run is starting or running, claimed or not: with none, no claim can expire
/// (the reclaimer's look finds nothing until a commit starts one).
pub fn any_run_running(conn: &rusqlite::Connection) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(ANY_RUN_RUNNING_SQL)?
        .query_row([], |row| row.get(0))?)
}

const ANY_RUN_RUNNING_SQL: &str = "SELECT EXISTS (SELECT 1 FROM run_queue WHERE status IN ('starting', 'running'))";

/// Reclaim one running row while the server lives (the reclaimer), in one transaction:
/// close the run's `stale` runner epochs as `orphaned` (the caller stopped their processes),
/// then `reclaim_run` proving expiry. A claim that is live again is refused with
/// `ClaimHeld` and nothing changes.
pub fn reclaim_expired(
    tx: &WriteTx<'_>,
    server_id: &str,
    run_id: &str,
    stale: &[StaleWorker],
) -> StoreResult<Reclaimed> {
    for worker in stale {
        workers::record_outcome(tx, &worker.runner_epoch, WorkerOutcome::Orphaned, None, None)?;
    }
    reclaim_run(tx, run_id, server_id, Takeover::Expired)
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
    runs::requeue_parked(tx, run_id, None)?;
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

#[cfg(test)]
mod tests {
    use super::ANY_RUN_RUNNING_SQL;
    use crate::store::query_plans::assert_live_reads_only;

    #[test]
    fn the_reclaimers_running_check_reads_only_live_rows() {
        assert_live_reads_only(&[("any run running", ANY_RUN_RUNNING_SQL)]);
    }
}
