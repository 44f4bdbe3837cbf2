//! External channel delivery of protected decisions (docs/CHANNELS.md): `channel_messages` (a
//! decision presented in one chat of one Telegram profile: the feature record for delivery and
//! settlement) and the managed effects that present it (owner `channel`: the send, the prompts
//! for text, the closing edit). Each adapter launch takes the next epoch of its profile; an
//! attempt records the epoch it was given to, and only that epoch's adapter can settle it.
//!
//! Architecture Invariant: nothing is sent or edited without an `applying` effect attempt
//! recorded first; an interrupted attempt (adapter or server death) becomes `ambiguous` and
//! is never attempted again without an operator's `recover` (`confirm` or `retry`). A
//! channel's effects never touch its run's lifecycle: a runner's review, resume gating and
//! crash handling see only the runner's own (`effects`, owner `runner`).

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::json;

use super::blobs;
use super::decisions::{self, HumanAnswer, Resolved};
use super::error::{StoreError, StoreResult};
use super::writer::WriteTx;
use crate::decision::{DecisionRequest, Response};
use crate::wire_enum::wire_enum;

/// Attempts of one channel effect (known, retryable refusals such as a rate limit) before it
/// is given up as `rejected`.
pub const CHANNEL_ATTEMPTS_MAX: i64 = 5;
/// Pending decisions one planning pass presents, at most.
pub const PLAN_BATCH_MAX: i64 = 64;
/// Text prompts one channel message may ask for (a person pressing a text choice again and
/// again gets no more).
pub const PROMPTS_PER_MESSAGE_MAX: i64 = 8;
/// Channel messages one status or recovery listing shows.
pub const LISTING_MAX: i64 = 100;
/// A channel message's revision once its send applied (its buttons are live).
const REVISION_SENT: i64 = 1;
/// A channel message's revision once its closing edit applied.
const REVISION_CLOSED: i64 = 2;

wire_enum! {
    /// What a channel effect does on the external channel.
    pub enum ChannelOperation {
        /// Present the decision (a new message with its buttons).
        Send = "send",
        /// Ask for the text of a choice that takes one (a reply-to prompt).
        Prompt = "prompt",
        /// Show the decision as settled (no buttons).
        Close = "close",
    }
}

impl ChannelOperation {
    fn effect_type(self) -> &'static str {
        match self {
            ChannelOperation::Send => "channel.telegram.send",
            ChannelOperation::Prompt => "channel.telegram.prompt",
            ChannelOperation::Close => "channel.telegram.close",
        }
    }
}

wire_enum! {
    /// An operator's verdict on an ambiguous channel attempt after checking Telegram.
    pub enum ChannelRecovery {
        /// It happened: record success.
        Confirm = "confirm",
        /// It did not (or a duplicate is acceptable): a new numbered attempt.
        Retry = "retry",
    }
}

/// Why a channel frame or command was refused. `code()` is the client error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    #[error("adapter epoch {epoch} of profile {profile} is not the current one; its work belongs to a newer launch")]
    StaleAdapter { profile: String, epoch: i64 },
    #[error("attempt {attempt_id} is not an applying attempt of this adapter; nothing was settled")]
    StaleAttempt { attempt_id: String },
    #[error(
        "channel revision {revision} of {channel_message_id} is not the one its attempt presents; nothing was changed"
    )]
    StaleRevision { channel_message_id: String, revision: i64 },
    #[error("no channel message {channel_message_id}; list them with `pi-workflows channel status`")]
    UnknownMessage { channel_message_id: String },
    #[error("channel message {channel_message_id} has no ambiguous attempt to recover; nothing was changed")]
    NothingToRecover { channel_message_id: String },
}

impl ChannelError {
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            ChannelError::StaleAdapter { .. } => "staleAdapter",
            ChannelError::StaleAttempt { .. } => "staleAttempt",
            ChannelError::StaleRevision { .. } => "staleRevision",
            ChannelError::UnknownMessage { .. } => "notFound",
            ChannelError::NothingToRecover { .. } => "nothingToRecover",
        }
    }
}

/// One adapter launch: its profile and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterFence {
    pub profile: String,
    pub epoch: i64,
}

/// Take the next epoch for a new launch of `profile`. An attempt an older launch left
/// applying can no longer be settled by anyone: it becomes ambiguous now.
pub fn launch(tx: &WriteTx<'_>, profile: &str) -> StoreResult<AdapterFence> {
    interrupt_applying(tx, Some(profile))?;
    let epoch: i64 = tx
        .conn()
        .prepare_cached(
            "INSERT INTO channel_adapters (profile, epoch, launched_at) VALUES (?1, 1, ?2)
             ON CONFLICT (profile) DO UPDATE SET epoch = epoch + 1, launched_at = excluded.launched_at
             RETURNING epoch",
        )?
        .query_row(params![profile, tx.now_ms()], |row| row.get(0))?;
    Ok(AdapterFence {
        profile: profile.to_string(),
        epoch,
    })
}

