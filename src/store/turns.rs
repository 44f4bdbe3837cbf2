//! Origin-session model turns (docs/SESSIONS.md "Turn reports"): one row per exact Pi turn
//! the server accepted as workflow work, and what the turn's end means for the step it
//! served (pause on Escape, the unproductive-turn rule).
//!
//! Architecture Invariant: at most one open turn per session (a partial unique index). A
//! turn changes only through its exact (session, turn ID), so a stale or repeated report
//! never clears newer activity. A run's end closes its open turns `lost` in the same
//! transaction (`run_endings`).

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};
use super::messages::{self, MessageKind, NewMessage};
use super::runs::{self, RunStatus};
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// How Pi said a model turn ended (derived by the extension from the assistant message).
    pub enum TurnOutcome {
        Completed = "completed",
        /// Escape: the run is paused and the turn does not count as unproductive.
        Aborted = "aborted",
        Error = "error",
    }
}

wire_enum! {
    /// A turn report's answer: the turn is workflow work (`active`), its end is recorded
    /// (`settled`), or the server does not own it (`absent`).
    pub enum Ownership {
        Active = "active",
        Settled = "settled",
        Absent = "absent",
    }
}

/// What one `workflowTurn.report` says.
pub enum TurnPhase {
    /// `agent_start`, bound to the sent message the extension believes the turn serves.
    Start { workflow_message_id: String },
    /// `agent_end`, with the Pi entry of the response when there is one.
    End {
        outcome: TurnOutcome,
        response_entry_id: Option<String>,
    },
}

/// One saved turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRow {
    pub turn_id: String,
    pub workflow_message_id: String,
    pub run_id: String,
    /// `open`, `ended` or `lost`.
    pub status: String,
    pub outcome: Option<String>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

/// The receipt of a turn report: ownership and the exact saved turn, when one exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReceipt {
    pub ownership: Ownership,
    pub turn: Option<TurnRow>,
}

/// Turn IDs are made by the extension; the schema bounds them too.
pub const TURN_ID_BYTES_MAX: usize = 256;
/// Pi session entry IDs (a message's carrying entry, a turn's response entry).
pub const ENTRY_ID_BYTES_MAX: usize = 256;
/// Unproductive turn ends that each get a `reminder` step; the next one fails the attempt
/// (`missingSubmission`). The schema's CHECK on `unproductive_turn_ends` allows one more.
pub const UNPRODUCTIVE_REMINDERS_MAX: i64 = 2;
/// The stored error of an attempt failed by the unproductive-turn rule.
const UNPRODUCTIVE_ERROR_BYTES_MAX: usize = 1024;

const TURN_COLUMNS: &str = "turn_id, workflow_message_id, run_id, status, outcome, started_at, ended_at";

fn turn_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TurnRow> {
    Ok(TurnRow {
        turn_id: row.get(0)?,
        workflow_message_id: row.get(1)?,
        run_id: row.get(2)?,
        status: row.get(3)?,
        outcome: row.get(4)?,
        started_at: row.get(5)?,
        ended_at: row.get(6)?,
    })
}

/// Record a turn start or end for `session_id`, with everything it implies, in the caller's
/// transaction. A refusal (`TurnConflict`, `InvalidInput`, or a transient `ClaimHeld` while
/// a runner judges a submission for an aborted step) changes nothing.
pub fn report_turn(tx: &WriteTx<'_>, session_id: &str, turn_id: &str, phase: &TurnPhase) -> StoreResult<TurnReceipt> {
    check_id("turn ID", turn_id, TURN_ID_BYTES_MAX)?;
    let mut changes = SessionChanges::default();
    let receipt = match phase {
        TurnPhase::Start { workflow_message_id } => {
            start_turn(tx, session_id, turn_id, workflow_message_id, &mut changes)?
        }
        TurnPhase::End {
            outcome,
            response_entry_id,
        } => {
            if let Some(entry) = response_entry_id {
                check_id("response entry ID", entry, ENTRY_ID_BYTES_MAX)?;
            }
            end_turn(
                tx,
                session_id,
                turn_id,
                *outcome,
                response_entry_id.as_deref(),
                &mut changes,
            )?
        }
    };
    changes.finish(tx)?;
    Ok(receipt)
}

