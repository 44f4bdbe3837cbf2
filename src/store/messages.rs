//! Workflow messages: content Pi must add to an origin conversation (step prompts,
//! decisions, notifications, terminal results, follow-ups), in acceptance order per session.
//!
//! Architecture Invariant: a message row is created in the same transaction as its source
//! record (an interactive request, a notify node's result, a terminal run), or as the change
//! that presents a still-pending source again (a reminder, a resume, a branch report) —
//! never by itself. Only branch evidence makes a pending or cancelled message `sent`, and a
//! sent message never changes again.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

wire_enum! {
    pub enum MessageKind {
        Step = "step",
        Decision = "decision",
        Notification = "notification",
        Terminal = "terminal",
        FollowUp = "followUp",
    }
}

/// A message to queue for an origin session.
pub struct NewMessage<'a> {
    pub run_id: &'a str,
    pub target_session_id: &'a str,
    pub kind: MessageKind,
    pub source_id: &'a str,
    /// `initial`, `reminder` or `resumed`: only for step messages.
    pub reason: Option<&'static str>,
    pub content_hash: &'a str,
}

/// The origin session of an interactive run; `None` for a headless run.
pub fn origin_session(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<Option<String>> {
    let session = tx
        .conn()
        .prepare_cached("SELECT origin_session_id FROM run_bindings WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get::<_, Option<String>>(0))
        .optional()?
        .flatten();
    Ok(session)
}

/// The origin session of `run_id` (a read); `None` for a headless run, `RunNotFound` for
/// an unknown one.
pub fn origin_session_of(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<Option<String>> {
    let binding: Option<Option<String>> = conn
        .prepare_cached("SELECT origin_session_id FROM run_bindings WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    binding.ok_or_else(|| StoreError::RunNotFound {
        run_id: run_id.to_string(),
    })
}

/// Session IDs are private: messages and errors name a session only by this digest prefix.
pub fn session_digest(session_id: &str) -> String {
    crate::digest::sha256_hex(session_id.as_bytes())[..16].to_string()
}

/// Queue a pending message at the end of its session's order; returns its ID.
pub fn queue_message(tx: &WriteTx<'_>, message: &NewMessage<'_>) -> StoreResult<String> {
    assert_eq!(
        message.kind == MessageKind::Step,
        message.reason.is_some(),
        "exactly step messages carry a reason"
    );
    let order: i64 = tx
        .conn()
        .prepare_cached(
            "SELECT coalesce(max(order_number), 0) + 1 FROM workflow_messages WHERE target_session_id = ?1",
        )?
        .query_row([message.target_session_id], |row| row.get(0))?;
    // Session IDs are private: the message ID carries only a digest prefix of it.
    let message_id = format!("msg-{}-{order}", session_digest(message.target_session_id));
    tx.conn()
        .prepare_cached(
            "INSERT INTO workflow_messages (workflow_message_id, run_id, target_session_id, kind, source_id, reason,
                                            content_hash, order_number, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?9)",
        )?
        .execute(params![
            message_id,
            message.run_id,
            message.target_session_id,
            message.kind.as_str(),
            message.source_id,
            message.reason,
            message.content_hash,
            order,
            tx.now_ms()
        ])?;
    Ok(message_id)
}

/// Follow-ups a run may have pending at once.
pub const FOLLOW_UPS_PENDING_MAX: i64 = 32;
/// A follow-up prompt, in UTF-8 bytes.
pub const FOLLOW_UP_PROMPT_BYTES_MAX: usize = 64 * 1024;

/// Queue a follow-up prompt for an interactive run's origin session (delivered as a normal
/// turn only after the run completed and its terminal turn ended; a failed, timed-out or
/// cancelled run cancels it). Not a run transition: the run's revision does not change, so a
/// live runner is not fenced by it. `follow_up_id` is `follow-up-<40 hex>`.
pub fn queue_follow_up(tx: &WriteTx<'_>, run_id: &str, follow_up_id: &str, prompt_hash: &str) -> StoreResult<String> {
    let conn = tx.conn();
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    let Some(status) = status else {
        return Err(StoreError::RunNotFound {
            run_id: run_id.to_string(),
        });
    };
    if matches!(status.as_str(), "failed" | "timed_out" | "cancelled") {
        return Err(StoreError::InvalidInput {
            what: "follow-up",
            detail: format!("the run ended {status}; follow-ups run only after a completed run"),
        });
    }
    let Some(session) = origin_session(tx, run_id)? else {
        return Err(StoreError::InvalidInput {
            what: "follow-up",
            detail: "follow-ups go to the run's origin Pi session; this run is headless".to_string(),
        });
    };
    let pending: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM workflow_messages WHERE run_id = ?1 AND kind = 'followUp' AND status = 'pending'",
        )?
        .query_row([run_id], |row| row.get(0))?;
    if pending >= FOLLOW_UPS_PENDING_MAX {
        return Err(StoreError::InvalidInput {
            what: "follow-up",
            detail: format!("the run already has {FOLLOW_UPS_PENDING_MAX} pending follow-ups; remove one first"),
        });
    }
    queue_message(
        tx,
        &NewMessage {
            run_id,
            target_session_id: &session,
            kind: MessageKind::FollowUp,
            source_id: follow_up_id,
            reason: None,
            content_hash: prompt_hash,
        },
    )
}

