//! Runs and queue: the run lifecycle of the spec's run/queue table.
//!
//! One function per transition. Each writes the run, queue, attempt, decision, effect,
//! message and lease facts of that transition, appends one event and viewer delta, and
//! bumps the revision, all in the caller's single transaction:
//!
//! | transition   | from (run / queue)                   | to                      | claim         |
//! |--------------|--------------------------------------|-------------------------|---------------|
//! | `queue_run`  | (new)                                | queued / queued         | none          |
//! | `start_run`  | queued / queued, not paused          | running / starting      | acquired      |
//! | `reclaim`    | running / starting or running, holder gone | running / starting | new generation |
//! | `mark_running`| running / starting                  | running / running       | held          |
//! | `park_run`   | running / starting or running        | running / parked        | released      |
//! | `wait_run`   | running / running                    | waiting / parked        | released      |
//! | `complete_run`| running / running, no open attempt  | completed / done        | released      |
//! | `fail_run`   | running / starting or running        | failed / failed         | released      |
//! | `time_out_run`| running / starting or running       | timed_out / failed      | released      |
//! | `cancel_*`   | any nonterminal                      | cancelled / cancelled   | released      |
//! | `pause_*`    | nonterminal, not paused              | paused, queue parked    | released      |
//! | `resume_run` | paused, or parked for review         | queued / queued (or waiting / parked) | none |
//!
//! Architecture Invariant: a run has a claim holder exactly when its queue row is
//! `starting` or `running`; no terminal queue row has a nonterminal run; no run-failure
//! event commits while the run is `running`.

use rusqlite::{OptionalExtension, params};

use super::attempts;
use super::claims::{self, ClaimAuthority, Committed, OwnerType, RUN_CLAIM_LEASE_MS, ResourceType};
use super::effects::{self, ReviewResolution};
use super::error::{StoreError, StoreResult};
use super::events::{self, Actor, RunEvent};
use super::run_endings::{Ending, cancel_pending_messages, end_claimed, end_run};
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

/// A queue row still holding its run's origin-session reservation: the predicate of the
/// partial unique index `run_queue_one_active_per_session`, word for word, so a read by
/// session can use that index (SQLite matches a partial index's terms literally).
macro_rules! session_reserved {
    () => {
        "status <> 'done' AND status <> 'failed' AND status <> 'cancelled'"
    };
}
pub(crate) use session_reserved;

wire_enum! {
    /// Durable run status.
    pub enum RunStatus {
        Queued = "queued",
        Running = "running",
        Waiting = "waiting",
        Completed = "completed",
        Failed = "failed",
        TimedOut = "timed_out",
        Cancelled = "cancelled",
    }
}

wire_enum! {
    /// Queue row status: the scheduler's view of a run.
    pub enum QueueStatus {
        Queued = "queued",
        Starting = "starting",
        Running = "running",
        Parked = "parked",
        Done = "done",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

wire_enum! {
    /// Why a run parked instead of continuing.
    pub enum ParkReason {
        /// Stopped at a durable boundary (e.g. server shutdown); resumable.
        Boundary = "boundary",
        /// The runner exited before the run revision advanced; needs an explicit resume.
        RunnerNoProgress = "runnerNoProgress",
        /// The runner crashed after saving progress.
        WorkerCrashed = "workerCrashed",
        /// The workflow source no longer matches its saved identity.
        WorkflowSourceChanged = "workflowSourceChanged",
        /// An external effect may have applied without a receipt; needs review.
        EffectAmbiguous = "effectAmbiguous",
        /// The runner used more memory than its bound and was stopped; resumable.
        RunnerOutOfMemory = "runnerOutOfMemory",
        /// Parked `effectAmbiguous`, and an operator has reviewed every ambiguous effect;
        /// an explicit resume continues it.
        EffectReviewed = "effectReviewed",
    }
}

wire_enum! {
    /// The failure classes (spec "Failure classification") a run *ends* with, stored as its
    /// `status_detail`. The spec's other classes never end a run, each has its own place:
    /// `workerCrashed`, `runnerNoProgress`, `effectAmbiguous` and the source check
    /// (`workflowSourceChanged`) park it for review ([`ParkReason`]); `claimLost` and
    /// `protocolRejected` are refusal codes of one message or request (the writer stops,
    /// the run is untouched); `hostUnavailable` is a client error (no server to reach).
    pub enum FailureClass {
        /// A declared deadline passed with no `timed_out` route: the run ends `timed_out`.
        WorkerTimedOut = "workerTimedOut",
        /// Workflow code failed and no route handled it: the run ends `failed`.
        NodeFailed = "nodeFailed",
    }
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::TimedOut | Self::Cancelled)
    }
}

