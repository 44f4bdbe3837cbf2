//! Node attempts: the durable record of executing one node visit.
//!
//! Architecture Invariant: a run has at most one unfinished (`running` or `waiting`)
//! attempt (a partial unique index enforces it); it is the one durable source of the
//! run's current node.

use rusqlite::{OptionalExtension, params};

use super::blobs::KeptJson;
use super::claims::{self, ClaimAuthority};
use super::error::{StoreError, StoreResult};
use super::events::{Actor, RunEvent};
use super::runs::{QueueStatus, RunStatus, read_run};
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// Node attempt status.
    pub enum AttemptStatus {
        Running = "running",
        Waiting = "waiting",
        Interrupted = "interrupted",
        Completed = "completed",
        Failed = "failed",
        TimedOut = "timed_out",
        Cancelled = "cancelled",
    }
}

/// A node visit the runner starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttempt {
    pub attempt_id: String,
    pub node_id: String,
    /// Full compiled node path, including include mounts.
    pub node_path: String,
    pub visit: i64,
    pub node_type: String,
    pub deadline_at: Option<i64>,
    pub timeout_ms: Option<i64>,
    /// The settings version whose frozen copy the node saw (`None`: no settings declared).
    pub settings_change_number: Option<i64>,
}

/// How a node attempt ended, with its output or error (`blobs::keep_json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    Completed { output: Option<KeptJson> },
    Failed { error: Option<KeptJson> },
}

/// `node.started`: record a new running attempt of a live run (protected write).
pub fn start_attempt(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    attempt: &NewAttempt,
) -> StoreResult<i64> {
    let run_id = authority.resource_id.as_str();
    let committed = claims::protected_write(tx, authority, expected, |tx| {
        require_live(tx, run_id, "start a node attempt of")?;
        insert_attempt(tx, authority, attempt, None)?;
        Ok(((), RunEvent::new("node.started", Actor::Host)))
    })?;
    Ok(committed.revision)
}

/// `node.finished` / `node.failed`: settle the run's unfinished attempt.
pub fn finish_attempt(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    attempt_id: &str,
    outcome: &AttemptOutcome,
) -> StoreResult<i64> {
    let finish = Finish {
        attempt_id,
        started_here: None,
        outcome,
    };
    finish_attempt_with(tx, authority, expected, &finish, |_| Ok(()))
}

/// Which attempt a finish settles. `started_here` records a node that was never started
/// (a pure compute node, or a notify node whose message commits with its result): the
/// attempt is inserted already finished, so the step costs one commit.
pub struct Finish<'a> {
    pub attempt_id: &'a str,
    pub started_here: Option<&'a NewAttempt>,
    pub outcome: &'a AttemptOutcome,
}

/// Settle an attempt and apply `also` (e.g. a notification message, or the request it
/// answers) in the same protected write, `also` first. The attempt must be the run's unfinished one (running, or waiting for an answer
/// that has arrived), or be started here.
pub fn finish_attempt_with(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    finish: &Finish<'_>,
    also: impl FnOnce(&WriteTx<'_>) -> StoreResult<()>,
) -> StoreResult<i64> {
    let run_id = authority.resource_id.as_str();
    let committed = claims::protected_write(tx, authority, expected, |tx| {
        require_live(tx, run_id, "finish a node attempt of")?;
        let event_type = match finish.started_here {
            Some(attempt) => {
                assert_eq!(attempt.attempt_id, finish.attempt_id, "one attempt per finish");
                // Recorded already settled: one row write, and never an unfinished row that
                // the same commit would settle again.
                insert_attempt(tx, authority, attempt, Some(finish.outcome))?;
                also(tx)?;
                Ended::of(finish.outcome).event_type
            }
            None => {
                // What settles with the attempt (a request it answered, a message) goes
                // first, so the attempt's own checks see it.
                also(tx)?;
                settle_unfinished(tx, run_id, finish.attempt_id, finish.outcome)?
            }
        };
        Ok(((), RunEvent::new(event_type, Actor::Host)))
    })?;
    Ok(committed.revision)
}

/// The columns a settled attempt records.
struct Ended<'a> {
    status: AttemptStatus,
    output: Option<&'a KeptJson>,
    error: Option<&'a KeptJson>,
    event_type: &'static str,
}

