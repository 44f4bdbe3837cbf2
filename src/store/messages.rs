//! Workflow messages: content Pi must add to an origin conversation (step prompts,
//! decisions, notifications, terminal results, follow-ups), in acceptance order per session.
//!
//! Architecture Invariant: a message row is created in the same transaction as its source
//! record (an interactive request, a notify node's result, a terminal run), never later.

use rusqlite::{OptionalExtension, params};

use super::error::StoreResult;
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
