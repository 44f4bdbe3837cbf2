//! The transitions of a run that waits at a step (docs/STATE.md): its input arrives and it is
//! queued for the runner that checks or uses it (`continue_waiting`), its checkpoint is
//! answered and a continuation settles it (`settle_by_continuation`), its protected decision
//! is settled by the server (`complete_waiting_step`), or the step closes without an answer — the unproductive-turn rule's third strike or a spent deadline
//! (`end_waiting_step`). Each is one unclaimed transition: no runner holds a waiting run.

use rusqlite::params;

use super::attempts;
use super::error::StoreResult;
use super::events::{Actor, RunEvent};
use super::run_endings::{Ending, end_run};
use super::runs::{QueueStatus, RunStatus, set_queue_status, set_run_status, unclaimed_transition};
use super::writer::WriteTx;

/// A waiting run got its input (an accepted answer, or a candidate to validate): it
/// becomes queued for a new runner, which resumes at the waiting attempt. `before`
/// records the input in the same transaction. Refused while paused.
pub fn continue_waiting(
    tx: &WriteTx<'_>,
    run_id: &str,
    expected: Option<i64>,
    before: impl FnOnce(&WriteTx<'_>) -> StoreResult<()>,
) -> StoreResult<i64> {
    from_waiting(tx, run_id, expected, "answer", |tx| {
        before(tx)?;
        set_run_status(tx, run_id, RunStatus::Queued, None)?;
        set_queue_status(tx, run_id, QueueStatus::Queued)?;
        Ok(RunEvent::new("run.answered", Actor::Client))
    })
}

/// Every transition here starts from a waiting, unpaused run that no runner holds.
fn from_waiting(
    tx: &WriteTx<'_>,
    run_id: &str,
    expected: Option<i64>,
    transition: &'static str,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<RunEvent>,
) -> StoreResult<i64> {
    unclaimed_transition(
        tx,
        run_id,
        expected,
        transition,
        |run| run.status == RunStatus::Waiting && !run.paused,
        change,
    )
}

/// `checkpoint.answer` (docs/STATE.md): a waiting, unpaused, unclaimed run is settled by its
/// continuation — `before` records the answer, then the run ends `completed` with detail
/// `continued` (no terminal message: its continuation reports the chain's outcome). The
/// caller queues the continuation in the same transaction (`continuations`).
pub(super) fn settle_by_continuation(
    tx: &WriteTx<'_>,
    run_id: &str,
    expected: Option<i64>,
    before: impl FnOnce(&WriteTx<'_>) -> StoreResult<()>,
) -> StoreResult<i64> {
    from_waiting(tx, run_id, expected, "answer the checkpoint of", |tx| {
        before(tx)?;
        end_run(tx, run_id, Ending::Continued)?;
        Ok(RunEvent::new("run.continued", Actor::Client))
    })
}

/// Why a waiting step closes without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingEnd {
    /// The unproductive-turn rule's third strike (`missingSubmission`): request `cancelled`,
    /// attempt `failed`.
    MissingSubmission,
    /// Its deadline fired (`timedOut`): request and attempt `timed_out`.
    TimedOut,
}

/// A waiting step closes without an answer: its attempt ends with `error_hash`, its request
/// closes with its pending step messages, and the run is queued. Its next runner (the
/// supervised child that records the outcome) resumes, replays the ended attempt like any
/// other and follows the node's `$result.outcome` route, or ends the run — the same path a
/// node that failed while running takes, so no runner needs to know these rules.
pub(super) fn end_waiting_step(
    tx: &WriteTx<'_>,
    run_id: &str,
    request_id: &str,
    attempt_id: &str,
    ending: WaitingEnd,
    error_hash: &str,
) -> StoreResult<i64> {
    let (request_status, event) = match ending {
        WaitingEnd::MissingSubmission => ("cancelled", "interaction.failed"),
        WaitingEnd::TimedOut => ("timed_out", "interaction.timedOut"),
    };
    from_waiting(tx, run_id, None, "end the waiting step of", |tx| {
        let now = tx.now_ms();
        tx.conn()
            .prepare_cached(
                "UPDATE interactive_requests SET status = ?1, settled_at = ?2
                 WHERE request_id = ?3 AND status = 'pending'",
            )?
            .execute(params![request_status, now, request_id])?;
        super::messages::cancel_pending_of_source(tx, request_id)?;
        super::deadlines::close_intervals_of_request(tx, request_id)?;
        let timed_out = ending == WaitingEnd::TimedOut;
        attempts::end_waiting(tx, run_id, attempt_id, timed_out, error_hash)?;
        set_run_status(tx, run_id, RunStatus::Queued, None)?;
        set_queue_status(tx, run_id, QueueStatus::Queued)?;
        Ok(RunEvent::new(event, Actor::System))
    })
}

/// A waiting step was answered by the server itself (a protected decision: a person's
/// verified answer or the timeout default): `before` records the resolution, the request
/// settles with its pending messages, the attempt completes with `output_hash` and the run is
/// queued. Its next runner replays the completed attempt and follows its edges.
pub(super) fn complete_waiting_step(
    tx: &WriteTx<'_>,
    step: &WaitingStep<'_>,
    output_hash: &str,
    before: impl FnOnce(&WriteTx<'_>) -> StoreResult<()>,
) -> StoreResult<i64> {
    from_waiting(tx, step.run_id, step.expected, "settle the decision of", |tx| {
        before(tx)?;
        tx.conn()
            .prepare_cached(
                "UPDATE interactive_requests SET status = 'settled', settled_at = ?1
                 WHERE request_id = ?2 AND status = 'pending'",
            )?
            .execute(params![tx.now_ms(), step.request_id])?;
        super::messages::cancel_pending_of_source(tx, step.request_id)?;
        attempts::complete_waiting(tx, step.run_id, step.attempt_id, output_hash)?;
        set_run_status(tx, step.run_id, RunStatus::Queued, None)?;
        set_queue_status(tx, step.run_id, QueueStatus::Queued)?;
        Ok(RunEvent::new("decision.resolved", step.actor))
    })
}

/// The waiting step a transition closes: its run (at `expected`, when the caller names a
/// revision), request and attempt, and who closes it.
pub struct WaitingStep<'a> {
    pub run_id: &'a str,
    pub request_id: &'a str,
    pub attempt_id: &'a str,
    pub expected: Option<i64>,
    pub actor: Actor,
}