impl QueueStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Cancelled)
    }

    /// A claim holder exists exactly in these states.
    pub fn holds_claim(self) -> bool {
        matches!(self, Self::Starting | Self::Running)
    }
}

/// The lifecycle facts of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub run_id: String,
    pub status: RunStatus,
    pub queue: QueueStatus,
    pub paused: bool,
    pub revision: i64,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionMode {
    Headless,
    /// Runs in the origin Pi session, which it reserves until terminal.
    Interactive {
        origin_session_id: String,
    },
}

/// How a run began; it decides its runner's first command (`start`, `restart`,
/// `continue`) so a runner never infers it from a nullable parent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RunOrigin {
    #[default]
    Start,
    /// A new run of the same workflow from its start (`parent_run_id` names the old run).
    Restart,
    /// Continues after the waiting checkpoint attempt of `parent_run_id`.
    Continuation { parent_attempt_id: String },
}

impl RunOrigin {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Restart => "restart",
            Self::Continuation { .. } => "continuation",
        }
    }
}

/// What `queue_run` needs to create a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub run_id: String,
    pub workflow_name: String,
    pub project_path: String,
    pub parent_run_id: Option<String>,
    pub root_run_id: Option<String>,
    pub origin: RunOrigin,
    pub definition_digest: String,
    /// Root and mounted source hashes, canonical JSON (`{}` when there is no file source).
    pub workflow_source_json: String,
    pub input_hash: String,
    pub execution: ExecutionMode,
}

#[cfg(test)]
impl NewRun {
    /// A headless run of the workflow `example` with no file source, for unit tests.
    pub fn example(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            workflow_name: "example".to_string(),
            project_path: "/project".to_string(),
            parent_run_id: None,
            root_run_id: None,
            origin: Default::default(),
            definition_digest: format!("sha256:{}", "d".repeat(64)),
            workflow_source_json: "{}".to_string(),
            input_hash: "e".repeat(64),
            execution: ExecutionMode::Headless,
        }
    }
}