fn require_current(conn: &Connection, fence: &AdapterFence) -> StoreResult<()> {
    let current: Option<i64> = conn
        .prepare_cached("SELECT epoch FROM channel_adapters WHERE profile = ?1")?
        .query_row([&fence.profile], |row| row.get(0))
        .optional()?;
    if current == Some(fence.epoch) {
        return Ok(());
    }
    Err(StoreError::Channel(ChannelError::StaleAdapter {
        profile: fence.profile.clone(),
        epoch: fence.epoch,
    }))
}

/// Effects of `profile` (all profiles: `None`) that were applying when their adapter or the
/// server stopped: each attempt becomes `ambiguous` (a send may have reached Telegram).
/// Returns how many.
pub fn interrupt_applying(tx: &WriteTx<'_>, profile: Option<&str>) -> StoreResult<usize> {
    let conn = tx.conn();
    let now = tx.now_ms();
    let scope =
        "SELECT e.effect_id FROM effects e JOIN channel_messages c ON c.channel_message_id = e.channel_message_id
                 WHERE e.owner = 'channel' AND e.status = 'applying' AND (?2 IS NULL OR c.profile = ?2)";
    conn.prepare_cached(&format!(
        "UPDATE effect_attempts SET outcome = 'ambiguous', finished_at = ?1
         WHERE outcome IS NULL AND effect_id IN ({scope})"
    ))?
    .execute(params![now, profile])?;
    let changed = conn
        .prepare_cached(&format!(
            "UPDATE effects SET status = 'ambiguous', updated_at = ?1 WHERE effect_id IN ({scope})"
        ))?
        .execute(params![now, profile])?;
    Ok(changed)
}

/// Present pending, unresolved decisions whose audience `profile` serves: one `pending`
/// channel message per allowed chat (at most [`PLAN_BATCH_MAX`] decisions a pass). Returns
/// how many messages were created.
pub fn plan(tx: &WriteTx<'_>, fence: &AdapterFence, audiences: &[String], chat_ids: &[i64]) -> StoreResult<usize> {
    require_current(tx.conn(), fence)?;
    let mut created = 0;
    for audience in audiences {
        let decisions: Vec<(String, String)> = tx
            .conn()
            .prepare_cached(
                "SELECT d.decision_id, d.run_id FROM human_decisions d
                 JOIN interactive_requests i ON i.request_id = d.decision_id
                 WHERE d.audience = ?1 AND i.status = 'pending'
                   AND NOT EXISTS (SELECT 1 FROM human_decision_resolutions r WHERE r.decision_id = d.decision_id)
                   AND NOT EXISTS (SELECT 1 FROM channel_messages c WHERE c.decision_id = d.decision_id AND c.profile = ?2)
                 ORDER BY d.created_at LIMIT ?3",
            )?
            .query_map(params![audience, fence.profile, PLAN_BATCH_MAX], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        for (decision_id, run_id) in decisions {
            for chat_id in chat_ids {
                insert_message(tx, &decision_id, &run_id, &fence.profile, *chat_id)?;
                created += 1;
            }
        }
    }
    Ok(created)
}

fn insert_message(tx: &WriteTx<'_>, decision_id: &str, run_id: &str, profile: &str, chat_id: i64) -> StoreResult<()> {
    let random = |bytes| {
        crate::digest::random_hex(bytes).ok_or_else(|| StoreError::InvalidInput {
            what: "channel message",
            detail: "the system's random source failed".to_string(),
        })
    };
    let (id, nonce) = (format!("cm-{}", random(8)?), random(8)?);
    tx.conn()
        .prepare_cached(
            "INSERT INTO channel_messages (channel_message_id, decision_id, run_id, profile, chat_id, nonce,
                                           state, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?7)",
        )?
        .execute(params![id, decision_id, run_id, profile, chat_id, nonce, tx.now_ms()])?;
    Ok(())
}

/// One present the adapter is to make now: the effect attempt is recorded `applying`.
#[derive(Debug, Clone, PartialEq)]
pub struct Present {
    /// The protocol's attempt ID: `<channel message>.<operation>.<attempt number>`.
    pub attempt_id: String,
    pub operation: ChannelOperation,
    pub channel_message_id: String,
    pub chat_id: i64,
    pub nonce: String,
    /// The message the present edits or replies to (close, prompt).
    pub telegram_message_id: Option<i64>,
    /// The revision the present makes (`channelRevision` of its frame).
    pub channel_revision: i64,
    /// The decision as the server stored it (what the presentation is made from).
    pub request: DecisionRequest,
    /// How the decision was settled (close only).
    pub resolution: Option<(String, Option<String>)>,
    /// The choice whose text a prompt asks for.
    pub for_choice_id: Option<String>,
}

