//! Interactive requests (agent steps, checkpoints, decisions) and their submissions.
//!
//! Architecture Invariant: a run waits only with its pending request recorded in the same
//! transaction; one attempt has at most one request (a UNIQUE constraint enforces it).
//! A rejected submission leaves the request pending.

use rusqlite::{OptionalExtension, params};

use super::attempts::{self, AttemptOutcome, Finish};
use super::blobs::KeptJson;
use super::claims::ClaimAuthority;
use super::error::{StoreError, StoreResult};
use super::messages::{self, MessageKind, NewMessage};
use super::runs;
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

wire_enum! {
    pub enum InteractionKind {
        Agent = "agent",
        Assistant = "assistant",
        Checkpoint = "checkpoint",
        Decision = "decision",
    }
}

/// `interaction.requested` of the run's running attempt.
pub struct NewInteraction {
    pub request_id: String,
    pub attempt_id: String,
    pub kind: InteractionKind,
    /// Digest of the stored request contract (prompt, expected output, summary).
    pub contract_hash: String,
    /// The node's resolved wall-clock deadline, committed before the request.
    pub deadline_at: Option<i64>,
    /// A protected decision's request and subject: present exactly for kind `decision`.
    pub decision: Option<super::decisions::NewDecision>,
}

/// Record the request, make the attempt wait, park the run as `waiting` and release the
/// claim, in one protected write. An interactive run also queues its initial step message.
pub fn request(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    interaction: &NewInteraction,
) -> StoreResult<i64> {
    if (interaction.kind == InteractionKind::Decision) != interaction.decision.is_some() {
        return Err(StoreError::InvalidInput {
            what: "interaction",
            detail: "a decision request carries its decision (audience, presentation, choices), and only it does"
                .to_string(),
        });
    }
    runs::wait_run_with(tx, authority, expected, |tx, run_id| {
        require_running_attempt(tx, run_id, &interaction.attempt_id)?;
        let session = messages::origin_session(tx, run_id)?;
        tx.conn()
            .prepare_cached(
                "INSERT INTO interactive_requests (request_id, run_id, attempt_id, target_session_id, kind,
                                                   contract_hash, status, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7)",
            )?
            .execute(params![
                interaction.request_id,
                run_id,
                interaction.attempt_id,
                session,
                interaction.kind.as_str(),
                interaction.contract_hash,
                tx.now_ms()
            ])?;
        if let Some(decision) = &interaction.decision {
            super::decisions::record(tx, run_id, &interaction.attempt_id, &interaction.request_id, decision)?;
        }
        if interaction.deadline_at.is_some() {
            tx.conn()
                .prepare_cached("UPDATE node_attempts SET deadline_at = ?1 WHERE attempt_id = ?2")?
                .execute(params![interaction.deadline_at, interaction.attempt_id])?;
        }
        if let Some(session) = session.as_deref() {
            let kind = match interaction.kind {
                InteractionKind::Decision => MessageKind::Decision,
                _ => MessageKind::Step,
            };
            messages::queue_message(
                tx,
                &NewMessage {
                    run_id,
                    target_session_id: session,
                    kind,
                    source_id: &interaction.request_id,
                    reason: (kind == MessageKind::Step).then_some("initial"),
                    content_hash: &interaction.contract_hash,
                },
            )?;
        }
        Ok(())
    })
}

/// A paused run resumes at its pending agent or assistant step: the step's answer revision
/// advances and one `resumed` step message presents it again (the pause cancelled its
/// pending ones). A protected decision never started a model turn, so its revision and
/// messages stay as they were; a headless run has no session to present to.
pub(super) fn present_resumed_step(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    let step: Option<(String, String, String)> = tx
        .conn()
        .prepare_cached(
            "SELECT request_id, target_session_id, contract_hash FROM interactive_requests
             WHERE run_id = ?1 AND status = 'pending' AND kind IN ('agent', 'assistant')
               AND target_session_id IS NOT NULL",
        )?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((request_id, session, contract_hash)) = step else {
        return Ok(());
    };
    tx.conn()
        .prepare_cached("UPDATE interactive_requests SET revision = revision + 1 WHERE request_id = ?1")?
        .execute([&request_id])?;
    if messages::has_pending_step(tx.conn(), &request_id)? {
        return Ok(());
    }
    messages::queue_message(
        tx,
        &NewMessage {
            run_id,
            target_session_id: &session,
            kind: MessageKind::Step,
            source_id: &request_id,
            reason: Some("resumed"),
            content_hash: &contract_hash,
        },
    )?;
    Ok(())
}

