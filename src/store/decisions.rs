//! Protected human decisions (docs/STATE.md "Human decisions"): the `human_decisions` record
//! made with its interactive request, and its one resolution. The server verifies a response
//! against the declared choices (src/decision) and settles the decision in one transaction:
//! the resolution (its primary key admits one winner), the settled request, the completed
//! attempt with the response as its output, and the queued run.
//!
//! Architecture Invariant: a decision is settled only here — a person's answer (`answer`), the
//! deadline (`on_deadline`: the default, or `expired_no_default`), or the run's ending
//! (`run_endings`: `explicit_cancel` / `run_ended`). `interactions::submit` refuses decisions,
//! so neither a runner nor the model's `workflow` tool can answer one.

use rusqlite::{Connection, OptionalExtension, params};

use super::blobs;
use super::deadlines::Expired;
use super::error::{StoreError, StoreResult};
use super::events::Actor;
use super::run_waits::{self, Fence, WaitingStep};
use super::writer::WriteTx;
use crate::decision::{
    DecisionError, DecisionRequest, INPUT_TEXT_CHARS_MAX, Provenance, Response, SUBJECT_BYTES_MAX, output_of,
};

/// A node output or default response, canonical JSON bytes (a response's text is bounded by
/// its input's `maxLength`, at most `INPUT_TEXT_CHARS_MAX` characters of up to 4 bytes).
const RESPONSE_BYTES_MAX: usize = 4 * INPUT_TEXT_CHARS_MAX + 1024;

/// The decision a `humanDecision` request carries: checked, with its subject stored apart
/// from the contract (the contract is what renderers show; the subject only binds).
pub struct NewDecision {
    pub request: DecisionRequest,
    pub subject: serde_json::Value,
}

/// Record the decision of the interactive request just inserted (`interactions::request`, same
/// transaction): its audience, request digest, subject, presentation, deadline and default.
pub(super) fn record(
    tx: &WriteTx<'_>,
    run_id: &str,
    attempt_id: &str,
    request_id: &str,
    decision: &NewDecision,
) -> StoreResult<()> {
    let request = &decision.request;
    request.check()?;
    let subject_hash = blobs::put_json(tx, &decision.subject, SUBJECT_BYTES_MAX)?;
    let presentation = serde_json::to_value(&request.presentation).expect("a presentation is JSON");
    let presentation_hash = blobs::put_json(tx, &presentation, crate::decision::PRESENTATION_BYTES_MAX)?;
    let default_hash = match &request.on_timeout {
        Some(response) => Some(put_response(tx, response)?),
        None => None,
    };
    // A decision's answer revision never changes (pause and resume leave it, spec
    // "Interactive Pi execution"), so the digest made now stays the decision's.
    let revision: i64 = tx
        .conn()
        .prepare_cached("SELECT revision FROM interactive_requests WHERE request_id = ?1")?
        .query_row([request_id], |row| row.get(0))?;
    let digest = request.digest(&subject_hash, revision);
    tx.conn()
        .prepare_cached(
            "INSERT INTO human_decisions (decision_id, run_id, attempt_id, audience, request_digest, subject_hash,
                                          presentation_hash, deadline_at, default_response_hash, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            request_id,
            run_id,
            attempt_id,
            request.audience,
            digest,
            subject_hash,
            presentation_hash,
            request.deadline_at,
            default_hash,
            tx.now_ms()
        ])?;
    Ok(())
}

/// A person's answer, as sent by a client.
pub struct HumanAnswer<'a> {
    pub run_id: &'a str,
    /// The decision answered; absent: the run's pending one.
    pub decision_id: Option<&'a str>,
    /// The request digest the person saw; a different current one refuses the answer.
    pub request_digest: Option<&'a str>,
    pub response: &'a Response,
    pub expected: Option<i64>,
}

/// What settled a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub decision_id: String,
    pub revision: i64,
    pub provenance: Provenance,
    pub choice: String,
}