/// The next present for this adapter, with its attempt recorded `applying` — or none while
/// one is in flight (one at a time per adapter, so its settle orders everything) or nothing is
/// due. Closing edits come first (a settled decision should stop taking presses), then
/// prompts, then sends.
pub fn next_present(tx: &WriteTx<'_>, fence: &AdapterFence) -> StoreResult<Option<Present>> {
    require_current(tx.conn(), fence)?;
    if in_flight(tx.conn(), &fence.profile)? {
        return Ok(None);
    }
    if let Some(present) = next_close(tx, fence)? {
        return Ok(Some(present));
    }
    if let Some(present) = next_prompt(tx, fence)? {
        return Ok(Some(present));
    }
    next_send(tx, fence)
}

fn in_flight(conn: &Connection, profile: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) > 0 FROM effects e JOIN channel_messages c ON c.channel_message_id = e.channel_message_id
             WHERE e.owner = 'channel' AND e.status = 'applying' AND c.profile = ?1",
        )?
        .query_row([profile], |row| row.get(0))?)
}

/// A message as a present needs it.
struct MessageRow {
    channel_message_id: String,
    run_id: String,
    decision_id: String,
    chat_id: i64,
    nonce: String,
    channel_revision: i64,
}

const MESSAGE_COLUMNS: &str = "c.channel_message_id, c.run_id, c.decision_id, c.chat_id, c.nonce, c.channel_revision";

fn message_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        channel_message_id: row.get(0)?,
        run_id: row.get(1)?,
        decision_id: row.get(2)?,
        chat_id: row.get(3)?,
        nonce: row.get(4)?,
        channel_revision: row.get(5)?,
    })
}

fn next_send(tx: &WriteTx<'_>, fence: &AdapterFence) -> StoreResult<Option<Present>> {
    // A pending message whose send effect is new or pending (an ambiguous one waits for
    // recovery; a resolved decision is not sent at all).
    let row = tx
        .conn()
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM channel_messages c
             WHERE c.profile = ?1 AND c.state = 'pending'
               AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.channel_message_id = c.channel_message_id
                               AND e.effect_type = 'channel.telegram.send' AND e.status <> 'pending')
             ORDER BY c.created_at LIMIT 1"
        ))?
        .query_row([&fence.profile], message_row)
        .optional()?;
    let Some(message) = row else {
        return Ok(None);
    };
    if decisions::resolution_of(tx.conn(), &message.decision_id)?.is_some() {
        set_state(tx, &message.channel_message_id, "closed", None)?;
        return next_send(tx, fence);
    }
    let attempt = begin_attempt(tx, fence, &message, ChannelOperation::Send, &message.channel_message_id)?;
    present_of(tx, message, ChannelOperation::Send, attempt, None, None).map(Some)
}

fn next_close(tx: &WriteTx<'_>, fence: &AdapterFence) -> StoreResult<Option<Present>> {
    let row = tx
        .conn()
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM channel_messages c
             WHERE c.profile = ?1 AND c.state = 'presented'
               AND EXISTS (SELECT 1 FROM human_decision_resolutions r WHERE r.decision_id = c.decision_id)
               AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.channel_message_id = c.channel_message_id
                               AND e.effect_type = 'channel.telegram.close' AND e.status <> 'pending')
             ORDER BY c.updated_at LIMIT 1"
        ))?
        .query_row([&fence.profile], message_row)
        .optional()?;
    let Some(message) = row else {
        return Ok(None);
    };
    let Some(telegram_message_id) = sent_message_id(tx.conn(), &message.channel_message_id)? else {
        // A send an operator confirmed without its Telegram reference cannot be edited.
        set_state(tx, &message.channel_message_id, "closed", None)?;
        return next_close(tx, fence);
    };
    let resolution = resolution_text(tx.conn(), &message.decision_id)?;
    let attempt = begin_attempt(
        tx,
        fence,
        &message,
        ChannelOperation::Close,
        &message.channel_message_id,
    )?;
    present_of(
        tx,
        message,
        ChannelOperation::Close,
        attempt,
        Some(telegram_message_id),
        Some(resolution),
    )
    .map(Some)
}

fn next_prompt(tx: &WriteTx<'_>, fence: &AdapterFence) -> StoreResult<Option<Present>> {
    let row = tx
        .conn()
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS}, e.idempotency_key FROM channel_messages c
             JOIN effects e ON e.channel_message_id = c.channel_message_id
             WHERE c.profile = ?1 AND c.state = 'presented' AND e.effect_type = 'channel.telegram.prompt'
               AND e.status = 'pending'
             ORDER BY e.created_at LIMIT 1"
        ))?
        .query_row([&fence.profile], |row| {
            Ok((message_row(row)?, row.get::<_, String>(6)?))
        })
        .optional()?;
    let Some((message, key)) = row else {
        return Ok(None);
    };
    let Some(telegram_message_id) = sent_message_id(tx.conn(), &message.channel_message_id)? else {
        cancel_effect(tx, &message.channel_message_id, &key)?;
        return next_prompt(tx, fence);
    };
    let choice = prompt_choice(&key).to_string();
    let attempt = begin_attempt(tx, fence, &message, ChannelOperation::Prompt, &key)?;
    let mut present = present_of(
        tx,
        message,
        ChannelOperation::Prompt,
        attempt,
        Some(telegram_message_id),
        None,
    )?;
    present.for_choice_id = Some(choice);
    Ok(Some(present))
}