impl<'a> Ended<'a> {
    fn of(outcome: &'a AttemptOutcome) -> Self {
        match outcome {
            AttemptOutcome::Completed { output } => Self {
                status: AttemptStatus::Completed,
                output: output.as_ref(),
                error: None,
                event_type: "node.finished",
            },
            AttemptOutcome::Failed { error } => Self {
                status: AttemptStatus::Failed,
                output: None,
                error: error.as_ref(),
                event_type: "node.failed",
            },
        }
    }

    fn output_hash(&self) -> Option<&'a str> {
        self.output.map(|kept| kept.sha256.as_str())
    }

    fn output_inline(&self) -> Option<&'a [u8]> {
        self.output.and_then(|kept| kept.inline.as_deref())
    }

    fn error_hash(&self) -> Option<&'a str> {
        self.error.map(|kept| kept.sha256.as_str())
    }

    fn error_inline(&self) -> Option<&'a [u8]> {
        self.error.and_then(|kept| kept.inline.as_deref())
    }
}

fn settle_unfinished(
    tx: &WriteTx<'_>,
    run_id: &str,
    attempt_id: &str,
    outcome: &AttemptOutcome,
) -> StoreResult<&'static str> {
    let ended = Ended::of(outcome);
    // A waiting attempt finishes only once its request was answered: a runner cannot walk
    // past a pending request (it would stay pending on a run that moved on).
    let updated = tx
        .conn()
        .prepare_cached(
            "UPDATE node_attempts SET status = ?1, output_hash = ?2, error_hash = ?3, finished_at = ?4,
                                      output_inline = ?7, error_inline = ?8
             WHERE attempt_id = ?5 AND run_id = ?6
               AND (status = 'running'
                    OR (status = 'waiting' AND NOT EXISTS (SELECT 1 FROM interactive_requests r
                        WHERE r.attempt_id = node_attempts.attempt_id AND r.status = 'pending')))",
        )?
        .execute(params![
            ended.status.as_str(),
            ended.output_hash(),
            ended.error_hash(),
            tx.now_ms(),
            attempt_id,
            run_id,
            ended.output_inline(),
            ended.error_inline()
        ])?;
    if updated != 1 {
        return Err(StoreError::AttemptNotActive {
            run_id: run_id.to_string(),
            attempt_id: attempt_id.to_string(),
        });
    }
    if ended.status == AttemptStatus::Completed {
        count_attempts(tx, run_id, 0, 1)?;
    }
    Ok(ended.event_type)
}

/// A node that was never started, recorded already settled (a pure compute node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledAttempt {
    pub attempt: NewAttempt,
    pub outcome: AttemptOutcome,
}

/// The most attempts one `record_settled` records (a runner's batch of pure results).
pub const SETTLED_ATTEMPTS_MAX: usize = 32;

/// `nodes.finished`: nodes that were never started, each recorded already settled, in one
/// protected write with one event per node at consecutive revisions, in order. None of them
/// leaves an unfinished attempt, so the run's lack of one is checked once.
pub fn record_settled(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    settled: &[SettledAttempt],
) -> StoreResult<i64> {
    assert!(
        (1..=SETTLED_ATTEMPTS_MAX).contains(&settled.len()),
        "a batch of settled attempts holds 1 to {SETTLED_ATTEMPTS_MAX}"
    );
    let run_id = authority.resource_id.as_str();
    let committed = claims::protected_write_each(tx, authority, expected, |tx| {
        require_live(tx, run_id, "record node results of")?;
        refuse_unfinished(tx, run_id)?;
        let settings = super::settings::current_number(tx.conn(), run_id)?;
        let mut events = Vec::with_capacity(settled.len());
        let mut completed = 0;
        for one in settled {
            super::settings::check_version_of(settings, one.attempt.settings_change_number)?;
            completed += i64::from(insert_attempt_row(tx, authority, &one.attempt, Some(&one.outcome))?);
            events.push(RunEvent::new(Ended::of(&one.outcome).event_type, Actor::Host));
        }
        // One count for the whole batch: a statement per attempt was ~5 % of a tight loop.
        count_attempts(tx, run_id, settled.len() as i64, completed)?;
        Ok(((), events))
    })?;
    Ok(committed.revision)
}

