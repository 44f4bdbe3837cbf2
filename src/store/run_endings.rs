//! How a run ends: the terminal facts every ending writes in the same transaction (run and
//! queue status, the unfinished attempt, pending interactions and decisions, unsettled
//! effects, pending messages, open origin-session turns, the terminal message). Only `runs` transitions call these, inside their protected
//! or unclaimed write.

use rusqlite::params;

use super::attempts::{self, AttemptStatus};
use super::claims::{self, ClaimAuthority};
use super::effects;
use super::error::StoreResult;
use super::runs::{
    FailureClass, QueueStatus, RunStatus, set_paused, set_queue_status, set_result_hashes, set_run_status,
};
use super::writer::WriteTx;
use crate::decision::Provenance;

/// `runs.status_detail` of a completed run settled by its continuation.
pub const CONTINUED_DETAIL: &str = "continued";

/// How a run ends.
pub(super) enum Ending {
    Completed,
    /// Settled by its continuation (an answered checkpoint): completed, detail `continued`;
    /// the continuation carries the chain on, so this run reports no outcome and keeps its
    /// pending follow-ups for the chain's final leaf.
    Continued,
    Failed(FailureClass),
    TimedOut,
    Cancelled,
}

/// End a run whose claim the caller holds: the terminal facts, its result digests, and the
/// release of the claim, all in the caller's protected write.
pub(super) fn end_claimed(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    ending: Ending,
    output_hash: Option<&str>,
    error_hash: Option<&str>,
) -> StoreResult<()> {
    let run_id = authority.resource_id.as_str();
    end_run(tx, run_id, ending)?;
    set_result_hashes(tx, run_id, output_hash, error_hash)?;
    claims::release(tx, authority)
}

/// The terminal facts of every ending: run and queue status, the unfinished attempt,
/// pending interactions and decisions, unsettled effects and pending messages; open turns
/// end `lost` and an interactive run queues its terminal message.
pub(super) fn end_run(tx: &WriteTx<'_>, run_id: &str, ending: Ending) -> StoreResult<()> {
    // A pending decision is settled by the ending: a cancel is the operator's explicit one.
    let settled_by = match ending {
        Ending::Cancelled => Provenance::ExplicitCancel,
        _ => Provenance::RunEnded,
    };
    let (run_status, queue_status, attempt_status, detail) = match ending {
        Ending::Completed => (RunStatus::Completed, QueueStatus::Done, AttemptStatus::Completed, None),
        Ending::Continued => (
            RunStatus::Completed,
            QueueStatus::Done,
            AttemptStatus::Completed,
            Some(CONTINUED_DETAIL),
        ),
        Ending::Failed(class) => (
            RunStatus::Failed,
            QueueStatus::Failed,
            AttemptStatus::Failed,
            Some(class.as_str()),
        ),
        Ending::TimedOut => (
            RunStatus::TimedOut,
            QueueStatus::Failed,
            AttemptStatus::TimedOut,
            Some(FailureClass::WorkerTimedOut.as_str()),
        ),
        Ending::Cancelled => (
            RunStatus::Cancelled,
            QueueStatus::Cancelled,
            AttemptStatus::Cancelled,
            None,
        ),
    };
    let continued = detail == Some(CONTINUED_DETAIL);
    let open = OpenWork::read(tx, run_id)?;
    if open.unfinished_attempt {
        attempts::close_unfinished(tx, run_id, attempt_status)?;
    }
    set_run_status(tx, run_id, run_status, detail)?;
    if open.paused {
        set_paused(tx, run_id, false)?;
    }
    set_queue_status(tx, run_id, queue_status)?;
    close_open_work(tx, run_id, settled_by, &open)?;
    if open.pending_messages {
        let kinds: &[&str] = if run_status == RunStatus::Completed {
            &["step", "decision"]
        } else {
            &["step", "decision", "followUp"]
        };
        cancel_pending_messages(tx, run_id, kinds)?;
    }
    // A terminal run keeps no workflow turn, and its session learns the outcome.
    if open.open_turns || open.open_intervals {
        super::turns::end_turns_of_run(tx, run_id)?;
    }
    if continued {
        return Ok(());
    }
    // Presentation never rolls an ending back (spec "Store"): a terminal message that cannot
    // be made now is made by the startup scan (`messages::queue_missing_terminals`).
    if let Err(err) = super::messages::queue_terminal(tx, run_id, run_status.as_str()) {
        tracing::warn!(error = %err, "the run's terminal message could not be queued; the next server start makes it");
    }
    Ok(())
}