/// A pending decision, as the server checks answers against it.
pub struct PendingDecision {
    pub decision_id: String,
    pub attempt_id: String,
    pub request_digest: String,
    pub deadline_at: Option<i64>,
    pub request: DecisionRequest,
}

/// A person's answer wins if the decision is pending, the run is waiting and not paused, the
/// deadline has not passed, the digest (when named) is current and the response is one of the
/// choices. Anything else is refused and changes nothing.
pub fn answer(tx: &WriteTx<'_>, answer: &HumanAnswer<'_>) -> StoreResult<Resolved> {
    let pending = pending_for_answer(tx.conn(), answer.run_id, answer.decision_id)?;
    if answer
        .request_digest
        .is_some_and(|digest| digest != pending.request_digest)
    {
        return Err(DecisionError::Changed.into());
    }
    // At the deadline the default wins, even before the deadline task has recorded it.
    if pending.deadline_at.is_some_and(|deadline| tx.now_ms() >= deadline) {
        return Err(DecisionError::DeadlinePassed.into());
    }
    pending.request.check_response(answer.response)?;
    settle(
        tx,
        answer.run_id,
        &pending,
        answer.response,
        Provenance::Human,
        answer.expected,
    )
}

/// The deadline of a waiting decision passed (`deadlines::time_out`): its default wins
/// (`timeout_policy`; the revision it made), recorded under a control claim taken and
/// released in this transaction, or, with none, it is resolved `expired_no_default` and
/// `None` says the step times out like any other (the caller does that, under the same kind of
/// claim, in the same savepoint). Refused when it was settled in between or a live claim is
/// held; the caller's savepoint then rolls back whatever was written.
pub(super) fn on_deadline(tx: &WriteTx<'_>, step: &Expired) -> StoreResult<Option<i64>> {
    let pending = pending_for_answer(tx.conn(), &step.run_id, Some(&step.request_id))?;
    let Some(default) = pending.request.on_timeout.clone() else {
        insert_resolution(tx, &pending.decision_id, Provenance::ExpiredNoDefault, None)?;
        return Ok(None);
    };
    settle(tx, &step.run_id, &pending, &default, Provenance::TimeoutPolicy, None)
        .map(|resolved| Some(resolved.revision))
}

fn settle(
    tx: &WriteTx<'_>,
    run_id: &str,
    pending: &PendingDecision,
    response: &Response,
    provenance: Provenance,
    expected: Option<i64>,
) -> StoreResult<Resolved> {
    let response_hash = put_response(tx, response)?;
    let output = output_of(response, provenance);
    let output_hash = blobs::put_json(tx, &output, RESPONSE_BYTES_MAX)?;
    // A person answers a run nobody holds; the deadline's default is recorded under the
    // server's own control claim, which fences anything an older generation still holds.
    let (actor, fence) = match provenance {
        Provenance::Human => (Actor::Client, Fence::Unclaimed),
        _ => (Actor::System, Fence::Control),
    };
    let step = WaitingStep {
        run_id,
        request_id: &pending.decision_id,
        attempt_id: &pending.attempt_id,
        expected,
        actor,
        fence,
    };
    let revision = run_waits::complete_waiting_step(tx, &step, &output_hash, |tx| {
        insert_resolution(tx, &pending.decision_id, provenance, Some(&response_hash))
    })?;
    Ok(Resolved {
        decision_id: pending.decision_id.clone(),
        revision,
        provenance,
        choice: response.choice.clone(),
    })
}