/// Insert a new attempt, running or (`ended`) already settled; refused while the run has
/// another unfinished one.
fn insert_attempt(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    attempt: &NewAttempt,
    ended: Option<&AttemptOutcome>,
) -> StoreResult<()> {
    let run_id = authority.resource_id.as_str();
    refuse_unfinished(tx, run_id)?;
    super::settings::check_attempt_version(tx.conn(), run_id, attempt.settings_change_number)?;
    let completed = insert_attempt_row(tx, authority, attempt, ended)?;
    count_attempts(tx, run_id, 1, i64::from(completed))
}

fn refuse_unfinished(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    match unfinished_attempt_id(tx, run_id)? {
        Some(open) => Err(StoreError::AttemptNotActive {
            run_id: run_id.to_string(),
            attempt_id: open,
        }),
        None => Ok(()),
    }
}

/// The attempt's row, after the caller checked that the run has no unfinished attempt and
/// that the attempt's settings version is one of the run's. Whether it was inserted
/// completed; the caller counts what it inserted (`count_attempts`), once per write.
fn insert_attempt_row(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    attempt: &NewAttempt,
    ended: Option<&AttemptOutcome>,
) -> StoreResult<bool> {
    if attempt.visit < 1 {
        return Err(StoreError::InvalidInput {
            what: "node visit",
            detail: format!("{} (visits count from 1)", attempt.visit),
        });
    }
    let run_id = authority.resource_id.as_str();
    let now = tx.now_ms();
    let ended = ended.map(Ended::of);
    let (status, finished_at) = match &ended {
        None => (AttemptStatus::Running, None),
        Some(ended) => (ended.status, Some(now)),
    };
    let output_hash = ended.as_ref().and_then(Ended::output_hash);
    let error_hash = ended.as_ref().and_then(Ended::error_hash);
    let output_inline = ended.as_ref().and_then(Ended::output_inline);
    let error_inline = ended.as_ref().and_then(Ended::error_inline);
    tx.conn()
        .prepare_cached(
            "INSERT INTO node_attempts (attempt_id, run_id, node_id, node_path, visit, node_type, status,
                        lease_generation, started_at, deadline_at, timeout_ms, settings_change_number,
                        output_hash, error_hash, finished_at, output_inline, error_inline)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )?
        .execute(params![
            attempt.attempt_id,
            run_id,
            attempt.node_id,
            attempt.node_path,
            attempt.visit,
            attempt.node_type,
            status.as_str(),
            authority.generation,
            now,
            attempt.deadline_at,
            attempt.timeout_ms,
            attempt.settings_change_number,
            output_hash,
            error_hash,
            finished_at,
            output_inline,
            error_inline
        ])?;
    Ok(status == AttemptStatus::Completed)
}

/// Count attempts into their run's row (`runs.attempt_count`, `runs.completed_attempt_count`):
/// every write that adds an attempt or completes one calls this in its transaction (an ended
/// attempt never changes status again, and attempts go only with their whole run), so a
/// view reads a run's progress without counting its history. `state verify` checks them.
fn count_attempts(tx: &WriteTx<'_>, run_id: &str, added: i64, completed: i64) -> StoreResult<()> {
    assert!(added >= 0 && completed >= 0, "attempt counts only grow");
    let counted = tx
        .conn()
        .prepare_cached(
            "UPDATE runs SET attempt_count = attempt_count + ?1,
                             completed_attempt_count = completed_attempt_count + ?2
             WHERE run_id = ?3",
        )?
        .execute(params![added, completed, run_id])?;
    if counted != 1 {
        return Err(StoreError::RunNotFound {
            run_id: run_id.to_string(),
        });
    }
    Ok(())
}

fn require_live(tx: &WriteTx<'_>, run_id: &str, transition: &'static str) -> StoreResult<()> {
    let run = read_run(tx, run_id)?;
    if run.status == RunStatus::Running && run.queue == QueueStatus::Running {
        return Ok(());
    }
    Err(StoreError::InvalidTransition {
        transition,
        run_id: run_id.to_string(),
        run_status: run.status.to_string(),
        queue_status: run.queue.to_string(),
        paused: run.paused,
    })
}