pub fn read_run(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<RunRow> {
    read_run_on(tx.conn(), run_id)
}

/// Read a run on any connection (write transaction or read-only view).
pub fn read_run_on(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<RunRow> {
    let row = conn
        .prepare_cached(
            "SELECT r.status, q.status, r.paused, r.revision, r.status_detail
             FROM runs r JOIN run_queue q ON q.run_id = r.run_id WHERE r.run_id = ?1",
        )?
        .query_row([run_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()?;
    let Some((status, queue, paused, revision, detail)) = row else {
        return Err(StoreError::RunNotFound {
            run_id: run_id.to_string(),
        });
    };
    Ok(RunRow {
        run_id: run_id.to_string(),
        status: RunStatus::from_wire(&status).expect("the schema CHECK admits only known run statuses"),
        queue: QueueStatus::from_wire(&queue).expect("the schema CHECK admits only known queue statuses"),
        paused,
        revision,
        detail,
    })
}

impl RunRow {
    /// Refuse `transition` unless `allowed`; nothing has been written yet when this fails.
    /// Refused as an invalid `transition` unless `allowed` (what every transition checks).
    pub fn require(&self, transition: &'static str, allowed: bool) -> StoreResult<()> {
        if allowed {
            return Ok(());
        }
        Err(StoreError::InvalidTransition {
            transition,
            run_id: self.run_id.clone(),
            run_status: self.status.to_string(),
            queue_status: self.queue.to_string(),
            paused: self.paused,
        })
    }

    fn is_claimed_active(&self) -> bool {
        self.status == RunStatus::Running && self.queue.holds_claim()
    }
}

// Column writers ---------------------------------------------------------------------------

pub(super) fn set_run_status(
    tx: &WriteTx<'_>,
    run_id: &str,
    status: RunStatus,
    detail: Option<&str>,
) -> StoreResult<()> {
    let finished_at = status.is_terminal().then_some(tx.now_ms());
    tx.conn()
        .prepare_cached("UPDATE runs SET status = ?1, status_detail = ?2, finished_at = ?3 WHERE run_id = ?4")?
        .execute(params![status.as_str(), detail, finished_at, run_id])?;
    Ok(())
}

pub(super) fn set_queue_status(tx: &WriteTx<'_>, run_id: &str, status: QueueStatus) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE run_queue SET status = ?1, updated_at = ?2 WHERE run_id = ?3")?
        .execute(params![status.as_str(), tx.now_ms(), run_id])?;
    Ok(())
}

pub(super) fn set_paused(tx: &WriteTx<'_>, run_id: &str, paused: bool) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE runs SET paused = ?1 WHERE run_id = ?2")?
        .execute(params![paused, run_id])?;
    Ok(())
}

pub(super) fn set_result_hashes(
    tx: &WriteTx<'_>,
    run_id: &str,
    output: Option<&str>,
    error: Option<&str>,
) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE runs SET output_hash = ?1, error_hash = ?2 WHERE run_id = ?3")?
        .execute(params![output, error, run_id])?;
    Ok(())
}

// Transitions ------------------------------------------------------------------------------

/// Create a run that is ready for scheduling (revision 1).
pub fn queue_run(tx: &WriteTx<'_>, new_run: &NewRun) -> StoreResult<i64> {
    let conn = tx.conn();
    let now = tx.now_ms();
    let exists: bool = conn
        .prepare_cached("SELECT count(*) > 0 FROM runs WHERE run_id = ?1")?
        .query_row([&new_run.run_id], |row| row.get(0))?;
    if exists {
        return Err(StoreError::RunExists {
            run_id: new_run.run_id.clone(),
        });
    }
    if let ExecutionMode::Interactive { origin_session_id } = &new_run.execution {
        let busy: bool = conn
            .prepare_cached(concat!(
                "SELECT count(*) > 0 FROM run_queue WHERE origin_session_id = ?1 AND ",
                session_reserved!()
            ))?
            .query_row([origin_session_id], |row| row.get(0))?;
        if busy {
            return Err(StoreError::SessionBusy {
                session_digest: super::messages::session_digest(origin_session_id),
            });
        }
    }
    let root = new_run.root_run_id.as_deref().unwrap_or(&new_run.run_id);
    let parent_attempt = match &new_run.origin {
        RunOrigin::Continuation { parent_attempt_id } => Some(parent_attempt_id.as_str()),
        RunOrigin::Start | RunOrigin::Restart => None,
    };
    conn.prepare_cached(
        "INSERT INTO runs (run_id, workflow_name, project_path, parent_run_id, root_run_id, origin,
                           parent_attempt_id, definition_digest, workflow_source_json, input_hash, status,
                           paused, revision, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'queued', 0, 1, ?11, ?11)",
    )?
    .execute(params![
        new_run.run_id,
        new_run.workflow_name,
        new_run.project_path,
        new_run.parent_run_id,
        root,
        new_run.origin.as_str(),
        parent_attempt,
        new_run.definition_digest,
        new_run.workflow_source_json,
        new_run.input_hash,
        now
    ])?;
    let (mode, session) = match &new_run.execution {
        ExecutionMode::Headless => ("headless", None),
        ExecutionMode::Interactive { origin_session_id } => ("interactive", Some(origin_session_id.as_str())),
    };
    conn.prepare_cached("INSERT INTO run_bindings (run_id, execution_mode, origin_session_id) VALUES (?1, ?2, ?3)")?
        .execute(params![new_run.run_id, mode, session])?;
    conn.prepare_cached(
        "INSERT INTO run_queue (run_id, status, available_at, origin_session_id, updated_at)
         VALUES (?1, 'queued', ?2, ?3, ?2)",
    )?
    .execute(params![new_run.run_id, now, session])?;
    events::append(
        tx,
        &new_run.run_id,
        1,
        &RunEvent::new("run.queued", Actor::System),
        None,
    )?;
    if let Some(parent) = &new_run.parent_run_id {
        super::settings::inherit(tx, parent, &new_run.run_id)?;
        if matches!(new_run.origin, RunOrigin::Continuation { .. }) {
            // Only the final leaf of a continuation chain reports its outcome.
            super::messages::settle_parent_terminal(tx, parent)?;
        }
    }
    Ok(1)
}

/// Admit a queued run: take a new claim generation for the server acting for the runner
/// (`owner_id` names this server) and record that a launch is starting.
pub fn start_run(tx: &WriteTx<'_>, run_id: &str, owner_id: &str) -> StoreResult<Committed<ClaimAuthority>> {
    let run = read_run(tx, run_id)?;
    run.require(
        "start",
        run.status == RunStatus::Queued && run.queue == QueueStatus::Queued && !run.paused,
    )?;
    let authority = claims::acquire(
        tx,
        ResourceType::Run,
        run_id,
        OwnerType::Host,
        owner_id,
        RUN_CLAIM_LEASE_MS,
    )?;
    let committed = claims::protected_write(tx, &authority, Some(run.revision), |tx| {
        set_run_status(tx, run_id, RunStatus::Running, None)?;
        set_queue_status(tx, run_id, QueueStatus::Starting)?;
        Ok(((), RunEvent::new("run.starting", Actor::Host)))
    })?;
    Ok(Committed {
        value: authority,
        revision: committed.revision,
    })
}

/// How a reclaim proves that the previous holder of a running row is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// The claim is absent or expired, checked in the reclaim's own transaction
    /// (`claims::acquire`): a live claim is never taken. The proof while the server lives.
    Expired,
    /// This server holds the global lock, so every older server and each runner it
    /// supervised are gone, whatever their claims' expiry (`claims::take_over`). Startup
    /// recovery's proof.
    OlderServerGone,
}

/// Recovery of a running row whose holder is gone (its runner stalled or vanished, or its
/// server died): take a new claim generation, proved by `takeover`, interrupt the running
/// attempt and record a new launch starting. Everything the old generation still holds is
/// fenced from here on. `recovery::reclaim_run` decides what the run does next.
pub fn reclaim(
    tx: &WriteTx<'_>,
    run_id: &str,
    owner_id: &str,
    takeover: Takeover,
) -> StoreResult<Committed<ClaimAuthority>> {
    let run = read_run(tx, run_id)?;
    run.require("reclaim", run.is_claimed_active())?;
    let take = match takeover {
        Takeover::Expired => claims::acquire,
        Takeover::OlderServerGone => claims::take_over,
    };
    let authority = take(
        tx,
        ResourceType::Run,
        run_id,
        OwnerType::Host,
        owner_id,
        RUN_CLAIM_LEASE_MS,
    )?;
    let committed = claims::protected_write(tx, &authority, Some(run.revision), |tx| {
        attempts::interrupt_running(tx, run_id)?;
        set_queue_status(tx, run_id, QueueStatus::Starting)?;
        Ok(((), RunEvent::new("run.reclaimed", Actor::Host)))
    })?;
    Ok(Committed {
        value: authority,
        revision: committed.revision,
    })
}

/// The runner is live (it answered ready).
pub fn mark_running(tx: &WriteTx<'_>, authority: &ClaimAuthority, expected: Option<i64>) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "run",
        |run| run.queue == QueueStatus::Starting,
        |tx, run_id| {
            set_queue_status(tx, run_id, QueueStatus::Running)?;
            Ok(RunEvent::new("run.running", Actor::Host))
        },
    )
}