/// Remove a pending follow-up (one already sent cannot be taken back).
pub fn remove_follow_up(tx: &WriteTx<'_>, run_id: &str, follow_up_id: &str) -> StoreResult<()> {
    let removed = tx
        .conn()
        .prepare_cached(
            "UPDATE workflow_messages SET status = 'cancelled', updated_at = ?1
             WHERE run_id = ?2 AND kind = 'followUp' AND source_id = ?3 AND status = 'pending'",
        )?
        .execute(params![tx.now_ms(), run_id, follow_up_id])?;
    if removed == 0 {
        return Err(StoreError::InvalidInput {
            what: "follow-up",
            detail: format!("no pending follow-up {follow_up_id} on this run (a sent one cannot be removed)"),
        });
    }
    Ok(())
}

// Session messages -------------------------------------------------------------------------

/// One message of a session, as the turn and branch rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SessionMessage {
    pub id: String,
    pub run_id: String,
    pub kind: MessageKind,
    pub source_id: String,
    pub status: String,
}

const SESSION_MESSAGE_COLUMNS: &str = "workflow_message_id, run_id, kind, source_id, status";

fn session_message_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionMessage> {
    let kind: String = row.get(2)?;
    Ok(SessionMessage {
        id: row.get(0)?,
        run_id: row.get(1)?,
        kind: MessageKind::from_wire(&kind).expect("the schema CHECK admits only known message kinds"),
        source_id: row.get(3)?,
        status: row.get(4)?,
    })
}

/// A message of exactly this session (another session's message reads as absent).
pub(super) fn session_message(
    conn: &rusqlite::Connection,
    session_id: &str,
    message_id: &str,
) -> StoreResult<Option<SessionMessage>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SESSION_MESSAGE_COLUMNS} FROM workflow_messages
             WHERE workflow_message_id = ?1 AND target_session_id = ?2"
        ))?
        .query_row(params![message_id, session_id], session_message_row)
        .optional()?)
}

/// A message a stored turn names (the foreign key guarantees it exists).
pub(super) fn message_by_id(conn: &rusqlite::Connection, message_id: &str) -> StoreResult<SessionMessage> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SESSION_MESSAGE_COLUMNS} FROM workflow_messages WHERE workflow_message_id = ?1"
        ))?
        .query_row([message_id], session_message_row)?)
}

/// Whether a turn may start on the message now: the newest sent step of a pending request
/// whose run is not paused, or a sent terminal or follow-up message before its first turn
/// ended. Decisions, notifications and a cancelled run's terminal message (passive: the
/// person who cancelled needs no model turn about it) never open a turn.
pub(super) fn is_open(conn: &rusqlite::Connection, message: &SessionMessage) -> StoreResult<bool> {
    if message.status != "sent" {
        return Ok(false);
    }
    let sql = match message.kind {
        MessageKind::Step => {
            "SELECT count(*) > 0 FROM workflow_messages m
             JOIN interactive_requests i ON i.request_id = m.source_id
             JOIN runs r ON r.run_id = i.run_id
             WHERE m.workflow_message_id = ?1 AND i.status = 'pending' AND r.paused = 0
               AND NOT EXISTS (SELECT 1 FROM workflow_messages n
                               WHERE n.source_id = m.source_id AND n.kind = 'step' AND n.status = 'sent'
                                 AND n.order_number > m.order_number)"
        }
        MessageKind::Terminal | MessageKind::FollowUp => {
            "SELECT NOT EXISTS (SELECT 1 FROM workflow_turns t
                                WHERE t.workflow_message_id = ?1 AND t.status != 'open')
                AND NOT EXISTS (SELECT 1 FROM workflow_messages m JOIN runs r ON r.run_id = m.run_id
                                WHERE m.workflow_message_id = ?1 AND m.kind = 'terminal' AND r.status = 'cancelled')"
        }
        MessageKind::Decision | MessageKind::Notification => return Ok(false),
    };
    Ok(conn.prepare_cached(sql)?.query_row([&message.id], |row| row.get(0))?)
}