/// A prompt's effect key: `prompt:<choice>:<update>` (one prompt per press update).
fn prompt_key(choice: &str, update_id: i64) -> String {
    format!("prompt:{choice}:{update_id}")
}

fn prompt_choice(key: &str) -> &str {
    key.split(':').nth(1).unwrap_or_default()
}

/// Record (or renew) the effect of `operation` on `message` as applying under a new attempt
/// given to this adapter epoch. Returns the attempt number.
fn begin_attempt(
    tx: &WriteTx<'_>,
    fence: &AdapterFence,
    message: &MessageRow,
    operation: ChannelOperation,
    key: &str,
) -> StoreResult<i64> {
    let effect_id = effect_id_of(&message.channel_message_id, operation, key);
    let conn = tx.conn();
    let now = tx.now_ms();
    let attempts: Option<i64> = conn
        .prepare_cached("SELECT attempt_count FROM effects WHERE effect_id = ?1 AND status = 'pending'")?
        .query_row([&effect_id], |row| row.get(0))
        .optional()?;
    let attempt = match attempts {
        Some(count) => {
            conn.prepare_cached(
                "UPDATE effects SET status = 'applying', attempt_count = ?1, updated_at = ?2 WHERE effect_id = ?3",
            )?
            .execute(params![count + 1, now, effect_id])?;
            count + 1
        }
        None => {
            conn.prepare_cached(
                "INSERT INTO effects (effect_id, run_id, effect_type, idempotency_key, request_fingerprint, recovery,
                                      owner, channel_message_id, request_summary, status, attempt_count, created_at,
                                      updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'manual', 'channel', ?6, ?7, 'applying', 1, ?8, ?8)",
            )?
            .execute(params![
                effect_id,
                message.run_id,
                operation.effect_type(),
                key,
                message.decision_id,
                message.channel_message_id,
                format!("telegram {} for a decision", operation.as_str()),
                now
            ])?;
            1
        }
    };
    conn.prepare_cached(
        "INSERT INTO effect_attempts (effect_id, attempt_number, runner_epoch, lease_generation, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        effect_id,
        attempt,
        format!("channel:{}", fence.profile),
        fence.epoch,
        now
    ])?;
    Ok(attempt)
}

fn effect_id_of(channel_message_id: &str, operation: ChannelOperation, key: &str) -> String {
    match operation {
        ChannelOperation::Prompt => format!("{channel_message_id}/{key}"),
        _ => format!("{channel_message_id}/{}", operation.as_str()),
    }
}

fn present_of(
    tx: &WriteTx<'_>,
    message: MessageRow,
    operation: ChannelOperation,
    attempt: i64,
    telegram_message_id: Option<i64>,
    resolution: Option<(String, Option<String>)>,
) -> StoreResult<Present> {
    let pending = decisions::request_of(tx.conn(), &message.decision_id)?;
    let channel_revision = revision_of(operation, message.channel_revision);
    Ok(Present {
        attempt_id: attempt_id_of(&message.channel_message_id, operation, attempt),
        operation,
        channel_message_id: message.channel_message_id,
        chat_id: message.chat_id,
        nonce: message.nonce,
        telegram_message_id,
        channel_revision,
        request: pending,
        resolution,
        for_choice_id: None,
    })
}

/// The channel revision a present of `operation` makes (its frame's `channelRevision`), given
/// the message's current one: a send makes 1, a closing edit 2, a prompt changes nothing.
fn revision_of(operation: ChannelOperation, current: i64) -> i64 {
    match operation {
        ChannelOperation::Send => REVISION_SENT,
        ChannelOperation::Prompt => current.max(REVISION_SENT),
        ChannelOperation::Close => REVISION_CLOSED,
    }
}

fn attempt_id_of(channel_message_id: &str, operation: ChannelOperation, attempt: i64) -> String {
    format!("{channel_message_id}.{}.{attempt}", operation.as_str())
}

/// The channel message, operation and attempt number an attempt ID names.
fn parse_attempt_id(attempt_id: &str) -> Option<(&str, ChannelOperation, i64)> {
    let mut parts = attempt_id.rsplitn(3, '.');
    let number = parts.next()?.parse().ok()?;
    let operation = ChannelOperation::from_wire(parts.next()?)?;
    Some((parts.next()?, operation, number))
}