/// Stop at a durable boundary; an unfinished running attempt becomes `interrupted`.
pub fn park_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    reason: ParkReason,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "park",
        |_| true,
        |tx, run_id| {
            attempts::interrupt_running(tx, run_id)?;
            set_run_status(tx, run_id, RunStatus::Running, Some(reason.as_str()))?;
            set_queue_status(tx, run_id, QueueStatus::Parked)?;
            claims::release(tx, authority)?;
            Ok(RunEvent::new("run.parked", Actor::Host))
        },
    )
}

/// Wait for input (checkpoint or interactive request); the unfinished attempt, if any,
/// becomes `waiting` and stays the run's current node.
pub fn wait_run(tx: &WriteTx<'_>, authority: &ClaimAuthority, expected: Option<i64>) -> StoreResult<i64> {
    wait_run_with(tx, authority, expected, |_, _| Ok(()))
}

/// `wait_run` with the record of what the run waits for (`before`) in the same protected
/// write, so a waiting run always names its pending request.
pub fn wait_run_with(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    before: impl FnOnce(&WriteTx<'_>, &str) -> StoreResult<()>,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "wait",
        // Also from `starting`: a validator that never became ready returns the run to
        // waiting at its request.
        |_| true,
        |tx, run_id| {
            before(tx, run_id)?;
            attempts::mark_unfinished_waiting(tx, run_id)?;
            set_run_status(tx, run_id, RunStatus::Waiting, None)?;
            set_queue_status(tx, run_id, QueueStatus::Parked)?;
            claims::release(tx, authority)?;
            Ok(RunEvent::new("run.waiting", Actor::Host))
        },
    )
}

