//! Checkpoint continuations (spec "Interactive Pi execution": an answered ordinary
//! checkpoint starts a continuation run). One transaction records the answer as the
//! checkpoint's accepted submission and its attempt's output, settles the waiting run by its
//! continuation (completed, detail `continued`, no terminal message) and queues the
//! continuation: a new run that names its parent and the checkpoint attempt, with the same
//! workflow, source, definition, input, settings and session, in the same root tree. Its
//! runner gets `continue`, replays the parent's history with the answer as the checkpoint's
//! output and goes on from the checkpoint's edge. Pending follow-ups move to the
//! continuation, so they run only after the chain's final leaf completed.
//!
//! Architecture Invariant: a checkpoint is answered only here; `interactions::submit` refuses
//! checkpoint requests, so no second path answers one in place.

use rusqlite::params;

use super::error::{StoreError, StoreResult};
use super::interactions::Submission;
use super::runs::{self, ExecutionMode, NewRun, RunOrigin};
use super::writer::WriteTx;

/// A person's (or the model's `answer` action's) answer to a waiting run's checkpoint.
pub struct CheckpointAnswer<'a> {
    /// The answer as a submission of the checkpoint's request (accepted at once: a checkpoint
    /// has no check).
    pub answer: Submission<'a>,
    /// The continuation's run ID (new; `RunExists` otherwise).
    pub continuation_run_id: &'a str,
}

/// What the answer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continued {
    /// The parent's revision after it was settled.
    pub revision: i64,
    pub continuation_run_id: String,
}

/// The parent facts a continuation copies.
struct Parent {
    workflow_name: String,
    project_path: String,
    root_run_id: String,
    definition_digest: String,
    workflow_source_json: String,
    input_hash: String,
    execution: ExecutionMode,
    attempt_id: String,
}

/// Answer the pending checkpoint `answer.request_id` of a waiting, unpaused, unclaimed run
/// and queue its continuation, in the caller's transaction. Refused (changing nothing) when
/// the request is not that run's pending checkpoint.
pub fn answer_checkpoint(
    tx: &WriteTx<'_>,
    checkpoint: &CheckpointAnswer<'_>,
    expected: Option<i64>,
) -> StoreResult<Continued> {
    let answer = &checkpoint.answer;
    let parent = parent_of(tx, answer)?;
    let revision = super::run_waits::settle_by_continuation(tx, answer.run_id, expected, |tx| {
        record_answer(tx, answer, &parent.attempt_id)
    })?;
    let continuation = NewRun {
        run_id: checkpoint.continuation_run_id.to_string(),
        workflow_name: parent.workflow_name,
        project_path: parent.project_path,
        parent_run_id: Some(answer.run_id.to_string()),
        root_run_id: Some(parent.root_run_id),
        definition_digest: parent.definition_digest,
        origin: RunOrigin::Continuation {
            parent_attempt_id: parent.attempt_id,
        },
        workflow_source_json: parent.workflow_source_json,
        input_hash: parent.input_hash,
        execution: parent.execution,
    };
    runs::queue_run(tx, &continuation)?;
    move_follow_ups(tx, answer.run_id, checkpoint.continuation_run_id)?;
    Ok(Continued {
        revision,
        continuation_run_id: checkpoint.continuation_run_id.to_string(),
    })
}

fn parent_of(tx: &WriteTx<'_>, answer: &Submission<'_>) -> StoreResult<Parent> {
    let found = tx
        .conn()
        .prepare_cached(
            "SELECT r.workflow_name, r.project_path, r.root_run_id, r.definition_digest, r.workflow_source_json,
                    r.input_hash, b.origin_session_id, i.attempt_id
             FROM interactive_requests i
             JOIN runs r ON r.run_id = i.run_id
             JOIN run_bindings b ON b.run_id = r.run_id
             WHERE i.request_id = ?1 AND i.run_id = ?2 AND i.status = 'pending' AND i.kind = 'checkpoint'",
        )?
        .query_row(params![answer.request_id, answer.run_id], |row| {
            let session: Option<String> = row.get(6)?;
            Ok(Parent {
                workflow_name: row.get(0)?,
                project_path: row.get(1)?,
                root_run_id: row.get(2)?,
                definition_digest: row.get(3)?,
                workflow_source_json: row.get(4)?,
                input_hash: row.get(5)?,
                execution: match session {
                    Some(origin_session_id) => ExecutionMode::Interactive { origin_session_id },
                    None => ExecutionMode::Headless,
                },
                attempt_id: row.get(7)?,
            })
        });
    match found {
        Ok(parent) => Ok(parent),
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(StoreError::InvalidInput {
            what: "checkpoint answer",
            detail: format!(
                "run {} is not waiting for input at that checkpoint; check `pi-workflows run status`",
                answer.run_id
            ),
        }),
        Err(err) => Err(err.into()),
    }
}

/// The answer is the checkpoint's accepted submission and its attempt's output.
fn record_answer(tx: &WriteTx<'_>, answer: &Submission<'_>, attempt_id: &str) -> StoreResult<()> {
    let conn = tx.conn();
    let now = tx.now_ms();
    conn.prepare_cached(
        "INSERT INTO interactive_submissions (submission_id, request_id, idempotency_key, payload_hash, outcome,
                                              receipt_hash, submitted_at, settled_at)
         VALUES (?1, ?2, ?3, ?4, 'accepted', ?4, ?5, ?5)",
    )?
    .execute(params![
        answer.submission_id,
        answer.request_id,
        answer.idempotency_key,
        answer.payload_hash,
        now
    ])?;
    conn.prepare_cached(
        "UPDATE interactive_requests SET status = 'settled', accepted_submission_id = ?1, settled_at = ?2
         WHERE request_id = ?3 AND status = 'pending'",
    )?
    .execute(params![answer.submission_id, now, answer.request_id])?;
    super::messages::cancel_pending_of_source(tx, answer.request_id)?;
    super::attempts::complete_waiting(tx, answer.run_id, attempt_id, answer.payload_hash)
}

/// The chain's final leaf runs the follow-ups: pending ones move with the chain.
fn move_follow_ups(tx: &WriteTx<'_>, parent_run_id: &str, continuation_run_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE workflow_messages SET run_id = ?1, updated_at = ?2
             WHERE run_id = ?3 AND kind = 'followUp' AND status = 'pending'",
        )?
        .execute(params![continuation_run_id, tx.now_ms(), parent_run_id])?;
    Ok(())
}