/// Whether a request already has its one pending step message.
pub(super) fn has_pending_step(conn: &rusqlite::Connection, request_id: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) > 0 FROM workflow_messages WHERE source_id = ?1 AND kind = 'step' AND status = 'pending'",
        )?
        .query_row([request_id], |row| row.get(0))?)
}

/// A request settled: its pending step or decision message has nothing left to present.
pub(super) fn cancel_pending_of_source(tx: &WriteTx<'_>, request_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE workflow_messages SET status = 'cancelled', updated_at = ?1
             WHERE source_id = ?2 AND kind IN ('step', 'decision') AND status = 'pending'",
        )?
        .execute(params![tx.now_ms(), request_id])?;
    Ok(())
}

// Terminal messages ------------------------------------------------------------------------

/// A terminal message's content (`{outcome, runId, workflowName}`), in bytes.
pub const TERMINAL_CONTENT_BYTES_MAX: usize = 16 * 1024;

/// An interactive run ended with `outcome`: queue its terminal message, unless the run is a
/// parent settled by its continuation (only the final leaf of a checkpoint-continuation
/// chain reports an outcome to the session). Headless runs have no session.
pub(super) fn queue_terminal(tx: &WriteTx<'_>, run_id: &str, outcome: &str) -> StoreResult<bool> {
    let Some(session) = origin_session(tx, run_id)? else {
        return Ok(false);
    };
    let (workflow_name, continued): (String, bool) = tx
        .conn()
        .prepare_cached(
            "SELECT r.workflow_name, EXISTS (SELECT 1 FROM runs c WHERE c.parent_run_id = r.run_id AND c.origin = 'continuation')
             FROM runs r WHERE r.run_id = ?1",
        )?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?)))?;
    if continued {
        return Ok(false);
    }
    let content = serde_json::json!({"outcome": outcome, "runId": run_id, "workflowName": workflow_name});
    let content_hash = super::blobs::put_json(tx, &content, TERMINAL_CONTENT_BYTES_MAX)?;
    queue_message(
        tx,
        &NewMessage {
            run_id,
            target_session_id: &session,
            kind: MessageKind::Terminal,
            source_id: run_id,
            reason: None,
            content_hash: &content_hash,
        },
    )?;
    Ok(true)
}

/// How far back the startup scan looks for an interactive run that ended without its
/// terminal message (an older one's session moved on long ago).
pub const TERMINAL_SCAN_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;
/// Runs one startup scan repairs at most.
pub const TERMINAL_SCAN_MAX: usize = 256;

/// Startup (spec "Store": the server finds missing terminal messages when it starts): an
/// interactive run that ended within the window, is no parent settled by a continuation and
/// has no terminal message of any status gets its one terminal message now. Returns how
/// many were queued; a repeat queues none.
pub fn queue_missing_terminals(tx: &WriteTx<'_>) -> StoreResult<usize> {
    let missing: Vec<(String, String)> = tx
        .conn()
        .prepare_cached(
            "SELECT r.run_id, r.status FROM runs r JOIN run_bindings b ON b.run_id = r.run_id
             WHERE b.origin_session_id IS NOT NULL
               AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled') AND r.finished_at >= ?1
               AND NOT EXISTS (SELECT 1 FROM workflow_messages m WHERE m.run_id = r.run_id AND m.kind = 'terminal')
             ORDER BY r.finished_at
             LIMIT ?2",
        )?
        .query_map(
            params![tx.now_ms() - TERMINAL_SCAN_WINDOW_MS, TERMINAL_SCAN_MAX as i64],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?
        .collect::<Result<_, _>>()?;
    let mut queued = 0;
    for (run_id, status) in &missing {
        queued += usize::from(queue_terminal(tx, run_id, status)?);
    }
    Ok(queued)
}

/// A continuation was queued for `parent_run_id`: the parent was settled by it, so a
/// terminal message the parent queued when it ended (and nobody has been shown yet) goes.
pub(super) fn settle_parent_terminal(tx: &WriteTx<'_>, parent_run_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE workflow_messages SET status = 'cancelled', updated_at = ?1
             WHERE run_id = ?2 AND kind = 'terminal' AND status = 'pending'",
        )?
        .execute(params![tx.now_ms(), parent_run_id])?;
    Ok(())
}

// Branch reports ---------------------------------------------------------------------------