/// Record a display fact of a live run (node progress, a presentation) as its own event,
/// with the fact stored under `payload_hash`; nothing else of the run changes.
pub fn note_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    event_type: &'static str,
    payload_hash: &str,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        event_type,
        |run| run.queue == QueueStatus::Running,
        |_, _| {
            let mut event = RunEvent::new(event_type, Actor::Host);
            event.payload_hash = Some(payload_hash.to_string());
            Ok(event)
        },
    )
}

/// Finish successfully. Refused while a node attempt is unfinished.
pub fn complete_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    output_hash: Option<&str>,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "complete",
        |run| run.queue == QueueStatus::Running,
        |tx, run_id| {
            if let Some(attempt_id) = attempts::unfinished_attempt_id(tx, run_id)? {
                return Err(StoreError::InvalidTransition {
                    transition: "complete",
                    run_id: run_id.to_string(),
                    run_status: format!("running with unfinished attempt {attempt_id}"),
                    queue_status: QueueStatus::Running.to_string(),
                    paused: false,
                });
            }
            end_claimed(tx, authority, Ending::Completed, output_hash, None)?;
            Ok(RunEvent::new("run.completed", Actor::Host))
        },
    )
}

/// End with a durable failure of one class.
pub fn fail_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    class: FailureClass,
    error_hash: Option<&str>,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "fail",
        |_| true,
        |tx, _| {
            end_claimed(tx, authority, Ending::Failed(class), None, error_hash)?;
            Ok(RunEvent::new("run.failed", Actor::Host))
        },
    )
}

/// End because a declared timeout passed.
pub fn time_out_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    error_hash: Option<&str>,
) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "time out",
        |_| true,
        |tx, _| {
            end_claimed(tx, authority, Ending::TimedOut, None, error_hash)?;
            Ok(RunEvent::new("run.timed_out", Actor::Host))
        },
    )
}

/// Cancel a run whose claim the caller holds (a live runner's run).
pub fn cancel_claimed(tx: &WriteTx<'_>, authority: &ClaimAuthority, expected: Option<i64>) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "cancel",
        |_| true,
        |tx, _| {
            end_claimed(tx, authority, Ending::Cancelled, None, None)?;
            Ok(RunEvent::new("run.cancelled", actor_of(authority)))
        },
    )
}

/// Cancel a run that has no claim holder: queued, parked or waiting work.
pub fn cancel_unclaimed(tx: &WriteTx<'_>, run_id: &str, expected: Option<i64>) -> StoreResult<i64> {
    unclaimed_transition(
        tx,
        run_id,
        expected,
        "cancel",
        |run| !run.status.is_terminal(),
        |tx| {
            end_run(tx, run_id, Ending::Cancelled)?;
            Ok(RunEvent::new("run.cancelled", Actor::Client))
        },
    )
}

/// Cancel a running row whose claim expired: first take a new control claim (which proves
/// the old lease is absent or expired, so a live claim can never be force-cancelled here),
/// then cancel under it, in this one transaction.
pub fn cancel_expired(
    tx: &WriteTx<'_>,
    run_id: &str,
    control_owner_id: &str,
    expected: Option<i64>,
) -> StoreResult<i64> {
    let run = read_run(tx, run_id)?;
    run.require("cancel an expired claim of", run.is_claimed_active())?;
    events::check_expected_revision(run_id, expected, run.revision)?;
    let control = claims::acquire(
        tx,
        ResourceType::Run,
        run_id,
        OwnerType::Control,
        control_owner_id,
        RUN_CLAIM_LEASE_MS,
    )?;
    cancel_claimed(tx, &control, Some(run.revision))
}

/// Pause a live run: park it, interrupt its running attempt and release the claim; the
/// fenced runner is stopped by the caller afterwards.
pub fn pause_claimed(tx: &WriteTx<'_>, authority: &ClaimAuthority, expected: Option<i64>) -> StoreResult<i64> {
    claimed_transition(
        tx,
        authority,
        expected,
        "pause",
        |run| !run.paused,
        |tx, run_id| {
            attempts::interrupt_running(tx, run_id)?;
            // The runner's group stops next, so an effect it is applying ends unproven: it
            // follows its contract as after a crash (idempotent and read-back ones apply
            // again on resume, a manual one is ambiguous and needs a review).
            effects::interrupt_applying(tx, run_id)?;
            set_paused(tx, run_id, true)?;
            set_queue_status(tx, run_id, QueueStatus::Parked)?;
            cancel_pending_messages(tx, run_id, &["step"])?;
            claims::release(tx, authority)?;
            Ok(RunEvent::new("run.paused", actor_of(authority)))
        },
    )
}

