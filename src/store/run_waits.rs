//! The transitions of a run that waits at a step (docs/STATE.md): its input arrives and it is
//! queued for the runner that checks or uses it (`continue_waiting`), its checkpoint is
//! answered and a continuation settles it (`settle_by_continuation`), its protected decision
//! is settled by the server (`complete_waiting_step`), or the step closes without an answer —
//! the unproductive-turn rule's third strike or a spent deadline (`end_waiting_step`). No
//! runner holds a waiting run: a client's or a session's transition is unclaimed, while a
//! deadline's is made under a control claim of its own (`Fence::Control`).

use rusqlite::params;

use super::attempts;
use super::claims::{self, OwnerType, RUN_CLAIM_LEASE_MS, ResourceType};
use super::error::StoreResult;
use super::events::{self, Actor, RunEvent};
use super::run_endings::{Ending, end_run};
use super::runs::{QueueStatus, RunRow, RunStatus, read_run, set_queue_status, set_run_status, unclaimed_transition};
use super::writer::WriteTx;

/// The control owner of a deadline's claim: the server's deadline pass, not a runner.
pub const DEADLINE_CONTROL_OWNER: &str = "deadline";

/// How a transition of a waiting run is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// A client's or a session's transition: refused while the run has any claim holder.
    Unclaimed,
    /// The server acting at a deadline (spec "Interactive Pi execution"): it takes a control
    /// claim (proving any previous holder absent or expired, generation + 1), makes the change
    /// and releases the claim, all in this transaction, so a stale runner or answer of an
    /// older generation is fenced. A live holder makes the deadline wait.
    Control,
}

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
    from_waiting_fenced(tx, Fence::Unclaimed, run_id, expected, transition, change)
}

/// `from_waiting` under `fence`.
fn from_waiting_fenced(
    tx: &WriteTx<'_>,
    fence: Fence,
    run_id: &str,
    expected: Option<i64>,
    transition: &'static str,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<RunEvent>,
) -> StoreResult<i64> {
    let waiting = |run: &RunRow| run.status == RunStatus::Waiting && !run.paused;
    match fence {
        Fence::Unclaimed => unclaimed_transition(tx, run_id, expected, transition, waiting, change),
        Fence::Control => {
            let run = read_run(tx, run_id)?;
            run.require(transition, !run.queue.holds_claim() && waiting(&run))?;
            events::check_expected_revision(run_id, expected, run.revision)?;
            under_deadline_claim(tx, &run, change)
        }
    }
}

/// Take the deadline's control claim on `run` (refused, `ClaimHeld`, while a live holder
/// exists), make `change` through the protected write and release the claim with it.
fn under_deadline_claim(
    tx: &WriteTx<'_>,
    run: &RunRow,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<RunEvent>,
) -> StoreResult<i64> {
    let control = claims::acquire(
        tx,
        ResourceType::Run,
        &run.run_id,
        OwnerType::Control,
        DEADLINE_CONTROL_OWNER,
        RUN_CLAIM_LEASE_MS,
    )?;
    let committed = claims::protected_write(tx, &control, Some(run.revision), |tx| {
        let event = change(tx)?;
        claims::release(tx, &control)?;
        Ok(((), event))
    })?;
    Ok(committed.revision)
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
    /// Its deadline fired (`timedOut`): request and attempt `timed_out`, under the deadline's
    /// control claim.
    TimedOut,
}

impl WaitingEnd {
    fn fence(self) -> Fence {
        match self {
            Self::MissingSubmission => Fence::Unclaimed,
            Self::TimedOut => Fence::Control,
        }
    }
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
    from_waiting_fenced(tx, ending.fence(), run_id, None, "end the waiting step of", |tx| {
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
/// verified answer, unclaimed, or the timeout default, under the deadline's control claim):
/// `before` records the resolution, the request settles with its pending messages, the
/// attempt completes with `output_hash` and the run is queued. Its next runner replays the
/// completed attempt and follows its edges.
pub(super) fn complete_waiting_step(
    tx: &WriteTx<'_>,
    step: &WaitingStep<'_>,
    output_hash: &str,
    before: impl FnOnce(&WriteTx<'_>) -> StoreResult<()>,
) -> StoreResult<i64> {
    let transition = "settle the decision of";
    from_waiting_fenced(tx, step.fence, step.run_id, step.expected, transition, |tx| {
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
/// revision), request and attempt, who closes it and how that is fenced.
pub struct WaitingStep<'a> {
    pub run_id: &'a str,
    pub request_id: &'a str,
    pub attempt_id: &'a str,
    pub expected: Option<i64>,
    pub actor: Actor,
    pub fence: Fence,
}