/// How the adapter settled one present attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Done; the new Telegram message (send, prompt) or the edited one.
    Applied { chat_id: i64, message_id: i64 },
    /// Refused before anything happened; `retryable` may try a new attempt.
    Rejected { retryable: bool },
    /// It may or may not have happened: ambiguous until an operator recovers it.
    Uncertain,
}

/// What a `channel.settle` frame claims: its header's attempt and channel revision, and the
/// channel message its payload names. All must be the applying attempt's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleClaim<'a> {
    pub attempt_id: &'a str,
    pub channel_message_id: &'a str,
    pub channel_revision: i64,
}

impl Present {
    /// The claim of this present's own settle.
    #[must_use]
    pub fn claim(&self) -> SettleClaim<'_> {
        SettleClaim {
            attempt_id: &self.attempt_id,
            channel_message_id: &self.channel_message_id,
            channel_revision: self.channel_revision,
        }
    }
}

/// Settle the applying attempt `claim` names, of this adapter epoch. A stale epoch, another
/// adapter's attempt, one that is not applying (interrupted and made ambiguous in between), a
/// payload naming another message, or a channel revision other than the one the attempt
/// presents (a stale frame) is refused and changes nothing.
pub fn settle(
    tx: &WriteTx<'_>,
    fence: &AdapterFence,
    claim: &SettleClaim<'_>,
    outcome: &AttemptOutcome,
) -> StoreResult<()> {
    require_current(tx.conn(), fence)?;
    let attempt_id = claim.attempt_id;
    let stale = || {
        StoreError::Channel(ChannelError::StaleAttempt {
            attempt_id: crate::protocol::bounded_text(attempt_id, 128),
        })
    };
    let (channel_message_id, operation, number) = parse_attempt_id(attempt_id)
        .filter(|(id, _, _)| *id == claim.channel_message_id)
        .ok_or_else(stale)?;
    let effect = applying_effect(tx.conn(), fence, channel_message_id, operation, number)?.ok_or_else(stale)?;
    let current: i64 = tx
        .conn()
        .prepare_cached("SELECT channel_revision FROM channel_messages WHERE channel_message_id = ?1")?
        .query_row([channel_message_id], |row| row.get(0))?;
    if claim.channel_revision != revision_of(operation, current) {
        return Err(StoreError::Channel(ChannelError::StaleRevision {
            channel_message_id: crate::protocol::bounded_text(channel_message_id, 64),
            revision: claim.channel_revision,
        }));
    }
    let (status, attempt_outcome, result) = match outcome {
        AttemptOutcome::Applied { chat_id, message_id } => (
            "applied",
            "applied",
            Some(json!({"chatId": chat_id, "messageId": message_id})),
        ),
        AttemptOutcome::Rejected { retryable: true } if number < CHANNEL_ATTEMPTS_MAX => ("pending", "rejected", None),
        AttemptOutcome::Rejected { .. } => ("rejected", "rejected", None),
        AttemptOutcome::Uncertain => ("ambiguous", "ambiguous", None),
    };
    let result_hash = match &result {
        Some(value) => Some(blobs::put_json(tx, value, 1024)?),
        None => None,
    };
    let now = tx.now_ms();
    tx.conn()
        .prepare_cached(
            "UPDATE effect_attempts SET outcome = ?1, finished_at = ?2 WHERE effect_id = ?3 AND attempt_number = ?4",
        )?
        .execute(params![attempt_outcome, now, effect, number])?;
    tx.conn()
        .prepare_cached("UPDATE effects SET status = ?1, result_hash = ?2, updated_at = ?3 WHERE effect_id = ?4")?
        .execute(params![status, result_hash, now, effect])?;
    match (operation, status) {
        (ChannelOperation::Send, "applied") => set_state(tx, channel_message_id, "presented", Some(REVISION_SENT)),
        (ChannelOperation::Send, "rejected") => set_state(tx, channel_message_id, "failed", None),
        (ChannelOperation::Close, "applied" | "rejected") => {
            set_state(tx, channel_message_id, "closed", Some(REVISION_CLOSED))
        }
        _ => Ok(()),
    }
}

fn applying_effect(
    conn: &Connection,
    fence: &AdapterFence,
    channel_message_id: &str,
    operation: ChannelOperation,
    number: i64,
) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT e.effect_id FROM effects e
             JOIN effect_attempts a ON a.effect_id = e.effect_id AND a.attempt_number = e.attempt_count
             JOIN channel_messages c ON c.channel_message_id = e.channel_message_id
             WHERE e.channel_message_id = ?1 AND e.effect_type = ?2 AND e.status = 'applying'
               AND e.attempt_count = ?3 AND a.outcome IS NULL AND a.lease_generation = ?4 AND c.profile = ?5",
        )?
        .query_row(
            params![
                channel_message_id,
                operation.effect_type(),
                number,
                fence.epoch,
                fence.profile
            ],
            |row| row.get(0),
        )
        .optional()?)
}