/// The one winner: a second resolution of the same decision violates the primary key and
/// is refused (`decisionSettled`) before anything else changes.
fn insert_resolution(
    tx: &WriteTx<'_>,
    decision_id: &str,
    provenance: Provenance,
    response_hash: Option<&str>,
) -> StoreResult<()> {
    if let Some(winner) = resolution_of(tx.conn(), decision_id)? {
        return Err(DecisionError::Settled { provenance: winner }.into());
    }
    let outcome = match provenance {
        Provenance::Human | Provenance::TimeoutPolicy => "accepted",
        _ => "cancelled",
    };
    tx.conn()
        .prepare_cached(
            "INSERT INTO human_decision_resolutions (decision_id, outcome, provenance, response_hash, resolved_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            decision_id,
            outcome,
            provenance.as_str(),
            response_hash,
            tx.now_ms()
        ])?;
    Ok(())
}

fn put_response(tx: &WriteTx<'_>, response: &Response) -> StoreResult<String> {
    let value = serde_json::to_value(response).expect("a response is JSON");
    blobs::put_json(tx, &value, RESPONSE_BYTES_MAX)
}

/// The provenance of a decision's resolution, if it has one.
pub fn resolution_of(conn: &Connection, decision_id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT provenance FROM human_decision_resolutions WHERE decision_id = ?1")?
        .query_row([decision_id], |row| row.get(0))
        .optional()?)
}

/// A decision's row with its request's contract and status.
struct DecisionRow {
    decision_id: String,
    attempt_id: String,
    request_digest: String,
    deadline_at: Option<i64>,
    contract_hash: String,
    status: String,
}

/// The run's pending decision (the named one, or its only pending one), or why there is none:
/// settled (with its winner), or no decision at all.
pub fn pending_for_answer(conn: &Connection, run_id: &str, decision_id: Option<&str>) -> StoreResult<PendingDecision> {
    let row = conn
        .prepare_cached(
            "SELECT d.decision_id, d.attempt_id, d.request_digest, d.deadline_at, i.contract_hash, i.status
             FROM human_decisions d JOIN interactive_requests i ON i.request_id = d.decision_id
             WHERE d.run_id = ?1 AND (?2 IS NULL OR d.decision_id = ?2)
             ORDER BY d.created_at DESC LIMIT 1",
        )?
        .query_row(params![run_id, decision_id], |row| {
            Ok(DecisionRow {
                decision_id: row.get(0)?,
                attempt_id: row.get(1)?,
                request_digest: row.get(2)?,
                deadline_at: row.get(3)?,
                contract_hash: row.get(4)?,
                status: row.get(5)?,
            })
        })
        .optional()?;
    let Some(row) = row else {
        return Err(StoreError::InvalidInput {
            what: "decision answer",
            detail: format!("run {run_id} has no such protected decision; check `pi-workflows run status {run_id}`"),
        });
    };
    if let Some(winner) = resolution_of(conn, &row.decision_id)? {
        return Err(DecisionError::Settled { provenance: winner }.into());
    }
    if row.status != "pending" {
        return Err(StoreError::InvalidInput {
            what: "decision answer",
            detail: format!("the decision's request is {}; nothing was changed", row.status),
        });
    }
    let contract = blobs::read_json(conn, &row.contract_hash)?.ok_or_else(|| StoreError::InvalidInput {
        what: "decision",
        detail: "its stored request is missing".to_string(),
    })?;
    Ok(PendingDecision {
        decision_id: row.decision_id,
        attempt_id: row.attempt_id,
        request_digest: row.request_digest,
        deadline_at: row.deadline_at,
        request: DecisionRequest::from_contract(&contract)?,
    })
}

/// A decision's stored request (whatever its state), e.g. to present or close it.
pub fn request_of(conn: &Connection, decision_id: &str) -> StoreResult<DecisionRequest> {
    let contract_hash: String = conn
        .prepare_cached("SELECT contract_hash FROM interactive_requests WHERE request_id = ?1")?
        .query_row([decision_id], |row| row.get(0))?;
    let contract = blobs::read_json(conn, &contract_hash)?.ok_or_else(|| StoreError::InvalidInput {
        what: "decision",
        detail: "its stored request is missing".to_string(),
    })?;
    Ok(DecisionRequest::from_contract(&contract)?)
}
