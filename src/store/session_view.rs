//! The facts of one origin session's view (docs/SESSIONS.md "The session view"), read in one
//! snapshot: its active run, a retained terminal run, the message window with what the
//! coordinator may send, and the open turn.
//!
//! Architecture Invariant: reads only. The window a branch report may name is exactly the
//! one `read_session` returns (`window_ids` selects it the same way).

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::error::StoreResult;
use super::runs::session_reserved;
use super::turns::{self, TurnRow};

/// Messages one session view window holds at most.
pub const SESSION_WINDOW_MESSAGES_MAX: usize = 64;
/// Message content one window holds at most (a message's stored JSON bytes).
pub const SESSION_WINDOW_CONTENT_BYTES_MAX: usize = 512 * 1024;
/// How long a terminal run stays in the view after its terminal message's first turn ended.
pub const TERMINAL_RETAINED_MS: i64 = 60_000;

/// One message of the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowMessage {
    pub workflow_message_id: String,
    pub run_id: String,
    pub kind: String,
    pub reason: Option<String>,
    pub source_id: String,
    pub order: i64,
    pub status: String,
    pub pi_entry_id: Option<String>,
    /// The message's stored JSON (a step's or decision's contract, a notification, a
    /// terminal outcome, a follow-up prompt).
    pub content: serde_json::Value,
    pub content_bytes: usize,
    /// True when the coordinator may send it now (ignoring epochs).
    #[serde(skip)]
    pub eligible: bool,
}

/// Everything one session view is drawn from.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFacts {
    pub active_run_id: Option<String>,
    pub retained_terminal_run_id: Option<String>,
    pub messages: Vec<WindowMessage>,
    /// Every message the window would hold without its bounds.
    pub message_count: i64,
    pub truncated: bool,
    pub open_turn: Option<TurnRow>,
    /// A digest of everything above, so a feed republishes only on change.
    pub digest: String,
}

/// Read the session's view facts at `now_ms` (retention of a terminal run depends on it).
pub fn read_session(conn: &Connection, session_id: &str, now_ms: i64) -> StoreResult<SessionFacts> {
    let active_run_id = active_run(conn, session_id)?;
    let retained_terminal_run_id = match active_run_id {
        Some(_) => None,
        None => retained_terminal(conn, session_id, now_ms)?,
    };
    let open_turn = turns::open_turn_of_session(conn, session_id)?;
    let window = window(conn, session_id)?;
    let context = Eligibility {
        turn_open: open_turn.is_some(),
        run_active: active_run_id.is_some(),
        terminal_pending: terminal_pending(conn, session_id)?,
    };
    let mut messages = Vec::with_capacity(window.rows.len());
    for row in window.rows {
        messages.push(window_message(conn, row, &context)?);
    }
    let mut facts = SessionFacts {
        active_run_id,
        retained_terminal_run_id,
        truncated: (messages.len() as i64) < window.count,
        messages,
        message_count: window.count,
        open_turn,
        digest: String::new(),
    };
    facts.digest = digest_of(&facts);
    Ok(facts)
}

/// The IDs of the session's window (what a branch report may name).
pub(super) fn window_ids(conn: &Connection, session_id: &str) -> StoreResult<BTreeSet<String>> {
    Ok(window(conn, session_id)?.rows.into_iter().map(|row| row.id).collect())
}

/// The session's nonterminal interactive run (at most one: the queue's reservation).
fn active_run(conn: &Connection, session_id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached(concat!(
            "SELECT run_id FROM run_queue WHERE origin_session_id = ?1 AND ",
            session_reserved!()
        ))?
        .query_row([session_id], |row| row.get(0))
        .optional()?)
}

// Retained terminal ------------------------------------------------------------------------

