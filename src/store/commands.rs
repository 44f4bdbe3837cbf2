//! Command receipts (`host_commands`): every state-changing client command commits its
//! receipt in the same transaction as its change, before anyone answers the client.
//!
//! Identity rules: the request ID names one transport attempt and is not part of the
//! fingerprint (SHA-256 of the canonical request without `requestId`). The same client ID
//! and idempotency key with the same fingerprint adopt the stored receipt; another
//! fingerprint is a conflict; a request ID can never name two payloads.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use super::blobs::{BlobRef, blob_ref, put_blob, read_blob_verified};
use super::error::{StoreError, StoreResult};
use super::writer::WriteTx;
use crate::digest::is_sha256_hex;

const JSON_MEDIA_TYPE: &str = "application/json";
/// A stored receipt is small; large results travel as content references.
pub const RECEIPT_BYTES_MAX: usize = 64 * 1024;

/// One durable command as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    pub request_id: String,
    pub client_id: String,
    pub operation: String,
    pub idempotency_key: String,
    pub run_id: Option<String>,
    /// Lowercase hex SHA-256 of the canonical request without `requestId`.
    pub fingerprint: String,
}

/// What an accepted command's change produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub revision: Option<i64>,
    pub receipt: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandOutcome {
    Accepted,
    /// A retry of an accepted command: the stored receipt, unchanged.
    Adopted,
    /// The command was refused; a retry gets the same stored error.
    Rejected,
    /// The idempotency key or request ID already names another payload. Nothing changed.
    Conflict,
}

/// A bounded, safe command error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CommandError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CommandReceipt {
    pub outcome: CommandOutcome,
    pub revision: Option<i64>,
    pub receipt: Option<Value>,
    pub error: Option<CommandError>,
}