/// The open turn of a run (for `display.activity` = originTurn), if any: (turn_id,
/// started_at). A follow-up's turn is not the workflow's activity (it never shows the
/// completed run as running), so it is left out.
pub fn open_turn_of_run(conn: &Connection, run_id: &str) -> StoreResult<Option<(String, i64)>> {
    Ok(conn
        .prepare_cached(
            "SELECT t.turn_id, t.started_at FROM workflow_turns t
             JOIN workflow_messages m ON m.workflow_message_id = t.workflow_message_id
             WHERE t.run_id = ?1 AND t.status = 'open' AND m.kind != 'followUp'",
        )?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The session's open turn, if any.
pub fn open_turn_of_session(conn: &Connection, session_id: &str) -> StoreResult<Option<TurnRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {TURN_COLUMNS} FROM workflow_turns WHERE target_session_id = ?1 AND status = 'open'"
        ))?
        .query_row([session_id], turn_row)
        .optional()?)
}

fn find_turn(conn: &Connection, session_id: &str, turn_id: &str) -> StoreResult<Option<TurnRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {TURN_COLUMNS} FROM workflow_turns WHERE target_session_id = ?1 AND turn_id = ?2"
        ))?
        .query_row(params![session_id, turn_id], turn_row)
        .optional()?)
}

fn receipt(ownership: Ownership, turn: Option<TurnRow>) -> TurnReceipt {
    TurnReceipt { ownership, turn }
}

/// An ID the extension reports: 1 to `max` bytes (the protocol checks its characters).
pub(super) fn check_id(what: &'static str, id: &str, max: usize) -> StoreResult<()> {
    if id.is_empty() || id.len() > max {
        return Err(StoreError::InvalidInput {
            what,
            detail: format!("must be 1 to {max} bytes"),
        });
    }
    Ok(())
}

// Start ------------------------------------------------------------------------------------

fn start_turn(
    tx: &WriteTx<'_>,
    session_id: &str,
    turn_id: &str,
    message_id: &str,
    changes: &mut SessionChanges,
) -> StoreResult<TurnReceipt> {
    let conn = tx.conn();
    if let Some(turn) = find_turn(conn, session_id, turn_id)? {
        // A repeat adopts the saved turn; the same turn ID for another message is a
        // conflicting repeat (Pi's turn serves one message).
        if turn.workflow_message_id != message_id {
            return Err(StoreError::TurnConflict);
        }
        let ownership = match turn.status.as_str() {
            "open" => Ownership::Active,
            _ => Ownership::Settled,
        };
        return Ok(receipt(ownership, Some(turn)));
    }
    let Some(message) = messages::session_message(conn, session_id, message_id)? else {
        return Ok(receipt(Ownership::Absent, None));
    };
    if !messages::is_open(conn, &message)? {
        return Ok(receipt(Ownership::Absent, None));
    }
    // Pi runs one turn at a time: a new start proves the older open turn is over.
    if let Some(older) = open_turn_of_session(conn, session_id)? {
        close_lost(tx, session_id, &older, changes)?;
        // Closing it may have closed this very message: a third unproductive end failed the
        // step, or it was a terminal or follow-up message's first turn.
        if !messages::is_open(conn, &message)? {
            return Ok(receipt(Ownership::Absent, None));
        }
    }
    conn.prepare_cached(
        "INSERT INTO workflow_turns (target_session_id, turn_id, workflow_message_id, run_id, status, started_at)
         VALUES (?1, ?2, ?3, ?4, 'open', ?5)",
    )?
    .execute(params![session_id, turn_id, message.id, message.run_id, tx.now_ms()])?;
    super::presentation::changed(tx, &message.run_id, 1)?;
    changes.changed(&message.run_id, "turn.started");
    Ok(receipt(Ownership::Active, find_turn(conn, session_id, turn_id)?))
}

// End --------------------------------------------------------------------------------------

fn end_turn(
    tx: &WriteTx<'_>,
    session_id: &str,
    turn_id: &str,
    outcome: TurnOutcome,
    response_entry_id: Option<&str>,
    changes: &mut SessionChanges,
) -> StoreResult<TurnReceipt> {
    let conn = tx.conn();
    let Some(turn) = find_turn(conn, session_id, turn_id)? else {
        return Ok(receipt(Ownership::Absent, None));
    };
    match turn.status.as_str() {
        "open" => {}
        // The server closed it first (its run ended, a newer start, an idle branch): a late
        // end adopts that cleanup.
        "lost" => return Ok(receipt(Ownership::Settled, Some(turn))),
        _ => return adopt_ended(conn, session_id, turn, outcome, response_entry_id),
    }
    let ended = conn
        .prepare_cached(
            "UPDATE workflow_turns SET status = 'ended', outcome = ?1, response_entry_id = ?2, ended_at = ?3
             WHERE target_session_id = ?4 AND turn_id = ?5 AND status = 'open'",
        )?
        .execute(params![
            outcome.as_str(),
            response_entry_id,
            tx.now_ms(),
            session_id,
            turn_id
        ])?;
    turns_ended(tx, &turn.run_id, ended)?;
    super::deadlines::close_intervals_of_turn(tx, session_id, turn_id)?;
    let message = messages::message_by_id(conn, &turn.workflow_message_id)?;
    match outcome {
        TurnOutcome::Aborted => pause_for_escape(tx, &message, changes)?,
        TurnOutcome::Completed | TurnOutcome::Error => count_unproductive(tx, &message, changes)?,
    }
    changes.changed(&turn.run_id, "turn.ended");
    Ok(receipt(Ownership::Settled, find_turn(conn, session_id, turn_id)?))
}