/// Where a run's one unfinished attempt is read from: the partial index that keeps it one, a
/// unique lookup whose `IN` term the index already implies. Left to itself SQLite seeks
/// `(run_id, status)` once per status and builds a temporary table for the list each time.
/// A macro, not a `const`, so queries built from it are `concat!` literals: a `format!` per
/// call cost an allocation and the statement cache a hash of a fresh string (hot reads).
macro_rules! unfinished_attempt_from {
    () => {
        "FROM node_attempts INDEXED BY node_attempts_one_unfinished_per_run
     WHERE run_id = ?1 AND status IN ('running', 'waiting')"
    };
}
pub(crate) use unfinished_attempt_from;

/// The run's unfinished attempt, if any.
pub fn unfinished_attempt_id(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<Option<String>> {
    let id = tx
        .conn()
        .prepare_cached(concat!("SELECT attempt_id ", unfinished_attempt_from!()))?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    Ok(id)
}

/// Settle the unfinished attempt (if any) with a final status.
pub(crate) fn close_unfinished(tx: &WriteTx<'_>, run_id: &str, status: AttemptStatus) -> StoreResult<()> {
    assert!(
        !matches!(status, AttemptStatus::Running | AttemptStatus::Waiting),
        "closing an attempt needs a final status"
    );
    let closed = tx
        .conn()
        .prepare_cached(
            "UPDATE node_attempts SET status = ?1, finished_at = ?2
             WHERE run_id = ?3 AND status IN ('running', 'waiting')",
        )?
        .execute(params![status.as_str(), tx.now_ms(), run_id])?;
    if status == AttemptStatus::Completed && closed > 0 {
        count_attempts(tx, run_id, 0, closed as i64)?;
    }
    Ok(())
}

/// Interrupt the run's running attempt (it reruns, or is judged by its effect, on resume).
/// A waiting attempt stays waiting: its request, and any answer, still belong to it.
pub(crate) fn interrupt_running(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE node_attempts SET status = 'interrupted', finished_at = ?1
             WHERE run_id = ?2 AND status = 'running'",
        )?
        .execute(params![tx.now_ms(), run_id])?;
    Ok(())
}

/// End a waiting attempt whose request closed without an answer (`failed` by the
/// unproductive-turn rule, or `timed_out` by its deadline), with its stored error; its run's
/// next runner replays it and routes on it.
pub(crate) fn end_waiting(
    tx: &WriteTx<'_>,
    run_id: &str,
    attempt_id: &str,
    timed_out: bool,
    error_hash: &str,
) -> StoreResult<()> {
    let status = if timed_out { "timed_out" } else { "failed" };
    let updated = tx
        .conn()
        .prepare_cached(
            "UPDATE node_attempts SET status = ?1, error_hash = ?2, finished_at = ?3
             WHERE attempt_id = ?4 AND run_id = ?5 AND status = 'waiting'",
        )?
        .execute(params![status, error_hash, tx.now_ms(), attempt_id, run_id])?;
    if updated != 1 {
        return Err(StoreError::AttemptNotActive {
            run_id: run_id.to_string(),
            attempt_id: attempt_id.to_string(),
        });
    }
    Ok(())
}

/// A waiting checkpoint attempt was answered: it completes with the answer as its output
/// (its run is settled by its continuation in the same transaction).
pub(crate) fn complete_waiting(tx: &WriteTx<'_>, run_id: &str, attempt_id: &str, output_hash: &str) -> StoreResult<()> {
    let updated = tx
        .conn()
        .prepare_cached(
            "UPDATE node_attempts SET status = 'completed', output_hash = ?1, finished_at = ?2
             WHERE attempt_id = ?3 AND run_id = ?4 AND status = 'waiting'",
        )?
        .execute(params![output_hash, tx.now_ms(), attempt_id, run_id])?;
    if updated != 1 {
        return Err(StoreError::AttemptNotActive {
            run_id: run_id.to_string(),
            attempt_id: attempt_id.to_string(),
        });
    }
    count_attempts(tx, run_id, 0, 1)
}

/// The running attempt (if any) now waits for input and stays unfinished.
pub(crate) fn mark_unfinished_waiting(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE node_attempts SET status = 'waiting' WHERE run_id = ?1 AND status = 'running'")?
        .execute([run_id])?;
    Ok(())
}