/// Run `apply` once per durable command identity and store its receipt.
///
/// A domain refusal from `apply` (claim loss, wrong revision, invalid transition, unknown
/// run) rolls back its changes and is stored as a rejected receipt; infrastructure errors
/// propagate and store nothing.
pub fn run_command(
    tx: &WriteTx<'_>,
    request: &CommandRequest,
    apply: impl FnOnce(&WriteTx<'_>) -> StoreResult<Accepted>,
) -> StoreResult<CommandReceipt> {
    assert!(
        is_sha256_hex(&request.fingerprint),
        "the fingerprint is a SHA-256 hex digest"
    );
    if let Some(receipt) = find_existing(tx, request)? {
        return Ok(receipt);
    }
    // The change and its receipt commit together or not at all, even for a caller that
    // keeps using the transaction after an error.
    match tx.nested(|tx| apply(tx).and_then(|accepted| store_accepted(tx, request, accepted))) {
        Ok(receipt) => Ok(receipt),
        Err(err) => {
            let Some(error) = rejection_of(&err) else {
                return Err(err);
            };
            let error_ref = put_json(tx, &error)?;
            insert_command(tx, request, None, None, Some(&error_ref))?;
            Ok(CommandReceipt {
                outcome: CommandOutcome::Rejected,
                revision: None,
                receipt: None,
                error: Some(error),
            })
        }
    }
}

fn store_accepted(tx: &WriteTx<'_>, request: &CommandRequest, accepted: Accepted) -> StoreResult<CommandReceipt> {
    let receipt_ref = put_json(tx, &accepted.receipt)?;
    insert_command(tx, request, accepted.revision, Some(&receipt_ref), None)?;
    Ok(CommandReceipt {
        outcome: CommandOutcome::Accepted,
        revision: accepted.revision,
        receipt: Some(accepted.receipt),
        error: None,
    })
}

/// The stored answer of a command already run under this identity (or a conflict), without
/// running anything: for commands whose effect happens outside the database (a backup file)
/// and must not be repeated by a retry.
pub fn existing_receipt(tx: &WriteTx<'_>, request: &CommandRequest) -> StoreResult<Option<CommandReceipt>> {
    find_existing(tx, request)
}

/// The stored answer for a known request ID or idempotency key, or a conflict.
fn find_existing(tx: &WriteTx<'_>, request: &CommandRequest) -> StoreResult<Option<CommandReceipt>> {
    let conn = tx.conn();
    let by_request: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT command_request_id, request_fingerprint FROM host_command_requests WHERE request_id = ?1",
        )?
        .query_row([&request.request_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    if let Some((command_request_id, fingerprint)) = by_request {
        if fingerprint != request.fingerprint {
            return Ok(Some(conflict("this request ID already names another request")));
        }
        return load_stored(tx, &command_request_id).map(Some);
    }
    let by_key: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT request_id, request_fingerprint FROM host_commands WHERE client_id = ?1 AND idempotency_key = ?2",
        )?
        .query_row(params![request.client_id, request.idempotency_key], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    let Some((command_request_id, fingerprint)) = by_key else {
        return Ok(None);
    };
    if fingerprint != request.fingerprint {
        return Ok(Some(conflict(
            "this idempotency key already names another request; use a new key",
        )));
    }
    record_request_id(tx, &request.request_id, &command_request_id, &request.fingerprint)?;
    load_stored(tx, &command_request_id).map(Some)
}

fn conflict(message: &str) -> CommandReceipt {
    CommandReceipt {
        outcome: CommandOutcome::Conflict,
        revision: None,
        receipt: None,
        error: Some(CommandError {
            code: "conflict".to_string(),
            message: message.to_string(),
        }),
    }
}

fn load_stored(tx: &WriteTx<'_>, command_request_id: &str) -> StoreResult<CommandReceipt> {
    let conn = tx.conn();
    let (outcome, revision, receipt_hash, error_hash): (String, Option<i64>, Option<String>, Option<String>) = conn
        .prepare_cached(
            "SELECT outcome, accepted_revision, receipt_hash, error_hash FROM host_commands WHERE request_id = ?1",
        )?
        .query_row([command_request_id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?;
    let receipt = receipt_hash.map(|hash| read_json(conn, &hash)).transpose()?;
    let error = error_hash
        .map(|hash| read_json(conn, &hash))
        .transpose()?
        .map(serde_json::from_value::<CommandError>)
        .transpose()
        .map_err(|err| StoreError::CommitFailed(format!("stored command error is unreadable: {err}")))?;
    let outcome = if outcome == "accepted" {
        CommandOutcome::Adopted
    } else {
        CommandOutcome::Rejected
    };
    Ok(CommandReceipt {
        outcome,
        revision,
        receipt,
        error,
    })
}

fn insert_command(
    tx: &WriteTx<'_>,
    request: &CommandRequest,
    revision: Option<i64>,
    receipt: Option<&BlobRef>,
    error: Option<&BlobRef>,
) -> StoreResult<()> {
    let outcome = if receipt.is_some() { "accepted" } else { "rejected" };
    tx.conn()
        .prepare_cached(
            "INSERT INTO host_commands (request_id, client_id, operation, idempotency_key, request_fingerprint, run_id,
                                        accepted_revision, outcome, receipt_hash, error_hash, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
            request.request_id,
            request.client_id,
            request.operation,
            request.idempotency_key,
            request.fingerprint,
            request.run_id,
            revision,
            outcome,
            receipt.map(|r| &r.sha256),
            error.map(|r| &r.sha256),
            tx.now_ms()
        ])?;
    record_request_id(tx, &request.request_id, &request.request_id, &request.fingerprint)
}

fn record_request_id(
    tx: &WriteTx<'_>,
    request_id: &str,
    command_request_id: &str,
    fingerprint: &str,
) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO host_command_requests (request_id, command_request_id, request_fingerprint, received_at)
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![request_id, command_request_id, fingerprint, tx.now_ms()])?;
    Ok(())
}

fn put_json(tx: &WriteTx<'_>, value: &impl Serialize) -> StoreResult<BlobRef> {
    let bytes = crate::protocol::to_canonical_vec(value)
        .map_err(|err| StoreError::CommitFailed(format!("receipt encoding: {err}")))?;
    if bytes.len() > RECEIPT_BYTES_MAX {
        return Err(StoreError::TooLarge {
            what: "command receipt",
            bytes: bytes.len(),
            max: RECEIPT_BYTES_MAX,
        });
    }
    put_blob(tx, &bytes, JSON_MEDIA_TYPE)
}

fn read_json(conn: &rusqlite::Connection, sha256: &str) -> StoreResult<Value> {
    let stored = blob_ref(conn, sha256, JSON_MEDIA_TYPE)?;
    let bytes = read_blob_verified(conn, &stored)?;
    serde_json::from_slice(&bytes)
        .map_err(|err| StoreError::CommitFailed(format!("stored receipt is unreadable: {err}")))
}

/// Error messages stored in receipts are bounded.
const ERROR_MESSAGE_BYTES_MAX: usize = 1_024;

/// The stored error of a domain refusal; `None` for infrastructure failures and for a claim
/// held by a live owner, which is transient (the caller may wait and retry under the same key).
fn rejection_of(err: &StoreError) -> Option<CommandError> {
    let code = err.refusal_code()?;
    let mut message = err.to_string();
    if message.len() > ERROR_MESSAGE_BYTES_MAX {
        let mut cut = ERROR_MESSAGE_BYTES_MAX;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    Some(CommandError {
        code: code.to_string(),
        message,
    })
}
