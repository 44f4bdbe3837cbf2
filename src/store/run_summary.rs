//! Run summaries for `run.status` and `run.list`: lifecycle facts, the current node (the
//! one unfinished attempt), progress counts and timing. Status carries no payloads, prompts,
//! session IDs or project paths; a terminal run's output is a separate explicit read.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};

/// A page of `run.list` holds at most this many runs.
pub const RUN_LIST_LIMIT_MAX: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentNode {
    pub node_id: String,
    pub node_path: String,
    pub node_type: String,
    pub status: String,
    pub started_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: String,
    pub workflow_name: String,
    pub status: String,
    pub queue_status: String,
    pub paused: bool,
    /// Why the run parked or failed (a failure-class code), if it did.
    pub detail: Option<String>,
    pub revision: i64,
    pub execution_mode: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub completed_steps: i64,
    pub current_node: Option<CurrentNode>,
    /// The pending request's ID and kind while the run waits for input.
    pub pending_request: Option<PendingRequest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    pub request_id: String,
    pub kind: String,
}

const SUMMARY_SELECT: &str = "SELECT r.run_id, r.workflow_name, r.status, q.status, r.paused, r.status_detail,
        r.revision, b.execution_mode, r.created_at, r.updated_at, r.finished_at
     FROM runs r JOIN run_queue q ON q.run_id = r.run_id JOIN run_bindings b ON b.run_id = r.run_id";

fn summary_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    Ok(RunSummary {
        run_id: row.get(0)?,
        workflow_name: row.get(1)?,
        status: row.get(2)?,
        queue_status: row.get(3)?,
        paused: row.get(4)?,
        detail: row.get(5)?,
        revision: row.get(6)?,
        execution_mode: row.get(7)?,
        created_at: row.get(8)?,
        updated_at: row.get(9)?,
        finished_at: row.get(10)?,
        completed_steps: 0,
        current_node: None,
        pending_request: None,
    })
}

pub fn run_summary(conn: &Connection, run_id: &str) -> StoreResult<RunSummary> {
    let summary = conn
        .prepare_cached(&format!("{SUMMARY_SELECT} WHERE r.run_id = ?1"))?
        .query_row([run_id], summary_row)
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound {
            run_id: run_id.to_string(),
        })?;
    with_progress(conn, summary)
}

/// The newest runs first, at most `limit` (bounded by `RUN_LIST_LIMIT_MAX`).
pub fn list_runs(conn: &Connection, limit: usize) -> StoreResult<Vec<RunSummary>> {
    let limit = limit.clamp(1, RUN_LIST_LIMIT_MAX) as i64;
    let summaries: Vec<RunSummary> = conn
        .prepare_cached(&format!(
            "{SUMMARY_SELECT} ORDER BY r.created_at DESC, r.run_id LIMIT ?1"
        ))?
        .query_map([limit], summary_row)?
        .collect::<Result<_, _>>()?;
    summaries
        .into_iter()
        .map(|summary| with_progress(conn, summary))
        .collect()
}

fn with_progress(conn: &Connection, mut summary: RunSummary) -> StoreResult<RunSummary> {
    summary.completed_steps = conn
        .prepare_cached("SELECT count(*) FROM node_attempts WHERE run_id = ?1 AND status = 'completed'")?
        .query_row([&summary.run_id], |row| row.get(0))?;
    summary.current_node = conn
        .prepare_cached(
            "SELECT node_id, node_path, node_type, status, started_at FROM node_attempts
             WHERE run_id = ?1 AND status IN ('running', 'waiting')",
        )?
        .query_row([&summary.run_id], |row| {
            Ok(CurrentNode {
                node_id: row.get(0)?,
                node_path: row.get(1)?,
                node_type: row.get(2)?,
                status: row.get(3)?,
                started_at: row.get(4)?,
            })
        })
        .optional()?;
    summary.pending_request = conn
        .prepare_cached(
            "SELECT request_id, kind FROM interactive_requests WHERE run_id = ?1 AND status = 'pending'
             ORDER BY created_at DESC LIMIT 1",
        )?
        .query_row([&summary.run_id], |row| {
            Ok(PendingRequest {
                request_id: row.get(0)?,
                kind: row.get(1)?,
            })
        })
        .optional()?;
    Ok(summary)
}

/// The result of a terminal run: its output (completed) or error (failed), as stored.
pub fn run_result(conn: &Connection, run_id: &str) -> StoreResult<Option<serde_json::Value>> {
    let (output, error): (Option<String>, Option<String>) = conn
        .prepare_cached("SELECT output_hash, error_hash FROM runs WHERE run_id = ?1")?
        .query_row(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound {
            run_id: run_id.to_string(),
        })?;
    match output.or(error) {
        Some(hash) if crate::digest::is_sha256_hex(&hash) => super::blobs::read_json(conn, &hash),
        _ => Ok(None),
    }
}

/// The contract (prompt, summary, expected output) of the run's pending request, if any.
pub fn pending_contract(conn: &Connection, run_id: &str) -> StoreResult<Option<serde_json::Value>> {
    let hash: Option<String> = conn
        .prepare_cached(
            "SELECT contract_hash FROM interactive_requests WHERE run_id = ?1 AND status = 'pending'
             ORDER BY created_at DESC LIMIT 1",
        )?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    match hash {
        Some(hash) if crate::digest::is_sha256_hex(&hash) => super::blobs::read_json(conn, &hash),
        _ => Ok(None),
    }
}