/// The terminal run the view keeps while no run is active: the session's newest run, when
/// it is terminal, while its terminal message is pending or its first turn is open, and for
/// [`TERMINAL_RETAINED_MS`] after that turn ended — unless `clearTerminal` removed it. A
/// sent terminal message no turn has started on yet counts from the moment it was sent.
pub(super) fn retained_terminal(conn: &Connection, session_id: &str, now_ms: i64) -> StoreResult<Option<String>> {
    let newest: Option<(String, bool, bool)> = conn
        .prepare_cached(
            "SELECT r.run_id, r.status IN ('completed', 'failed', 'timed_out', 'cancelled'),
                    EXISTS (SELECT 1 FROM session_views v WHERE v.target_session_id = ?1 AND v.cleared_run_id = r.run_id)
             FROM runs r JOIN run_bindings b ON b.run_id = r.run_id
             WHERE b.origin_session_id = ?1 ORDER BY r.created_at DESC, r.rowid DESC LIMIT 1",
        )?
        .query_row([session_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((run_id, terminal, cleared)) = newest else {
        return Ok(None);
    };
    if !terminal || cleared {
        return Ok(None);
    }
    let retained = match terminal_message_until(conn, &run_id)? {
        Retention::None => false,
        Retention::Open => true,
        Retention::Until(until) => now_ms < until,
    };
    Ok(retained.then_some(run_id))
}

enum Retention {
    None,
    Open,
    Until(i64),
}

/// How long the run's terminal message keeps it in view.
fn terminal_message_until(conn: &Connection, run_id: &str) -> StoreResult<Retention> {
    let message: Option<(String, String, i64)> = conn
        .prepare_cached(
            "SELECT workflow_message_id, status, updated_at FROM workflow_messages
             WHERE run_id = ?1 AND kind = 'terminal' ORDER BY order_number DESC LIMIT 1",
        )?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((message_id, status, sent_at)) = message else {
        return Ok(Retention::None);
    };
    match status.as_str() {
        "pending" => return Ok(Retention::Open),
        "cancelled" => return Ok(Retention::None),
        _ => {}
    }
    let first_turn: Option<(String, Option<i64>)> = conn
        .prepare_cached(
            "SELECT status, ended_at FROM workflow_turns WHERE workflow_message_id = ?1
             ORDER BY started_at, turn_id LIMIT 1",
        )?
        .query_row([&message_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(match first_turn {
        None => Retention::Until(sent_at + TERMINAL_RETAINED_MS),
        Some((_, None)) => Retention::Open,
        Some((_, Some(ended_at))) => Retention::Until(ended_at + TERMINAL_RETAINED_MS),
    })
}

// Window -----------------------------------------------------------------------------------

/// Which messages the window holds: every pending one, the newest sent message of each
/// pending request (a step, or a decision, so a branch report can prove it still shows),
/// and each sent terminal or follow-up message whose first turn has not ended.
const WINDOW_PREDICATE: &str = "m.target_session_id = ?1 AND (
       m.status = 'pending'
    OR (m.status = 'sent' AND m.kind IN ('step', 'decision')
        AND EXISTS (SELECT 1 FROM interactive_requests i WHERE i.request_id = m.source_id AND i.status = 'pending')
        AND NOT EXISTS (SELECT 1 FROM workflow_messages n WHERE n.source_id = m.source_id AND n.kind = m.kind
                          AND n.status = 'sent' AND n.order_number > m.order_number))
    OR (m.status = 'sent' AND m.kind IN ('terminal', 'followUp')
        AND NOT EXISTS (SELECT 1 FROM workflow_turns t WHERE t.workflow_message_id = m.workflow_message_id
                          AND t.status != 'open')))";

struct WindowRow {
    id: String,
    run_id: String,
    kind: String,
    reason: Option<String>,
    source_id: String,
    order: i64,
    status: String,
    pi_entry_id: Option<String>,
    content_hash: String,
    content_bytes: usize,
}

struct Window {
    rows: Vec<WindowRow>,
    count: i64,
}

/// The window's rows in session order, within both bounds, and the complete count.
fn window(conn: &Connection, session_id: &str) -> StoreResult<Window> {
    let count: i64 = conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM workflow_messages m WHERE {WINDOW_PREDICATE}"
        ))?
        .query_row([session_id], |row| row.get(0))?;
    let candidates = conn
        .prepare_cached(&format!(
            "SELECT m.workflow_message_id, m.run_id, m.kind, m.reason, m.source_id, m.order_number, m.status,
                    m.pi_session_entry_id, m.content_hash,
                    (SELECT b.byte_length FROM blobs b WHERE b.blob_hash = m.content_hash AND b.media_type = ?2)
             FROM workflow_messages m WHERE {WINDOW_PREDICATE} ORDER BY m.order_number LIMIT ?3"
        ))?
        .query_map(
            params![
                session_id,
                super::blobs::JSON_MEDIA_TYPE,
                SESSION_WINDOW_MESSAGES_MAX as i64
            ],
            |row| {
                Ok(WindowRow {
                    id: row.get(0)?,
                    run_id: row.get(1)?,
                    kind: row.get(2)?,
                    reason: row.get(3)?,
                    source_id: row.get(4)?,
                    order: row.get(5)?,
                    status: row.get(6)?,
                    pi_entry_id: row.get(7)?,
                    content_hash: row.get(8)?,
                    content_bytes: row.get::<_, Option<i64>>(9)?.unwrap_or(0) as usize,
                })
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(candidates.len());
    let mut bytes = 0;
    for row in candidates {
        // Stop at the first message that does not fit, so the window stays in order.
        if bytes + row.content_bytes > SESSION_WINDOW_CONTENT_BYTES_MAX {
            break;
        }
        bytes += row.content_bytes;
        rows.push(row);
    }
    Ok(Window { rows, count })
}

/// What a message's eligibility depends on beyond its own source.
struct Eligibility {
    turn_open: bool,
    run_active: bool,
    terminal_pending: bool,
}

fn window_message(conn: &Connection, row: WindowRow, context: &Eligibility) -> StoreResult<WindowMessage> {
    let eligible = row.status == "pending" && !context.turn_open && source_eligible(conn, &row, context)?;
    // A message's content is committed with it and never pruned while referenced; a missing
    // blob (a damaged file) shows as null rather than hiding the whole session.
    let content = super::blobs::read_json(conn, &row.content_hash)?.unwrap_or(serde_json::Value::Null);
    Ok(WindowMessage {
        workflow_message_id: row.id,
        run_id: row.run_id,
        kind: row.kind,
        reason: row.reason,
        source_id: row.source_id,
        order: row.order,
        status: row.status,
        pi_entry_id: row.pi_entry_id,
        content,
        content_bytes: row.content_bytes,
        eligible,
    })
}

/// A step while its request is pending and its run not paused; a decision while it is
/// pending; a follow-up only after its run completed, no run holds the session and no
/// terminal message waits (follow-ups come after the final outcome); the rest always.
fn source_eligible(conn: &Connection, row: &WindowRow, context: &Eligibility) -> StoreResult<bool> {
    let sql = match row.kind.as_str() {
        "step" => {
            "SELECT count(*) > 0 FROM interactive_requests i JOIN runs r ON r.run_id = i.run_id
             WHERE i.request_id = ?1 AND i.status = 'pending' AND r.paused = 0"
        }
        "decision" => "SELECT count(*) > 0 FROM interactive_requests WHERE request_id = ?1 AND status = 'pending'",
        "followUp" => {
            if context.run_active || context.terminal_pending {
                return Ok(false);
            }
            return Ok(conn
                .prepare_cached("SELECT count(*) > 0 FROM runs WHERE run_id = ?1 AND status = 'completed'")?
                .query_row([&row.run_id], |found| found.get(0))?);
        }
        _ => return Ok(true),
    };
    Ok(conn
        .prepare_cached(sql)?
        .query_row([&row.source_id], |found| found.get(0))?)
}

fn terminal_pending(conn: &Connection, session_id: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) > 0 FROM workflow_messages
             WHERE target_session_id = ?1 AND status = 'pending' AND kind = 'terminal'",
        )?
        .query_row([session_id], |row| row.get(0))?)
}

/// SHA-256 of the facts (contents are immutable per message ID, so their sizes stand in).
fn digest_of(facts: &SessionFacts) -> String {
    let messages: Vec<serde_json::Value> = facts
        .messages
        .iter()
        .map(|message| {
            serde_json::json!([
                message.workflow_message_id,
                message.status,
                message.pi_entry_id,
                message.eligible,
                message.content_bytes
            ])
        })
        .collect();
    let digested = serde_json::json!({
        "activeRun": facts.active_run_id,
        "retainedTerminal": facts.retained_terminal_run_id,
        "messages": messages,
        "messageCount": facts.message_count,
        "truncated": facts.truncated,
        "openTurn": facts.open_turn,
    });
    // Built the same way every time, so equal facts give equal text and digest.
    crate::digest::sha256_hex(digested.to_string().as_bytes())
}
