//! Workflow messages: content Pi must add to an origin conversation (step prompts,
//! decisions, notifications, terminal results, follow-ups), in acceptance order per session.
//!
//! Architecture Invariant: a message row is created in the same transaction as its source
//! record (an interactive request, a notify node's result, a terminal run), never later.

use rusqlite::{OptionalExtension, params};

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
    let message_id = format!(
        "msg-{}-{order}",
        &crate::digest::sha256_hex(message.target_session_id.as_bytes())[..16]
    );
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