fn set_state(tx: &WriteTx<'_>, channel_message_id: &str, state: &str, revision: Option<i64>) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE channel_messages SET state = ?1, channel_revision = coalesce(?2, channel_revision), updated_at = ?3
             WHERE channel_message_id = ?4",
        )?
        .execute(params![state, revision, tx.now_ms(), channel_message_id])?;
    Ok(())
}

fn cancel_effect(tx: &WriteTx<'_>, channel_message_id: &str, key: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE effects SET status = 'cancelled', updated_at = ?1
             WHERE channel_message_id = ?2 AND idempotency_key = ?3 AND status = 'pending'",
        )?
        .execute(params![tx.now_ms(), channel_message_id, key])?;
    Ok(())
}

/// The Telegram message a channel message's applied send made (from the effect's result).
fn sent_message_id(conn: &Connection, channel_message_id: &str) -> StoreResult<Option<i64>> {
    let hash: Option<Option<String>> = conn
        .prepare_cached(
            "SELECT result_hash FROM effects
             WHERE channel_message_id = ?1 AND effect_type = 'channel.telegram.send' AND status = 'applied'",
        )?
        .query_row([channel_message_id], |row| row.get(0))
        .optional()?;
    let Some(hash) = hash.flatten() else {
        return Ok(None);
    };
    Ok(blobs::read_json(conn, &hash)?.and_then(|result| result["messageId"].as_i64()))
}

/// The winning choice (and its provenance) of a settled decision, for its closing edit.
fn resolution_text(conn: &Connection, decision_id: &str) -> StoreResult<(String, Option<String>)> {
    let (provenance, response_hash): (String, Option<String>) = conn
        .prepare_cached("SELECT provenance, response_hash FROM human_decision_resolutions WHERE decision_id = ?1")?
        .query_row([decision_id], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let choice = match response_hash {
        Some(hash) => {
            blobs::read_json(conn, &hash)?.and_then(|response| response["choice"].as_str().map(str::to_string))
        }
        None => None,
    };
    Ok((provenance, choice))
}

/// What an adapter forwarded: a press or reply of an allowed person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelAnswer<'a> {
    pub channel_message_id: &'a str,
    pub choice: &'a str,
    pub text: Option<&'a str>,
    /// A press on a choice that takes text: ask for it.
    pub wants_text: bool,
    pub update_id: i64,
    /// The revision the adapter last applied for the message (its frame's `channelRevision`).
    pub channel_revision: i64,
    /// The Telegram message pressed, when the adapter learned it from the press (a send an
    /// operator confirmed without its reference).
    pub telegram_message_id: Option<i64>,
}

/// What a forwarded answer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// It won: the decision is settled.
    Settled(Resolved),
    /// A prompt for the choice's text is queued.
    Prompted,
    /// A repeat of an update already handled (delivery is at least once): nothing changed.
    Repeated,
}