/// Entries one branch report may name (a window holds at most
/// [`SESSION_WINDOW_MESSAGES_MAX`](super::session_view::SESSION_WINDOW_MESSAGES_MAX); the
/// rest leaves room for messages cancelled or sent since the view was read).
pub const BRANCH_FOUND_MAX: usize = 4 * super::session_view::SESSION_WINDOW_MESSAGES_MAX;

/// `workflowMessage.reportBranch`: what the coordinator found on Pi's active branch.
pub struct BranchReport<'a> {
    pub session_id: &'a str,
    pub is_idle: bool,
    pub has_pending_messages: bool,
    /// (workflow_message_id, pi_entry_id)
    pub found: &'a [(String, String)],
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchOutcome {
    /// Messages this report marked `sent` (a repeat marks none).
    pub sent: Vec<String>,
    /// Messages this report created for sources absent from the branch.
    pub created: Vec<String>,
    /// Open turns this report closed as `lost` (0 or 1).
    pub lost_turns: usize,
}

/// Apply a branch report in one transaction (docs/SESSIONS.md "Branch reports"): found
/// messages become `sent`; then, only when absence is usable (Pi idle with no pending
/// input — the spec's rule), each pending source absent from the branch gets one new
/// message of its own kind and the session's open turn closes `lost`. A report naming a
/// message outside this session's window is refused and changes nothing.
pub fn report_branch(tx: &WriteTx<'_>, report: &BranchReport<'_>) -> StoreResult<BranchOutcome> {
    check_found(tx.conn(), report)?;
    let mut changes = super::turns::SessionChanges::default();
    let sent = mark_found_sent(tx, report, &mut changes)?;
    let mut outcome = BranchOutcome {
        sent,
        created: Vec::new(),
        lost_turns: 0,
    };
    if report.is_idle && !report.has_pending_messages {
        outcome.created = present_absent_sources(tx, report, &mut changes)?;
        if let Some(open) = super::turns::open_turn_of_session(tx.conn(), report.session_id)? {
            super::turns::close_lost(tx, report.session_id, &open, &mut changes)?;
            outcome.lost_turns = 1;
        }
    }
    changes.finish(tx)?;
    Ok(outcome)
}

fn refuse_branch(detail: String) -> StoreError {
    StoreError::InvalidInput {
        what: "branch report",
        detail,
    }
}

/// Refuse, before anything changes, a report that is too long, names a message twice, has
/// a bad entry ID, or names a message that is not this session's to report: in its view
/// window, or cancelled or already sent since the view was read.
fn check_found(conn: &rusqlite::Connection, report: &BranchReport<'_>) -> StoreResult<()> {
    if report.found.len() > BRANCH_FOUND_MAX {
        return Err(refuse_branch(format!(
            "it names {} messages, above the limit of {BRANCH_FOUND_MAX}; report only the view window's IDs",
            report.found.len()
        )));
    }
    let mut named = std::collections::BTreeSet::new();
    for (message_id, entry_id) in report.found {
        super::turns::check_id("Pi entry ID", entry_id, super::turns::ENTRY_ID_BYTES_MAX)?;
        if !named.insert(message_id.as_str()) {
            return Err(refuse_branch(
                "it names one workflow message twice; name each once".to_string(),
            ));
        }
    }
    let window = super::session_view::window_ids(conn, report.session_id)?;
    let mut outside = 0;
    for message_id in named {
        if !window.contains(message_id) && !settled_since_view(conn, report.session_id, message_id)? {
            outside += 1;
        }
    }
    if outside > 0 {
        return Err(refuse_branch(format!(
            "{outside} of its workflow message IDs are not in this session's view window; \
             read the session view again and report only its IDs (nothing was changed)"
        )));
    }
    Ok(())
}

/// A message of this session that left the window since the coordinator read it: its
/// source cancelled it (branch evidence still proves it was sent) or it is already sent.
fn settled_since_view(conn: &rusqlite::Connection, session_id: &str, message_id: &str) -> StoreResult<bool> {
    Ok(session_message(conn, session_id, message_id)?
        .is_some_and(|message| matches!(message.status.as_str(), "cancelled" | "sent")))
}

/// Mark found pending or cancelled messages `sent` with their Pi entry; an already sent
/// message keeps the entry that first proved it.
fn mark_found_sent(
    tx: &WriteTx<'_>,
    report: &BranchReport<'_>,
    changes: &mut super::turns::SessionChanges,
) -> StoreResult<Vec<String>> {
    let mut sent = Vec::new();
    let mut statement = tx.conn().prepare_cached(
        "UPDATE workflow_messages SET status = 'sent', pi_session_entry_id = ?1, updated_at = ?2
         WHERE workflow_message_id = ?3 AND target_session_id = ?4 AND status IN ('pending', 'cancelled')
         RETURNING run_id",
    )?;
    for (message_id, entry_id) in report.found {
        let run_id: Option<String> = statement
            .query_row(params![entry_id, tx.now_ms(), message_id, report.session_id], |row| {
                row.get(0)
            })
            .optional()?;
        if let Some(run_id) = run_id {
            changes.changed(&run_id, "message.sent");
            sent.push(message_id.clone());
        }
    }
    Ok(sent)
}

