//! Runner epochs (`run_workers`) and their message receipts (`runner_messages`).
//!
//! Architecture Invariant: a runner epoch is recorded before its process is spawned, and at
//! most one epoch per run is active (a partial unique index enforces it).

use rusqlite::{OptionalExtension, params};

use super::error::StoreResult;
use super::presentation;
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// How a runner epoch ended (one terminal outcome per epoch).
    pub enum WorkerOutcome {
        Exited = "exited",
        Cancelled = "cancelled",
        TimedOut = "timedOut",
        Crashed = "crashed",
        ClaimLost = "claimLost",
        Orphaned = "orphaned",
    }
}

/// A launch about to be spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorker {
    pub runner_epoch: String,
    pub run_id: String,
    pub generation: i64,
    pub server_epoch: i64,
    pub launch_envelope_hash: String,
}

pub fn record_launch(tx: &WriteTx<'_>, worker: &NewWorker) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO run_workers (runner_epoch, run_id, generation, server_epoch, launch_envelope_hash, status, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'starting', ?6)",
        )?
        .execute(params![
            worker.runner_epoch,
            worker.run_id,
            worker.generation,
            worker.server_epoch,
            worker.launch_envelope_hash,
            tx.now_ms()
        ])?;
    presentation::changed(tx, &worker.run_id, 1)
}

/// The spawned process: its pid and start identity (checked before any later signal).
pub fn record_process(tx: &WriteTx<'_>, runner_epoch: &str, pid: i32, start_identity: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE run_workers SET pid = ?1, process_start_identity = ?2 WHERE runner_epoch = ?3")?
        .execute(params![pid, start_identity, runner_epoch])?;
    Ok(())
}

/// The runner of `runner_epoch` answered ready at `ready_at_ms`; true when this changed what
/// is recorded (a repeat, or an epoch already ended, records nothing).
pub fn record_ready(tx: &WriteTx<'_>, runner_epoch: &str, ready_at_ms: i64) -> StoreResult<bool> {
    let changed = tx
        .conn()
        .prepare_cached(
            "UPDATE run_workers SET status = 'ready', ready_at = ?1 WHERE runner_epoch = ?2 AND status = 'starting'",
        )?
        .execute(params![ready_at_ms, runner_epoch])?;
    epoch_changed(tx, runner_epoch, changed)
}

/// Whether the live runner of `runner_epoch` answers its liveness pings; true when this
/// changed what is recorded (an ended epoch records nothing).
pub fn record_responsiveness(tx: &WriteTx<'_>, runner_epoch: &str, responsive: bool) -> StoreResult<bool> {
    let changed = tx
        .conn()
        .prepare_cached(
            "UPDATE run_workers
             SET unresponsive_since = CASE WHEN ?3 THEN NULL ELSE ?1 END,
                 liveness_changes = liveness_changes + 1
             WHERE runner_epoch = ?2 AND status IN ('starting', 'ready')
               AND (unresponsive_since IS NULL) <> ?3",
        )?
        .execute(params![tx.now_ms(), runner_epoch, responsive])?;
    epoch_changed(tx, runner_epoch, changed)
}