/// A person's press or reply on a presented message: the decision's first valid answer wins
/// (`decisions::answer`, refused as there when it is settled, expired or not a choice).
pub fn answer(tx: &WriteTx<'_>, fence: &AdapterFence, answer: &ChannelAnswer<'_>) -> StoreResult<Answered> {
    require_current(tx.conn(), fence)?;
    let found: Option<(String, String, i64)> = tx
        .conn()
        .prepare_cached(
            "SELECT run_id, decision_id, channel_revision FROM channel_messages
             WHERE channel_message_id = ?1 AND profile = ?2 AND state = 'presented'",
        )?
        .query_row(params![answer.channel_message_id, fence.profile], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((run_id, decision_id, revision)) = found else {
        return Err(StoreError::Channel(ChannelError::UnknownMessage {
            channel_message_id: crate::protocol::bounded_text(answer.channel_message_id, 64),
        }));
    };
    // An answer from a copy the adapter presented at another revision is not this message's.
    if answer.channel_revision != revision {
        return Err(StoreError::Channel(ChannelError::StaleRevision {
            channel_message_id: crate::protocol::bounded_text(answer.channel_message_id, 64),
            revision: answer.channel_revision,
        }));
    }
    if let Some(message_id) = answer.telegram_message_id {
        learn_reference(tx, answer.channel_message_id, message_id)?;
    }
    if answer.wants_text {
        return queue_prompt(tx, answer, &run_id, &decision_id);
    }
    let response = Response {
        choice: answer.choice.to_string(),
        text: answer.text.map(str::to_string),
    };
    let resolved = decisions::answer(
        tx,
        &HumanAnswer {
            run_id: &run_id,
            decision_id: Some(&decision_id),
            request_digest: None,
            response: &response,
            expected: None,
        },
    )?;
    Ok(Answered::Settled(resolved))
}

/// A send an operator confirmed has no Telegram reference; the first press on it tells which
/// message it is, kept as the send's result (so its prompts and closing edit can name it). A
/// known reference is never replaced.
fn learn_reference(tx: &WriteTx<'_>, channel_message_id: &str, message_id: i64) -> StoreResult<()> {
    if sent_message_id(tx.conn(), channel_message_id)?.is_some() {
        return Ok(());
    }
    let chat_id: i64 = tx
        .conn()
        .prepare_cached("SELECT chat_id FROM channel_messages WHERE channel_message_id = ?1")?
        .query_row([channel_message_id], |row| row.get(0))?;
    let result = blobs::put_json(tx, &json!({"chatId": chat_id, "messageId": message_id}), 1024)?;
    tx.conn()
        .prepare_cached(
            "UPDATE effects SET result_hash = ?1, updated_at = ?2
             WHERE channel_message_id = ?3 AND effect_type = 'channel.telegram.send' AND status = 'applied'
               AND result_hash IS NULL",
        )?
        .execute(params![result, tx.now_ms(), channel_message_id])?;
    Ok(())
}

fn queue_prompt(
    tx: &WriteTx<'_>,
    answer: &ChannelAnswer<'_>,
    run_id: &str,
    decision_id: &str,
) -> StoreResult<Answered> {
    let request = decisions::pending_for_answer(tx.conn(), run_id, Some(decision_id))?.request;
    let takes_text = request
        .choices
        .iter()
        .any(|choice| choice.id == answer.choice && choice.input.is_some());
    if !takes_text {
        return Err(StoreError::InvalidInput {
            what: "channel answer",
            detail: "that choice takes no text".to_string(),
        });
    }
    let key = prompt_key(answer.choice, answer.update_id);
    let effect_id = effect_id_of(answer.channel_message_id, ChannelOperation::Prompt, &key);
    let conn = tx.conn();
    let (known, prompts): (bool, i64) = conn
        .prepare_cached(
            "SELECT count(*) FILTER (WHERE effect_id = ?1) > 0, count(*) FROM effects
             WHERE channel_message_id = ?2 AND effect_type = 'channel.telegram.prompt'",
        )?
        .query_row(params![effect_id, answer.channel_message_id], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    if known || prompts >= PROMPTS_PER_MESSAGE_MAX {
        return Ok(Answered::Repeated);
    }
    conn.prepare_cached(
        "INSERT INTO effects (effect_id, run_id, effect_type, idempotency_key, request_fingerprint, recovery, owner,
                              channel_message_id, request_summary, status, attempt_count, created_at, updated_at)
         VALUES (?1, ?2, 'channel.telegram.prompt', ?3, ?4, 'manual', 'channel', ?5, 'telegram prompt for a decision',
                 'pending', 0, ?6, ?6)",
    )?
    .execute(params![
        effect_id,
        run_id,
        key,
        decision_id,
        answer.channel_message_id,
        tx.now_ms()
    ])?;
    Ok(Answered::Prompted)
}

/// An operator checked Telegram for an ambiguous attempt of `channel_message_id` (the newest
/// one): `confirm` records that it happened, `retry` makes it pending for a new numbered
/// attempt (a duplicate message is possible).
pub fn recover(tx: &WriteTx<'_>, channel_message_id: &str, recovery: ChannelRecovery) -> StoreResult<String> {
    let effect: Option<(String, String)> = tx
        .conn()
        .prepare_cached(
            "SELECT effect_id, effect_type FROM effects
             WHERE channel_message_id = ?1 AND owner = 'channel' AND status = 'ambiguous'
             ORDER BY updated_at DESC LIMIT 1",
        )?
        .query_row([channel_message_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((effect_id, effect_type)) = effect else {
        let known: bool = tx
            .conn()
            .prepare_cached("SELECT count(*) > 0 FROM channel_messages WHERE channel_message_id = ?1")?
            .query_row([channel_message_id], |row| row.get(0))?;
        let id = crate::protocol::bounded_text(channel_message_id, 64);
        return Err(StoreError::Channel(match known {
            true => ChannelError::NothingToRecover { channel_message_id: id },
            false => ChannelError::UnknownMessage { channel_message_id: id },
        }));
    };
    let (status, review) = match recovery {
        ChannelRecovery::Confirm => ("applied", "applied"),
        ChannelRecovery::Retry => ("pending", "retry"),
    };
    let now = tx.now_ms();
    tx.conn()
        .prepare_cached("UPDATE effects SET status = ?1, updated_at = ?2 WHERE effect_id = ?3")?
        .execute(params![status, now, effect_id])?;
    tx.conn()
        .prepare_cached(
            "UPDATE effect_attempts SET review = ?1
             WHERE effect_id = ?2 AND outcome = 'ambiguous'
               AND attempt_number = (SELECT attempt_count FROM effects WHERE effect_id = ?2)",
        )?
        .execute(params![review, effect_id])?;
    if recovery == ChannelRecovery::Confirm {
        let state = match effect_type.as_str() {
            "channel.telegram.send" => Some(("presented", REVISION_SENT)),
            "channel.telegram.close" => Some(("closed", REVISION_CLOSED)),
            _ => None,
        };
        if let Some((state, revision)) = state {
            set_state(tx, channel_message_id, state, Some(revision))?;
        }
    }
    Ok(effect_type)
}

/// Presented, open messages the adapter should track (its buttons and prompts work only for
/// messages it tracks) and does not yet: after a restart all of them, later the ones an
/// operator's `recover confirm` opened. A confirmed send has no Telegram reference
/// (`telegram_message_id` is `None`) until its first press tells it.
pub fn open_messages(conn: &Connection, profile: &str, tracked: &[String]) -> StoreResult<Vec<Present>> {
    let rows: Vec<MessageRow> = conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM channel_messages c
             WHERE c.profile = ?1 AND c.state = 'presented'
               AND NOT EXISTS (SELECT 1 FROM human_decision_resolutions r WHERE r.decision_id = c.decision_id)
             ORDER BY c.created_at LIMIT ?2"
        ))?
        .query_map(params![profile, LISTING_MAX], message_row)?
        .collect::<Result<_, _>>()?;
    let mut open = Vec::with_capacity(rows.len());
    for message in rows {
        if tracked.contains(&message.channel_message_id) {
            continue;
        }
        let telegram_message_id = sent_message_id(conn, &message.channel_message_id)?;
        let request = decisions::request_of(conn, &message.decision_id)?;
        open.push(Present {
            attempt_id: String::new(),
            operation: ChannelOperation::Send,
            channel_message_id: message.channel_message_id,
            chat_id: message.chat_id,
            nonce: message.nonce,
            telegram_message_id,
            channel_revision: message.channel_revision,
            request,
            resolution: None,
            for_choice_id: None,
        });
    }
    Ok(open)
}

/// One channel message in `channel status`: no decision content, no chat or user IDs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelMessageStatus {
    pub channel_message_id: String,
    pub run_id: String,
    pub profile: String,
    pub state: String,
    /// The newest effect's type and status, e.g. `channel.telegram.send` `ambiguous`.
    pub last_effect: Option<(String, String)>,
}