/// Pause work that has no claim holder (queued, parked or waiting).
pub fn pause_unclaimed(tx: &WriteTx<'_>, run_id: &str, expected: Option<i64>) -> StoreResult<i64> {
    unclaimed_transition(
        tx,
        run_id,
        expected,
        "pause",
        |run| !run.status.is_terminal() && !run.paused,
        |tx| {
            set_paused(tx, run_id, true)?;
            set_queue_status(tx, run_id, QueueStatus::Parked)?;
            cancel_pending_messages(tx, run_id, &["step"])?;
            // A pause stops the step's clock (docs/SESSIONS.md "Deadlines").
            super::deadlines::close_intervals_of_run(tx, run_id)?;
            Ok(RunEvent::new("run.paused", Actor::Client))
        },
    )
}

/// Clear a pause, or release a run parked for review. A waiting run keeps waiting for its
/// pending input in place; other work becomes queued for a new claim generation.
pub fn resume_run(tx: &WriteTx<'_>, run_id: &str, expected: Option<i64>) -> StoreResult<i64> {
    // Resuming past an ambiguous effect would fail its node without anyone having looked:
    // the operator settles it first (`review_effect`).
    let ambiguous = effects::ambiguous_count(tx.conn(), run_id)?;
    if ambiguous > 0 {
        read_run(tx, run_id)?; // an unknown run reads as not found, not as ambiguous
        return Err(StoreError::EffectsAmbiguous {
            run_id: run_id.to_string(),
            count: ambiguous,
        });
    }
    requeue_parked(tx, run_id, expected)
}

/// The server's own requeue of a run parked at a boundary (startup recovery, a runner
/// stopped from outside): the run continues where it was, so an effect that became
/// ambiguous while it ran (its node already failed on it) does not hold it back the way it
/// holds back an operator's `resume_run`.
pub fn requeue_parked(tx: &WriteTx<'_>, run_id: &str, expected: Option<i64>) -> StoreResult<i64> {
    let parked_for_review = |run: &RunRow| run.status == RunStatus::Running && run.queue == QueueStatus::Parked;
    unclaimed_transition(
        tx,
        run_id,
        expected,
        "resume",
        |run| !run.status.is_terminal() && (run.paused || parked_for_review(run)),
        |tx| {
            let run = read_run(tx, run_id)?;
            set_paused(tx, run_id, false)?;
            if run.status != RunStatus::Waiting {
                set_run_status(tx, run_id, RunStatus::Queued, None)?;
                set_queue_status(tx, run_id, QueueStatus::Queued)?;
            } else if run.paused {
                // The pause cancelled the step's pending messages: present it once more as a
                // fresh turn (a protected decision is left as it was).
                super::interactions::present_resumed_step(tx, run_id)?;
            }
            Ok(RunEvent::new("run.resumed", Actor::Client))
        },
    )
}

/// Settle one ambiguous effect of a run without a live claim by an operator's review
/// (`effects::review`), fenced by the run revision; a parked run stays parked until a
/// resume. An ended run records `applied` or `failed` (nothing changes its result); a
/// retry needs a run that continues.
pub fn review_effect(
    tx: &WriteTx<'_>,
    run_id: &str,
    expected: Option<i64>,
    effect_id: &str,
    resolution: ReviewResolution,
    result_hash: Option<&str>,
) -> StoreResult<i64> {
    unclaimed_transition(
        tx,
        run_id,
        expected,
        "review an effect of",
        // An ended run can still record what happened outside; only a retry needs a run
        // that will continue.
        |run| !run.status.is_terminal() || resolution != ReviewResolution::Retry,
        |tx| {
            effects::review(tx, run_id, effect_id, resolution, result_hash)?;
            if effects::ambiguous_count(tx.conn(), run_id)? == 0 {
                // The park's reason no longer asks for a review: it asks for a resume.
                tx.conn()
                    .prepare_cached("UPDATE runs SET status_detail = ?1 WHERE run_id = ?2 AND status_detail = ?3")?
                    .execute(params![
                        ParkReason::EffectReviewed.as_str(),
                        run_id,
                        ParkReason::EffectAmbiguous.as_str()
                    ])?;
            }
            Ok(RunEvent::new("effect.reviewed", Actor::Client))
        },
    )
}