fn require_running_attempt(tx: &WriteTx<'_>, run_id: &str, attempt_id: &str) -> StoreResult<()> {
    let status: Option<String> = tx
        .conn()
        .prepare_cached("SELECT status FROM node_attempts WHERE attempt_id = ?1 AND run_id = ?2")?
        .query_row(params![attempt_id, run_id], |row| row.get(0))
        .optional()?;
    if status.as_deref() == Some("running") {
        return Ok(());
    }
    Err(StoreError::AttemptNotActive {
        run_id: run_id.to_string(),
        attempt_id: attempt_id.to_string(),
    })
}

/// A submission the validating runner judged.
pub struct Judged<'a> {
    pub request_id: &'a str,
    pub submission_id: &'a str,
    /// Digest of the stored verdict (the accepted output or the actionable error).
    pub receipt_hash: &'a str,
}

/// `interaction.accepted`: the submission wins, the request settles and its attempt
/// completes with `output_hash`, in one protected write.
pub fn accept(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    judged: &Judged<'_>,
) -> StoreResult<i64> {
    let attempt_id = pending_request_attempt(tx, &authority.resource_id, judged.request_id)?;
    let outcome = AttemptOutcome::Completed {
        output: Some(KeptJson::stored(judged.receipt_hash.to_string())),
    };
    let finish = Finish {
        attempt_id: &attempt_id,
        started_here: None,
        outcome: &outcome,
    };
    attempts::finish_attempt_with(tx, authority, expected, &finish, |tx| {
        settle_submission(tx, judged, "accepted")?;
        let now = tx.now_ms();
        tx.conn()
            .prepare_cached(
                "UPDATE interactive_requests SET status = 'settled', accepted_submission_id = ?1, settled_at = ?2
                 WHERE request_id = ?3 AND status = 'pending'",
            )?
            .execute(params![judged.submission_id, now, judged.request_id])?;
        // Acceptance closes the step: nothing of it is left to present or to time.
        super::deadlines::close_intervals_of_request(tx, judged.request_id)?;
        messages::cancel_pending_of_source(tx, judged.request_id)
    })
}

/// `interaction.rejected`: the submission is rejected with a stored error; the request
/// stays pending and the run waits again (claim released).
pub fn reject(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    judged: &Judged<'_>,
) -> StoreResult<i64> {
    pending_request_attempt(tx, &authority.resource_id, judged.request_id)?;
    runs::wait_run_with(tx, authority, expected, |tx, _| {
        settle_submission(tx, judged, "rejected")
    })
}

fn pending_request_attempt(tx: &WriteTx<'_>, run_id: &str, request_id: &str) -> StoreResult<String> {
    tx.conn()
        .prepare_cached(
            "SELECT attempt_id FROM interactive_requests WHERE request_id = ?1 AND run_id = ?2 AND status = 'pending'",
        )?
        .query_row(params![request_id, run_id], |row| row.get(0))
        .optional()?
        .ok_or_else(|| StoreError::InvalidInput {
            what: "interaction",
            detail: "no pending request with that ID in this run".to_string(),
        })
}

fn settle_submission(tx: &WriteTx<'_>, judged: &Judged<'_>, outcome: &str) -> StoreResult<()> {
    let updated = tx
        .conn()
        .prepare_cached(
            "UPDATE interactive_submissions SET outcome = ?1, settled_at = ?2, receipt_hash = ?3
             WHERE submission_id = ?4 AND request_id = ?5 AND outcome = 'validating'",
        )?
        .execute(params![
            outcome,
            tx.now_ms(),
            judged.receipt_hash,
            judged.submission_id,
            judged.request_id
        ])?;
    if updated != 1 {
        return Err(StoreError::InvalidInput {
            what: "submission",
            detail: "no validating submission with that ID for this request".to_string(),
        });
    }
    Ok(())
}

/// An answer or candidate for a pending request, from a client.
pub struct Submission<'a> {
    pub run_id: &'a str,
    pub request_id: &'a str,
    pub submission_id: &'a str,
    /// The client's key: a repeat with the same key and payload adopts the first result.
    pub idempotency_key: &'a str,
    pub payload_hash: &'a str,
}