/// A repeated end of an ended turn: the same outcome and entry adopt it; another is a
/// conflicting repeat.
fn adopt_ended(
    conn: &Connection,
    session_id: &str,
    turn: TurnRow,
    outcome: TurnOutcome,
    response_entry_id: Option<&str>,
) -> StoreResult<TurnReceipt> {
    let saved_entry: Option<String> = conn
        .prepare_cached("SELECT response_entry_id FROM workflow_turns WHERE target_session_id = ?1 AND turn_id = ?2")?
        .query_row(params![session_id, turn.turn_id], |row| row.get(0))?;
    if turn.outcome.as_deref() != Some(outcome.as_str()) || saved_entry.as_deref() != response_entry_id {
        return Err(StoreError::TurnConflict);
    }
    Ok(receipt(Ownership::Settled, Some(turn)))
}

/// Escape on a step's turn pauses its run (the spec's pause: `paused = 1`, pending step
/// messages cancelled; the request stays pending and reads as paused). Only while the step
/// is still pending: once the workflow moved past it, Escape stopped nothing of the
/// workflow's. A runner judging a submission holds the claim: `ClaimHeld`, which the
/// caller retries once the verdict is in (accepted: nothing to pause; rejected: paused).
fn pause_for_escape(
    tx: &WriteTx<'_>,
    message: &messages::SessionMessage,
    changes: &mut SessionChanges,
) -> StoreResult<()> {
    if message.kind != MessageKind::Step || !request_pending(tx.conn(), &message.source_id)? {
        return Ok(());
    }
    let run = runs::read_run(tx, &message.run_id)?;
    if run.status.is_terminal() || run.paused {
        return Ok(());
    }
    runs::pause_unclaimed(tx, &message.run_id, None)?;
    changes.advanced(&message.run_id);
    Ok(())
}

fn request_pending(conn: &Connection, request_id: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT count(*) > 0 FROM interactive_requests WHERE request_id = ?1 AND status = 'pending'")?
        .query_row([request_id], |row| row.get(0))?)
}

/// A step request the unproductive-turn rule applies to.
struct Unproductive {
    request_id: String,
    attempt_id: String,
    session_id: String,
    contract_hash: String,
}

/// The unproductive-turn rule: a step turn that ended (or was lost) while its request is
/// still pending, its run waiting and not paused, and no submission accepted or being
/// validated, counts once. Ends 1 and 2 present the step again as one `reminder` (at most
/// one pending step per request); a third fails the waiting attempt.
fn count_unproductive(
    tx: &WriteTx<'_>,
    message: &messages::SessionMessage,
    changes: &mut SessionChanges,
) -> StoreResult<()> {
    if message.kind != MessageKind::Step {
        return Ok(());
    }
    let Some(step) = unproductive_step(tx.conn(), &message.source_id)? else {
        return Ok(());
    };
    let ends: i64 = tx
        .conn()
        .prepare_cached(
            "UPDATE interactive_requests SET unproductive_turn_ends = unproductive_turn_ends + 1
             WHERE request_id = ?1 RETURNING unproductive_turn_ends",
        )?
        .query_row([&step.request_id], |row| row.get(0))?;
    if ends > UNPRODUCTIVE_REMINDERS_MAX {
        fail_unproductive(tx, &message.run_id, &step, ends)?;
        changes.advanced(&message.run_id);
        return Ok(());
    }
    if !messages::has_pending_step(tx.conn(), &step.request_id)? {
        messages::queue_message(
            tx,
            &NewMessage {
                run_id: &message.run_id,
                target_session_id: &step.session_id,
                kind: MessageKind::Step,
                source_id: &step.request_id,
                reason: Some("reminder"),
                content_hash: &step.contract_hash,
            },
        )?;
    }
    Ok(())
}