/// Cancel pending interactions and unresolved decisions; a pending effect is cancelled and
/// an applying one becomes ambiguous (its external outcome cannot be proved). Only the kinds
/// `open` found are written.
fn close_open_work(tx: &WriteTx<'_>, run_id: &str, settled_by: Provenance, open: &OpenWork) -> StoreResult<()> {
    let conn = tx.conn();
    let now = tx.now_ms();
    if open.pending_requests {
        conn.prepare_cached(
            "UPDATE interactive_requests SET status = 'cancelled', settled_at = ?1 WHERE run_id = ?2 AND status = 'pending'",
        )?
        .execute(params![now, run_id])?;
    }
    if open.decisions {
        conn.prepare_cached(
            "INSERT INTO human_decision_resolutions (decision_id, outcome, provenance, resolved_at)
             SELECT d.decision_id, 'cancelled', ?3, ?1 FROM human_decisions d
             WHERE d.run_id = ?2 AND NOT EXISTS
               (SELECT 1 FROM human_decision_resolutions r WHERE r.decision_id = d.decision_id)",
        )?
        .execute(params![now, run_id, settled_by.as_str()])?;
    }
    if open.unsettled_effects {
        effects::mark_applying_ambiguous(tx, run_id)?;
        conn.prepare_cached(
            "UPDATE effects SET status = 'cancelled', updated_at = ?1
             WHERE run_id = ?2 AND status = 'pending' AND owner = 'runner'",
        )?
        .execute(params![now, run_id])?;
    }
    Ok(())
}

/// What an ending has to close, one flag per kind: whether the run has any such row. Each
/// flag's condition holds for every row its closing write changes (it may hold for more), so
/// a false flag proves that write would change nothing. Why: a run that ends after plain
/// steps has none of them, and its ending ran ten writes that found nothing, each opening a
/// cursor on every index its table has: ~45 µs a run, against ~3 µs for this one read
/// (docs/PERFORMANCE.md, twenty-ninth round).
struct OpenWork {
    unfinished_attempt: bool,
    paused: bool,
    pending_requests: bool,
    decisions: bool,
    unsettled_effects: bool,
    pending_messages: bool,
    open_turns: bool,
    open_intervals: bool,
}

impl OpenWork {
    fn read(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<Self> {
        Ok(tx
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM node_attempts WHERE run_id = ?1 AND status IN ('running', 'waiting')),
                    coalesce((SELECT paused FROM runs WHERE run_id = ?1), 0),
                    EXISTS (SELECT 1 FROM interactive_requests WHERE run_id = ?1 AND status = 'pending'),
                    EXISTS (SELECT 1 FROM human_decisions WHERE run_id = ?1),
                    EXISTS (SELECT 1 FROM effects WHERE run_id = ?1 AND owner = 'runner'
                              AND (status = 'pending' OR status = 'applying')),
                    EXISTS (SELECT 1 FROM workflow_messages WHERE run_id = ?1 AND status = 'pending'),
                    EXISTS (SELECT 1 FROM workflow_turns WHERE run_id = ?1 AND status = 'open'),
                    EXISTS (SELECT 1 FROM active_intervals WHERE run_id = ?1 AND status = 'open')",
            )?
            .query_row([run_id], |row| {
                Ok(Self {
                    unfinished_attempt: row.get(0)?,
                    paused: row.get(1)?,
                    pending_requests: row.get(2)?,
                    decisions: row.get(3)?,
                    unsettled_effects: row.get(4)?,
                    pending_messages: row.get(5)?,
                    open_turns: row.get(6)?,
                    open_intervals: row.get(7)?,
                })
            })?)
    }
}

pub(super) fn cancel_pending_messages(tx: &WriteTx<'_>, run_id: &str, kinds: &[&str]) -> StoreResult<()> {
    let mut statement = tx.conn().prepare_cached(
        "UPDATE workflow_messages SET status = 'cancelled', updated_at = ?1
         WHERE run_id = ?2 AND kind = ?3 AND status = 'pending'",
    )?;
    for kind in kinds {
        statement.execute(params![tx.now_ms(), run_id, kind])?;
    }
    Ok(())
}