/// How a submission was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Recorded now; the run is queued to continue (or to validate the candidate).
    Recorded { revision: i64 },
    /// The same key and payload were submitted before: nothing changed.
    Adopted { submission_id: String },
}

/// Why no submission path takes a protected decision.
const PERSON_ONLY: &str = "the pending request is a protected decision: only a person answers it, with `decision answer` \
                           (in Pi: /workflow answer)";

/// The submission ID of a client command: derived from its durable request fingerprint, so
/// a retry names the same submission.
pub fn submission_id_of(command_fingerprint: &str) -> String {
    format!("sub-{}", &command_fingerprint[..24])
}

/// Submit input for a waiting run's pending request: agent output (or a decision's answer)
/// becomes a `validating` candidate that a supervised runner accepts or rejects; the run is
/// queued for it. A checkpoint is refused here: `continuations::answer_checkpoint` answers it.
pub fn submit(tx: &WriteTx<'_>, submission: &Submission<'_>, expected: Option<i64>) -> StoreResult<Submitted> {
    if let Some((existing, payload)) = submission_by_key(tx, submission.request_id, submission.idempotency_key)? {
        if payload != submission.payload_hash {
            return Err(StoreError::InvalidInput {
                what: "submission",
                detail: "this idempotency key was used with another payload; use a new key".to_string(),
            });
        }
        return Ok(Submitted::Adopted {
            submission_id: existing,
        });
    }
    let kind: Option<String> = tx
        .conn()
        .prepare_cached(
            "SELECT kind FROM interactive_requests WHERE request_id = ?1 AND run_id = ?2 AND status = 'pending'",
        )?
        .query_row(params![submission.request_id, submission.run_id], |row| row.get(0))
        .optional()?;
    let Some(kind) = kind else {
        return Err(StoreError::InvalidInput {
            what: "submission",
            detail: closed_request_detail(tx.conn(), submission.run_id, submission.request_id)?,
        });
    };
    if kind == InteractionKind::Checkpoint.as_str() {
        // One path answers a checkpoint, and it starts a continuation run (`continuations`).
        return Err(StoreError::InvalidInput {
            what: "submission",
            detail: "the pending request is a checkpoint; answer it with `checkpoint answer` (it continues the run)"
                .to_string(),
        });
    }
    if kind == InteractionKind::Decision.as_str() {
        // A protected decision is a person's: only `decisions::answer` settles it.
        return Err(StoreError::InvalidInput {
            what: "submission",
            detail: PERSON_ONLY.to_string(),
        });
    }
    let revision = super::run_waits::continue_waiting(tx, submission.run_id, expected, |tx| {
        let now = tx.now_ms();
        tx.conn()
            .prepare_cached(
                "INSERT INTO interactive_submissions (submission_id, request_id, idempotency_key, payload_hash, outcome,
                                                      submitted_at)
                 VALUES (?1, ?2, ?3, ?4, 'validating', ?5)",
            )?
            .execute(params![
                submission.submission_id,
                submission.request_id,
                submission.idempotency_key,
                submission.payload_hash,
                now
            ])?;
        Ok(())
    })?;
    Ok(Submitted::Recorded { revision })
}

/// Why a submission found no pending request: what became of the step, so the model or
/// person knows to stop (nothing was recorded).
fn closed_request_detail(conn: &rusqlite::Connection, run_id: &str, request_id: &str) -> StoreResult<String> {
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM interactive_requests WHERE request_id = ?1 AND run_id = ?2")?
        .query_row(params![request_id, run_id], |row| row.get(0))
        .optional()?;
    Ok(match status.as_deref() {
        Some("timed_out") => {
            "this step timed out (its time limit was spent) and the workflow went on without it; nothing was submitted"
        }
        Some("settled") => "this step was already answered; nothing was submitted",
        Some("cancelled") => "this step was closed (it failed, or its run ended); nothing was submitted",
        _ => "the run has no pending request with that ID; check `pi-workflows run status`",
    }
    .to_string())
}