/// A pending request of the session whose messages the branch may have lost.
struct PendingSource {
    request_id: String,
    run_id: String,
    kind: MessageKind,
    contract_hash: String,
    paused: bool,
}

/// Each pending request or open decision of the session that was presented (has a sent
/// message), has no entry on this branch and no pending message gets one new message of
/// its own kind. Any found message of the source counts as its entry (the window names the
/// newest; a branch that still shows an older one needs nothing new). A paused step is left
/// alone: its resume presents it again.
fn present_absent_sources(
    tx: &WriteTx<'_>,
    report: &BranchReport<'_>,
    changes: &mut super::turns::SessionChanges,
) -> StoreResult<Vec<String>> {
    let on_branch = found_sources(tx.conn(), report)?;
    let mut created = Vec::new();
    for source in pending_sources(tx.conn(), report.session_id)? {
        if source.kind == MessageKind::Step && source.paused {
            continue;
        }
        if on_branch.contains(&source.request_id)
            || newest_message(tx.conn(), &source, "sent")?.is_none()
            || newest_message(tx.conn(), &source, "pending")?.is_some()
        {
            continue;
        }
        let message_id = queue_message(
            tx,
            &NewMessage {
                run_id: &source.run_id,
                target_session_id: report.session_id,
                kind: source.kind,
                source_id: &source.request_id,
                reason: (source.kind == MessageKind::Step).then_some("resumed"),
                content_hash: &source.contract_hash,
            },
        )?;
        changes.changed(&source.run_id, "message.presented");
        created.push(message_id);
    }
    Ok(created)
}

/// The sources of the found messages.
fn found_sources(
    conn: &rusqlite::Connection,
    report: &BranchReport<'_>,
) -> StoreResult<std::collections::BTreeSet<String>> {
    let mut sources = std::collections::BTreeSet::new();
    for (message_id, _) in report.found {
        if let Some(message) = session_message(conn, report.session_id, message_id)? {
            sources.insert(message.source_id);
        }
    }
    Ok(sources)
}

fn pending_sources(conn: &rusqlite::Connection, session_id: &str) -> StoreResult<Vec<PendingSource>> {
    Ok(conn
        .prepare_cached(
            "SELECT i.request_id, i.run_id, i.kind, i.contract_hash, r.paused
             FROM interactive_requests i JOIN runs r ON r.run_id = i.run_id
             WHERE i.target_session_id = ?1 AND i.status = 'pending' ORDER BY i.created_at, i.request_id",
        )?
        .query_map([session_id], |row| {
            let kind: String = row.get(2)?;
            Ok(PendingSource {
                request_id: row.get(0)?,
                run_id: row.get(1)?,
                kind: match kind.as_str() {
                    "decision" => MessageKind::Decision,
                    _ => MessageKind::Step,
                },
                contract_hash: row.get(3)?,
                paused: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?)
}

fn newest_message(conn: &rusqlite::Connection, source: &PendingSource, status: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT workflow_message_id FROM workflow_messages WHERE source_id = ?1 AND kind = ?2 AND status = ?3
             ORDER BY order_number DESC LIMIT 1",
        )?
        .query_row(params![source.request_id, source.kind.as_str(), status], |row| {
            row.get(0)
        })
        .optional()?)
}

// Terminal view ----------------------------------------------------------------------------

/// `sessionView.clearTerminal`: remove the retained terminal run from this session's view
/// (it stays removed). A view fact only: no run changes. False when nothing was retained.
pub fn clear_terminal(tx: &WriteTx<'_>, session_id: &str) -> StoreResult<bool> {
    let Some(run_id) = super::session_view::retained_terminal(tx.conn(), session_id, tx.now_ms())? else {
        return Ok(false);
    };
    tx.conn()
        .prepare_cached(
            "INSERT INTO session_views (target_session_id, cleared_run_id, cleared_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (target_session_id) DO UPDATE SET cleared_run_id = excluded.cleared_run_id,
                                                           cleared_at = excluded.cleared_at",
        )?
        .execute(params![session_id, run_id, tx.now_ms()])?;
    Ok(true)
}