/// Messages needing attention first (ambiguous, then pending and presented), at most
/// [`LISTING_MAX`].
pub fn status(conn: &Connection) -> StoreResult<Vec<ChannelMessageStatus>> {
    let rows = conn
        .prepare_cached(
            "SELECT c.channel_message_id, c.run_id, c.profile, c.state,
                    (SELECT e.effect_type FROM effects e WHERE e.channel_message_id = c.channel_message_id
                     ORDER BY e.updated_at DESC LIMIT 1),
                    (SELECT e.status FROM effects e WHERE e.channel_message_id = c.channel_message_id
                     ORDER BY e.updated_at DESC LIMIT 1)
             FROM channel_messages c
             ORDER BY EXISTS (SELECT 1 FROM effects e WHERE e.channel_message_id = c.channel_message_id
                              AND e.status = 'ambiguous') DESC,
                      c.state IN ('closed', 'failed'), c.created_at DESC
             LIMIT ?1",
        )?
        .query_map([LISTING_MAX], |row| {
            let effect: Option<String> = row.get(4)?;
            let status: Option<String> = row.get(5)?;
            Ok(ChannelMessageStatus {
                channel_message_id: row.get(0)?,
                run_id: row.get(1)?,
                profile: row.get(2)?,
                state: row.get(3)?,
                last_effect: effect.zip(status),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The value a closed present shows: who settled it and with what.
#[must_use]
pub fn closed_text(request: &DecisionRequest, resolution: &(String, Option<String>)) -> String {
    let label = resolution
        .1
        .as_deref()
        .and_then(|choice| request.choices.iter().find(|c| c.id == choice))
        .map(|choice| choice.label.as_str());
    match (resolution.0.as_str(), label) {
        ("human", Some(label)) => format!("Decided: {label}"),
        ("timeout_policy", Some(label)) => format!("No answer in time: {label} applied"),
        ("explicit_cancel", _) => "The run was cancelled; this decision is closed".to_string(),
        ("expired_no_default", _) => "No answer in time; this decision expired".to_string(),
        _ => "This decision is closed".to_string(),
    }
}

/// Audiences of pending decisions that are not in `known` (a typo in a workflow, or a
/// `channels.json` that lacks them): such a decision is shown in Pi and the CLI only. At most
/// [`LISTING_MAX`] names.
pub fn unrouted_audiences(conn: &Connection, known: &[String]) -> StoreResult<Vec<String>> {
    let pending: Vec<String> = conn
        .prepare_cached(
            "SELECT DISTINCT d.audience FROM human_decisions d
             JOIN interactive_requests i ON i.request_id = d.decision_id
             WHERE i.status = 'pending' ORDER BY d.audience LIMIT ?1",
        )?
        .query_map([LISTING_MAX], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(pending
        .into_iter()
        .filter(|audience| !known.contains(audience))
        .collect())
}