fn submission_by_key(tx: &WriteTx<'_>, request_id: &str, key: &str) -> StoreResult<Option<(String, String)>> {
    Ok(tx
        .conn()
        .prepare_cached(
            "SELECT submission_id, payload_hash FROM interactive_submissions WHERE request_id = ?1 AND idempotency_key = ?2",
        )?
        .query_row(params![request_id, key], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// A validating runner ended without a verdict: its candidates are rejected with a
/// retryable error and the run waits again at the same request (claim released). Returns
/// false (changing nothing) when the run is not validating a pending request.
pub fn abandon_validation(tx: &WriteTx<'_>, authority: &ClaimAuthority) -> StoreResult<bool> {
    let run_id = authority.resource_id.as_str();
    let validating: bool = tx
        .conn()
        .prepare_cached(
            "SELECT count(*) > 0 FROM interactive_requests r JOIN node_attempts a ON a.attempt_id = r.attempt_id
             WHERE r.run_id = ?1 AND r.status = 'pending' AND a.status = 'waiting'",
        )?
        .query_row([run_id], |row| row.get(0))?;
    if !validating {
        return Ok(false);
    }
    let error = serde_json::json!({
        "code": "validationInterrupted",
        "message": "the validator stopped before it judged this submission; submit it again",
    });
    let error_hash = super::blobs::put_json(tx, &error, 1024)?;
    runs::wait_run_with(tx, authority, None, |tx, run_id| {
        let now = tx.now_ms();
        tx.conn()
            .prepare_cached(
                "UPDATE interactive_submissions SET outcome = 'rejected', settled_at = ?1, receipt_hash = ?2
                 WHERE outcome = 'validating' AND request_id IN
                   (SELECT request_id FROM interactive_requests WHERE run_id = ?3 AND status = 'pending')",
            )?
            .execute(params![now, error_hash, run_id])?;
        Ok(())
    })?;
    Ok(true)
}

/// A submission's outcome (`validating`, `accepted`, `rejected`) and its verdict receipt.
pub fn submission_outcome(
    conn: &rusqlite::Connection,
    submission_id: &str,
) -> StoreResult<Option<(String, Option<String>)>> {
    Ok(conn
        .prepare_cached("SELECT outcome, receipt_hash FROM interactive_submissions WHERE submission_id = ?1")?
        .query_row([submission_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The kind of a run's pending request with that ID, if it is pending.
pub fn pending_kind(conn: &rusqlite::Connection, run_id: &str, request_id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT kind FROM interactive_requests WHERE request_id = ?1 AND run_id = ?2 AND status = 'pending'",
        )?
        .query_row(params![request_id, run_id], |row| row.get(0))
        .optional()?)
}

/// Keys (type, key pairs) one request may hold updates for.
pub const UPDATE_KEYS_PER_REQUEST_MAX: i64 = 1024;

/// Record the latest value of one `(type, key)` update of a pending agent request of a run
/// that is not paused. Not a run transition (a live runner is not fenced). Returns the update's sequence number.
pub fn record_update(
    tx: &WriteTx<'_>,
    run_id: &str,
    request_id: &str,
    update_type: &str,
    update_key: &str,
    data_hash: &str,
) -> StoreResult<i64> {
    // A paused run takes no updates (spec "Pause and cancellation"): its step waits unchanged.
    let run = runs::read_run(tx, run_id)?;
    run.require("update a step of", !run.paused)?;
    match pending_kind(tx.conn(), run_id, request_id)? {
        Some(kind) if kind == InteractionKind::Agent.as_str() => {}
        Some(kind) => {
            return Err(StoreError::InvalidInput {
                what: "update",
                detail: format!("the pending request is a {kind}; only agent steps take updates"),
            });
        }
        None => {
            return Err(StoreError::InvalidInput {
                what: "update",
                detail: "the run has no pending request with that ID".to_string(),
            });
        }
    }
    let conn = tx.conn();
    let (keys, known, seq): (i64, bool, i64) = conn
        .prepare_cached(
            "SELECT count(*), count(*) FILTER (WHERE update_type = ?2 AND update_key = ?3) > 0,
                    coalesce(max(update_seq), 0) + 1
             FROM interaction_updates WHERE request_id = ?1",
        )?
        .query_row(params![request_id, update_type, update_key], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    if !known && keys >= UPDATE_KEYS_PER_REQUEST_MAX {
        return Err(StoreError::InvalidInput {
            what: "update",
            detail: format!("a step keeps at most {UPDATE_KEYS_PER_REQUEST_MAX} update keys; reuse one"),
        });
    }
    conn.prepare_cached(
        "INSERT INTO interaction_updates (request_id, update_type, update_key, update_seq, data_hash, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (request_id, update_type, update_key)
         DO UPDATE SET update_seq = excluded.update_seq, data_hash = excluded.data_hash, updated_at = excluded.updated_at",
    )?
    .execute(params![request_id, update_type, update_key, seq, data_hash, tx.now_ms()])?;
    // The request's newest update number grew by one.
    super::presentation::changed(tx, run_id, 1)?;
    Ok(seq)
}

/// One stored update (the latest of its type and key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFacts {
    pub update_type: String,
    pub update_key: String,
    pub update_seq: i64,
    pub data_hash: String,
    pub updated_at: i64,
}

/// The newest updates of a request (at most `limit`, newest first).
pub fn latest_updates(conn: &rusqlite::Connection, request_id: &str, limit: usize) -> StoreResult<Vec<UpdateFacts>> {
    updates_before(conn, request_id, None, limit)
}

/// The newest updates of a request older than the update seq `before` (all when `None`), at
/// most `limit`, newest first.
pub fn updates_before(
    conn: &rusqlite::Connection,
    request_id: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<UpdateFacts>> {
    Ok(conn
        .prepare_cached(
            "SELECT update_type, update_key, update_seq, data_hash, updated_at FROM interaction_updates
             WHERE request_id = ?1 AND update_seq < ?2 ORDER BY update_seq DESC LIMIT ?3",
        )?
        .query_map(params![request_id, before.unwrap_or(i64::MAX), limit as i64], |row| {
            Ok(UpdateFacts {
                update_type: row.get(0)?,
                update_key: row.get(1)?,
                update_seq: row.get(2)?,
                data_hash: row.get(3)?,
                updated_at: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?)
}

/// The request a recorded submission answers, if the submission exists.
pub fn submission_request(conn: &rusqlite::Connection, submission_id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT request_id FROM interactive_submissions WHERE submission_id = ?1")?
        .query_row([submission_id], |row| row.get(0))
        .optional()?)
}

/// A client's value for a run's pending request.
pub struct ClientValue<'a> {
    pub run_id: &'a str,
    /// The request named by the client; the run's pending one when absent.
    pub request_id: Option<&'a str>,
    pub submission_id: &'a str,
    pub idempotency_key: &'a str,
    /// The request kind the command is for; `None` takes any.
    pub kind: Option<&'a str>,
    pub value: &'a serde_json::Value,
    pub value_bytes_max: usize,
}

/// The pending request a client names (`named`), or the run's pending one, checked to be of
/// `kind` when given (`InvalidInput` otherwise, naming the command to use).
pub fn pending_request_of(
    conn: &rusqlite::Connection,
    run_id: &str,
    named: Option<&str>,
    kind: Option<&str>,
) -> StoreResult<String> {
    super::run_view::run_facts(conn, run_id)?;
    let request_id = match named {
        Some(id) => id.to_string(),
        None => super::run_view::pending_request_brief(conn, run_id)?
            .map(|(request_id, _)| request_id)
            .ok_or_else(|| StoreError::InvalidInput {
                what: "submission",
                detail: format!("run {run_id} is not waiting for input"),
            })?,
    };
    if let (Some(kind), Some(pending)) = (kind, pending_kind(conn, run_id, &request_id)?)
        && pending != kind
    {
        let detail = match pending.as_str() {
            "decision" => PERSON_ONLY.to_string(),
            _ => format!("the pending request is of kind {pending}, not {kind}; use the matching command"),
        };
        return Err(StoreError::InvalidInput {
            what: "submission",
            detail,
        });
    }
    Ok(request_id)
}

/// Resolve the request a client's value answers, check its kind, store the value and
/// `submit` it. Returns the request ID and how the submission was taken.
pub fn submit_value(
    tx: &WriteTx<'_>,
    client: &ClientValue<'_>,
    expected: Option<i64>,
) -> StoreResult<(String, Submitted)> {
    let request_id = pending_request_of(tx.conn(), client.run_id, client.request_id, client.kind)?;
    let payload_hash = super::blobs::put_json(tx, client.value, client.value_bytes_max)?;
    let submission = Submission {
        run_id: client.run_id,
        request_id: &request_id,
        submission_id: client.submission_id,
        idempotency_key: client.idempotency_key,
        payload_hash: &payload_hash,
    };
    let submitted = submit(tx, &submission, expected)?;
    Ok((request_id, submitted))
}