fn unproductive_step(conn: &Connection, request_id: &str) -> StoreResult<Option<Unproductive>> {
    Ok(conn
        .prepare_cached(
            "SELECT i.request_id, i.attempt_id, i.target_session_id, i.contract_hash
             FROM interactive_requests i JOIN runs r ON r.run_id = i.run_id
             WHERE i.request_id = ?1 AND i.status = 'pending' AND i.target_session_id IS NOT NULL
               -- Only submitted-output steps (spec): a checkpoint waits for an answer, which a
               -- turn that does not give one has not failed to produce.
               AND i.kind IN ('agent', 'assistant')
               AND r.status = ?2 AND r.paused = 0
               AND NOT EXISTS (SELECT 1 FROM interactive_submissions s
                               WHERE s.request_id = i.request_id AND s.outcome IN ('accepted', 'validating'))",
        )?
        .query_row(params![request_id, RunStatus::Waiting.as_str()], |row| {
            Ok(Unproductive {
                request_id: row.get(0)?,
                attempt_id: row.get(1)?,
                session_id: row.get(2)?,
                contract_hash: row.get(3)?,
            })
        })
        .optional()?)
}

fn fail_unproductive(tx: &WriteTx<'_>, run_id: &str, step: &Unproductive, ends: i64) -> StoreResult<()> {
    let error = serde_json::json!({
        "code": "missingSubmission",
        "message": format!(
            "the step's model turns ended {ends} times without a submitted result; \
             the step failed and the workflow continues by its outcome route"
        ),
    });
    let error_hash = super::blobs::put_json(tx, &error, UNPRODUCTIVE_ERROR_BYTES_MAX)?;
    let ending = super::run_waits::WaitingEnd::MissingSubmission;
    super::run_waits::end_waiting_step(tx, run_id, &step.request_id, &step.attempt_id, ending, &error_hash)?;
    Ok(())
}

// Lost turns -------------------------------------------------------------------------------

/// Close an open turn as `lost` (proved over without an end report); a step's lost turn
/// follows the unproductive-turn rule.
pub(super) fn close_lost(
    tx: &WriteTx<'_>,
    session_id: &str,
    turn: &TurnRow,
    changes: &mut SessionChanges,
) -> StoreResult<()> {
    let lost = tx
        .conn()
        .prepare_cached(
            "UPDATE workflow_turns SET status = 'lost', ended_at = ?1
             WHERE target_session_id = ?2 AND turn_id = ?3 AND status = 'open'",
        )?
        .execute(params![tx.now_ms(), session_id, turn.turn_id])?;
    turns_ended(tx, &turn.run_id, lost)?;
    super::deadlines::close_intervals_of_turn(tx, session_id, &turn.turn_id)?;
    let message = messages::message_by_id(tx.conn(), &turn.workflow_message_id)?;
    count_unproductive(tx, &message, changes)?;
    changes.changed(&turn.run_id, "turn.lost");
    Ok(())
}

/// A run became terminal: its open turns are lost (no rule applies: its request closed).
pub(super) fn end_turns_of_run(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    let lost = tx
        .conn()
        .prepare_cached(
            "UPDATE workflow_turns SET status = 'lost', ended_at = ?1 WHERE run_id = ?2 AND status = 'open'",
        )?
        .execute(params![tx.now_ms(), run_id])?;
    turns_ended(tx, run_id, lost)?;
    super::deadlines::close_intervals_of_run(tx, run_id)
}

/// `ended` of the run's turns got their end: each is a change to its presentation.
fn turns_ended(tx: &WriteTx<'_>, run_id: &str, ended: usize) -> StoreResult<()> {
    if ended > 0 {
        super::presentation::changed(tx, run_id, ended as i64)?;
    }
    Ok(())
}

// Revisions --------------------------------------------------------------------------------

/// The runs one report changed, so each gets one event at its next revision: a lifecycle
/// transition the report made already advanced it; any other change (a turn, a message) is
/// noted once at the end.
#[derive(Default)]
pub(super) struct SessionChanges {
    /// Run → the event to note, or `None` when a transition already advanced it.
    runs: BTreeMap<String, Option<&'static str>>,
}

impl SessionChanges {
    /// The newest change names the event; a run a transition advanced stays advanced.
    pub(super) fn changed(&mut self, run_id: &str, event_type: &'static str) {
        let noted = self.runs.entry(run_id.to_string()).or_insert(Some(event_type));
        if noted.is_some() {
            *noted = Some(event_type);
        }
    }

    pub(super) fn advanced(&mut self, run_id: &str) {
        self.runs.insert(run_id.to_string(), None);
    }

    pub(super) fn finish(self, tx: &WriteTx<'_>) -> StoreResult<()> {
        for (run_id, event_type) in self.runs {
            if let Some(event_type) = event_type {
                runs::note_session_fact(tx, &run_id, event_type)?;
            }
        }
        Ok(())
    }
}