/// Record an origin-session fact of a run (a turn started or ended, a message sent or
/// presented again) as one event at its next revision, so its live views update. Not while
/// a runner holds the claim: its next message names the revision it last saw, and a display
/// fact must not fence it; the presentation revision counts turns, so views update anyway.
pub(super) fn note_session_fact(tx: &WriteTx<'_>, run_id: &str, event_type: &'static str) -> StoreResult<Option<i64>> {
    if claims::has_holder(tx, run_id)? {
        return Ok(None);
    }
    let revision = events::current_revision(tx, run_id)?;
    events::advance(tx, run_id, revision, &RunEvent::new(event_type, Actor::Client), None).map(Some)
}

/// `run.restart`: a new run of a terminal run's workflow, source, definition and input,
/// from the workflow start (origin `restart`, parent = the old run, same root). The old
/// run must be terminal at `expected` (when given).
pub fn restart_run(tx: &WriteTx<'_>, old_run_id: &str, new_run_id: &str, expected: Option<i64>) -> StoreResult<i64> {
    let old = read_run(tx, old_run_id)?;
    old.require("restart", old.status.is_terminal())?;
    events::check_expected_revision(old_run_id, expected, old.revision)?;
    let (workflow_name, project_path, root, digest, source, input_hash, mode, session) = tx
        .conn()
        .prepare_cached(
            "SELECT r.workflow_name, r.project_path, r.root_run_id, r.definition_digest, r.workflow_source_json,
                    r.input_hash, b.execution_mode, b.origin_session_id
             FROM runs r JOIN run_bindings b ON b.run_id = r.run_id WHERE r.run_id = ?1",
        )?
        .query_row([old_run_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, String>(6)?,
                row.get::<_, Option<String>>(7)?,
            ))
        })?;
    let execution = match (mode.as_str(), session) {
        ("interactive", Some(origin_session_id)) => ExecutionMode::Interactive { origin_session_id },
        _ => ExecutionMode::Headless,
    };
    queue_run(
        tx,
        &NewRun {
            run_id: new_run_id.to_string(),
            workflow_name,
            project_path,
            parent_run_id: Some(old_run_id.to_string()),
            root_run_id: Some(root),
            origin: RunOrigin::Restart,
            definition_digest: digest,
            workflow_source_json: source,
            input_hash,
            execution,
        },
    )
}

// Shared shapes ----------------------------------------------------------------------------

fn actor_of(authority: &ClaimAuthority) -> Actor {
    match authority.owner_type {
        OwnerType::Control => Actor::Control,
        OwnerType::Host | OwnerType::Server => Actor::Host,
    }
}

/// A transition of a claimed, active run through the one protected write.
fn claimed_transition(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    transition: &'static str,
    allowed: impl FnOnce(&RunRow) -> bool,
    change: impl FnOnce(&WriteTx<'_>, &str) -> StoreResult<RunEvent>,
) -> StoreResult<i64> {
    let run_id = authority.resource_id.as_str();
    let committed = claims::protected_write(tx, authority, expected, |tx| {
        let run = read_run(tx, run_id)?;
        run.require(transition, run.is_claimed_active() && allowed(&run))?;
        Ok(((), change(tx, run_id)?))
    })?;
    Ok(committed.revision)
}

/// A transition of a run that has no claim holder. A run with a holder (live or expired)
/// must go through its claim or `cancel_expired`.
pub(super) fn unclaimed_transition(
    tx: &WriteTx<'_>,
    run_id: &str,
    expected: Option<i64>,
    transition: &'static str,
    allowed: impl FnOnce(&RunRow) -> bool,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<RunEvent>,
) -> StoreResult<i64> {
    let run = read_run(tx, run_id)?;
    if claims::has_holder(tx, run_id)? {
        return Err(StoreError::ClaimHeld {
            resource_id: run_id.to_string(),
        });
    }
    run.require(transition, !run.queue.holds_claim() && allowed(&run))?;
    events::check_expected_revision(run_id, expected, run.revision)?;
    let event = change(tx)?;
    events::advance(tx, run_id, run.revision, &event, None)
}
