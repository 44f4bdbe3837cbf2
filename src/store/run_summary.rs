//! Run summaries for `run.status` and `run.list`: lifecycle facts, the current node (the
//! one unfinished attempt), progress counts and timing. Status carries no payloads, prompts,
//! session IDs or project paths; a terminal run's output is a separate explicit read.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};
use super::run_view;
use super::run_view::newest_pending_request_where;

/// A page of `run.list` holds at most this many runs (a run-list page's bound).
pub const RUN_LIST_LIMIT_MAX: usize = run_view::RUNS_PAGE_MAX;

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
    /// The continuation run that settled this one (detail `continued`): where it goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    pub request_id: String,
    pub kind: String,
}

pub fn run_summary(conn: &Connection, run_id: &str) -> StoreResult<RunSummary> {
    summary_of(conn, run_view::run_facts(conn, run_id)?)
}

/// The newest runs first, at most `limit` (bounded by `RUN_LIST_LIMIT_MAX`).
pub fn list_runs(conn: &Connection, limit: usize) -> StoreResult<Vec<RunSummary>> {
    run_view::newest_runs(conn, None, limit.clamp(1, RUN_LIST_LIMIT_MAX))?
        .into_iter()
        .map(|run| summary_of(conn, run))
        .collect()
}

/// A run row with its progress: completed steps, current node, pending request.
fn summary_of(conn: &Connection, run: run_view::RunFacts) -> StoreResult<RunSummary> {
    let completed_steps = run.completed_steps;
    let current_node = run_view::unfinished_attempt(conn, &run.run_id)?.map(|attempt| CurrentNode {
        node_id: attempt.node_id,
        node_path: attempt.node_path,
        node_type: attempt.node_type,
        status: attempt.status,
        started_at: attempt.started_at,
    });
    let pending_request = run_view::pending_request_brief(conn, &run.run_id)?
        .map(|(request_id, kind)| PendingRequest { request_id, kind });
    Ok(RunSummary {
        run_id: run.run_id,
        workflow_name: run.workflow_name,
        status: run.status,
        queue_status: run.queue_status,
        paused: run.paused,
        detail: run.detail,
        revision: run.revision,
        execution_mode: run.execution_mode,
        created_at: run.created_at,
        updated_at: run.updated_at,
        finished_at: run.finished_at,
        completed_steps,
        current_node,
        pending_request,
        continued_as: run.continued_as,
    })
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
        .prepare_cached(concat!(
            "SELECT i.contract_hash FROM interactive_requests i WHERE ",
            newest_pending_request_where!()
        ))?
        .query_row([run_id], |row| row.get(0))
        .optional()?;
    match hash {
        Some(hash) if crate::digest::is_sha256_hex(&hash) => super::blobs::read_json(conn, &hash),
        _ => Ok(None),
    }
}