/// Record the epoch's one terminal outcome (an ended runner is no longer "unresponsive");
/// a second call changes nothing.
pub fn record_outcome(
    tx: &WriteTx<'_>,
    runner_epoch: &str,
    outcome: WorkerOutcome,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> StoreResult<bool> {
    let changed = tx
        .conn()
        .prepare_cached(
            "UPDATE run_workers SET status = ?1, finished_at = ?2, exit_code = ?3, signal = ?4,
                                    unresponsive_since = NULL
             WHERE runner_epoch = ?5 AND status IN ('starting', 'ready')",
        )?
        .execute(params![outcome.as_str(), tx.now_ms(), exit_code, signal, runner_epoch])?;
    epoch_changed(tx, runner_epoch, changed)
}

/// Whether the one-row write by runner epoch changed its row; a change is one to its run's
/// presentation (`store::presentation`).
fn epoch_changed(tx: &WriteTx<'_>, runner_epoch: &str, changed: usize) -> StoreResult<bool> {
    assert!(changed <= 1, "a runner epoch is one row");
    if changed == 1 {
        presentation::changed_by_epoch(tx, runner_epoch)?;
    }
    Ok(changed == 1)
}

/// How many of the run's newest ended runner epochs in a row stalled (`timedOut` after
/// `ready`: the server stopped them for not answering its pings), counting at most `limit`.
pub fn consecutive_stalls(conn: &rusqlite::Connection, run_id: &str, limit: usize) -> StoreResult<usize> {
    let stalled = conn
        .prepare_cached(
            "SELECT status = 'timedOut' AND ready_at IS NOT NULL FROM run_workers
             WHERE run_id = ?1 AND finished_at IS NOT NULL ORDER BY started_at DESC, rowid DESC LIMIT ?2",
        )?
        .query_map(params![run_id, limit as i64], |row| row.get::<_, bool>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(stalled.iter().take_while(|stalled| **stalled).count())
}

/// The stored answer to a runner message already accepted or rejected.
/// A stored runner message answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageReceipt {
    pub outcome: String,
    pub revision: Option<i64>,
    pub result_json: Option<String>,
    /// SHA-256 (hex) of the canonical message the receipt answers.
    pub message_hash: String,
}

pub fn message_receipt(
    conn: &rusqlite::Connection,
    runner_epoch: &str,
    message_id: &str,
) -> StoreResult<Option<MessageReceipt>> {
    let receipt = conn
        .prepare_cached(
            "SELECT outcome, revision, result_json, message_hash FROM runner_messages
             WHERE runner_epoch = ?1 AND message_id = ?2",
        )?
        .query_row([runner_epoch, message_id], |row| {
            Ok(MessageReceipt {
                outcome: row.get(0)?,
                revision: row.get(1)?,
                result_json: row.get(2)?,
                message_hash: row.get(3)?,
            })
        })
        .optional()?;
    Ok(receipt)
}

pub fn store_message_receipt(
    tx: &WriteTx<'_>,
    runner_epoch: &str,
    message_id: &str,
    kind: &str,
    receipt: &MessageReceipt,
) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO runner_messages (runner_epoch, message_id, kind, message_hash, outcome, revision, result_json, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            runner_epoch,
            message_id,
            kind,
            receipt.message_hash,
            receipt.outcome,
            receipt.revision,
            receipt.result_json,
            tx.now_ms()
        ])?;
    Ok(())
}

/// A queued run ready for admission, with what its launch envelope needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admissible {
    pub run_id: String,
    pub project_path: String,
    pub definition_digest: String,
    pub input_hash: String,
    /// Root and mounted source hashes (canonical JSON), for the runner to verify.
    pub workflow_source_json: String,
}

/// How many runs are queued, due or not (paused ones included: a resume is a commit).
pub fn queued_runs(conn: &rusqlite::Connection) -> StoreResult<u64> {
    let queued: i64 = conn
        .prepare_cached("SELECT count(*) FROM run_queue WHERE status = 'queued'")?
        .query_row([], |row| row.get(0))?;
    Ok(queued as u64)
}

/// Up to `limit` queued, unpaused runs whose time has come and whose previous runner has
/// ended, oldest first.
pub fn admissible_runs(conn: &rusqlite::Connection, now_ms: i64, limit: usize) -> StoreResult<Vec<Admissible>> {
    let runs = conn
        .prepare_cached(
            "SELECT r.run_id, r.project_path, r.definition_digest, r.input_hash, r.workflow_source_json
             FROM run_queue q JOIN runs r ON r.run_id = q.run_id
             WHERE q.status = 'queued' AND r.paused = 0 AND q.available_at <= ?1
               -- A run whose previous runner is still exiting waits for it: one active
               -- runner epoch per run (its end wakes the scheduler).
               AND NOT EXISTS (SELECT 1 FROM run_workers w WHERE w.run_id = r.run_id
                               AND w.status IN ('starting', 'ready'))
             ORDER BY q.available_at, r.created_at LIMIT ?2",
        )?
        .query_map(params![now_ms, limit as i64], |row| {
            Ok(Admissible {
                run_id: row.get(0)?,
                project_path: row.get(1)?,
                definition_digest: row.get(2)?,
                input_hash: row.get(3)?,
                workflow_source_json: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(runs)
}
