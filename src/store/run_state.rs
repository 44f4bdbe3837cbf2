//! The narrow execution read (`pi-workflows.run-state.v1`): exactly what a runner needs to
//! resume a run — input, attempts with their outputs, effects, the interaction and the
//! continuation — and nothing else (no session entries, views, settings or history).
//!
//! Architecture Invariant: this is the only read a runner can request; a runner can never
//! load a complete run record.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use super::blobs::read_json;
use super::error::StoreResult;
use crate::protocol::json_object;

pub const RUN_STATE_SCHEMA: &str = "pi-workflows.run-state.v1";
/// Attempts one run state lists at most (a run's `maxSteps` bounds them far below this).
pub const RUN_STATE_ATTEMPTS_MAX: usize = 100_000;
/// Stored values one run state may carry in total (outputs, errors, input, answers): the
/// largest value a runner can read by reference. Checked before each value is loaded, so
/// an oversized state fails early with a clear error instead of filling memory.
pub const RUN_STATE_BYTES_MAX: usize = super::blobs::BLOB_BYTES_MAX;

/// What is left of [`RUN_STATE_BYTES_MAX`] while a run state is built.
struct Budget {
    max: usize,
    left: std::cell::Cell<usize>,
}

impl Budget {
    fn new(max: usize) -> Self {
        Self {
            max,
            left: std::cell::Cell::new(max),
        }
    }

    fn take(&self, bytes: usize) -> StoreResult<()> {
        let left = self.left.get();
        if bytes > left {
            return Err(super::StoreError::TooLarge {
                what: "run state (stored outputs, errors and answers)",
                bytes: self.max - left + bytes,
                max: self.max,
            });
        }
        self.left.set(left - bytes);
        Ok(())
    }
}

/// Which first command a run's runner gets, from how the run began and what it committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstCommand {
    Start,
    Resume,
    Continue { parent_attempt_id: String },
    Restart,
}

/// The first command of `run_id`'s runner, and the run's revision it was read at.
pub fn first_command(conn: &Connection, run_id: &str) -> StoreResult<(FirstCommand, i64)> {
    let (origin, parent_attempt, revision): (String, Option<String>, i64) = conn
        .prepare_cached("SELECT origin, parent_attempt_id, revision FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    let progressed: bool = conn
        .prepare_cached("SELECT count(*) > 0 FROM node_attempts WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get(0))?;
    let command = match (origin.as_str(), parent_attempt) {
        _ if progressed => FirstCommand::Resume,
        ("continuation", Some(parent_attempt_id)) => FirstCommand::Continue { parent_attempt_id },
        ("restart", _) => FirstCommand::Restart,
        _ => FirstCommand::Start,
    };
    Ok((command, revision))
}

/// Build the run state of `run_id`.
pub fn read_run_state(conn: &Connection, run_id: &str) -> StoreResult<Value> {
    read_run_state_within(conn, run_id, RUN_STATE_BYTES_MAX)
}

/// `read_run_state` with at most `bytes_max` of stored values (refused above it).
pub fn read_run_state_within(conn: &Connection, run_id: &str, bytes_max: usize) -> StoreResult<Value> {
    let budget = Budget::new(bytes_max);
    let (name, revision, input_hash, mode, parent_run, parent_attempt): (
        String,
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
    ) = conn
        .prepare_cached(
            "SELECT r.workflow_name, r.revision, r.input_hash, b.execution_mode, r.parent_run_id, r.parent_attempt_id
             FROM runs r JOIN run_bindings b ON b.run_id = r.run_id WHERE r.run_id = ?1",
        )?
        .query_row([run_id], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })?;
    let continuation = match (parent_run, parent_attempt) {
        (Some(parent_run_id), Some(parent_attempt_id)) => {
            let answer = accepted_answer(conn, &parent_attempt_id, &budget)?;
            // The parent's history up to its checkpoint: the continuation replays it to
            // know where the checkpoint sits and what each node produced.
            let attempts = attempts(conn, &parent_run_id, &budget)?;
            Value::Object(json_object([
                ("parentRunId", json!(parent_run_id)),
                ("parentAttemptId", json!(parent_attempt_id)),
                ("answer", answer),
                ("attempts", Value::Array(attempts)),
            ]))
        }
        _ => Value::Null,
    };
    // The parts move in: `json!` would deep-copy each (a state can hold megabytes).
    let input = json_by_hash(conn, Some(input_hash.trim_start_matches("sha256:")), &budget)?;
    let (attempts, effects) = (attempts(conn, run_id, &budget)?, effects(conn, run_id, &budget)?);
    let interaction = interaction(conn, run_id, &budget)?;
    let settings = settings_version(conn, run_id, None, &budget)?;
    let settings_versions = attempt_settings_versions(conn, run_id, &budget)?;
    Ok(Value::Object(json_object([
        ("schema", json!(RUN_STATE_SCHEMA)),
        ("runId", json!(run_id)),
        ("workflowName", json!(name)),
        ("revision", json!(revision)),
        ("executionMode", json!(mode)),
        ("input", input),
        ("attempts", Value::Array(attempts)),
        ("effects", Value::Array(effects)),
        ("interaction", interaction),
        ("continuation", continuation),
        ("settings", settings),
        ("settingsVersions", Value::Array(settings_versions)),
    ])))
}

/// `{changeNumber, value}` of the current settings version (or of `change_number`); null
/// when the run declares no settings.
fn settings_version(
    conn: &Connection,
    run_id: &str,
    change_number: Option<i64>,
    budget: &Budget,
) -> StoreResult<Value> {
    let row: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT c.change_number, c.settings_hash FROM run_settings s
             JOIN run_setting_changes c ON c.run_id = s.run_id AND c.change_number = coalesce(?2, s.change_number)
             WHERE s.run_id = ?1",
        )?
        .query_row(params![run_id, change_number], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((number, hash)) = row else {
        return Ok(Value::Null);
    };
    Ok(json!({"changeNumber": number, "value": json_by_hash(conn, Some(&hash), budget)?}))
}

/// The frozen settings copies that unfinished and interrupted attempts saw, where they are
/// not the current version: such an attempt continues in place (or reruns as the same node
/// visit) and must see the same copy, so an effect request computed from it matches.
fn attempt_settings_versions(conn: &Connection, run_id: &str, budget: &Budget) -> StoreResult<Vec<Value>> {
    let numbers: Vec<i64> = conn
        .prepare_cached(
            "SELECT DISTINCT a.settings_change_number FROM node_attempts a JOIN run_settings s ON s.run_id = a.run_id
             WHERE a.run_id = ?1 AND a.status IN ('running', 'waiting', 'interrupted')
               AND a.settings_change_number != s.change_number
             ORDER BY 1",
        )?
        .query_map([run_id], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    numbers
        .into_iter()
        .map(|number| settings_version(conn, run_id, Some(number), budget))
        .collect()
}

fn json_by_hash(conn: &Connection, hash: Option<&str>, budget: &Budget) -> StoreResult<Value> {
    let Some(hash) = hash.filter(|hash| crate::digest::is_sha256_hex(hash)) else {
        return Ok(Value::Null);
    };
    match super::blobs::blob_ref(conn, hash, super::blobs::JSON_MEDIA_TYPE) {
        Ok(reference) => budget.take(reference.bytes as usize)?,
        Err(super::StoreError::Blob(super::blobs::BlobError::NotFound { .. })) => return Ok(Value::Null),
        Err(err) => return Err(err),
    }
    Ok(read_json(conn, hash)?.unwrap_or(Value::Null))
}

fn attempts(conn: &Connection, run_id: &str, budget: &Budget) -> StoreResult<Vec<Value>> {
    type Row = (String, String, String, i64, String, String, Kept, Kept, Option<i64>);
    let mut statement = conn.prepare_cached(
        "SELECT attempt_id, node_id, node_path, visit, node_type, status, output_hash, output_inline,
                error_hash, error_inline, settings_change_number
         FROM node_attempts WHERE run_id = ?1 ORDER BY started_at, rowid LIMIT ?2",
    )?;
    let rows: Vec<Row> = statement
        .query_map(params![run_id, RUN_STATE_ATTEMPTS_MAX as i64], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                (row.get(6)?, row.get(7)?),
                (row.get(8)?, row.get(9)?),
                row.get(10)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(
            |(attempt_id, node_id, node_path, visit, node_type, status, output, error, settings)| {
                Ok(json!({
                    "attemptId": attempt_id, "nodeId": node_id, "nodePath": node_path, "visit": visit,
                    "nodeType": node_type, "status": status, "settingsChangeNumber": settings,
                    "output": kept_json(conn, output, budget)?,
                    "error": kept_json(conn, error, budget)?,
                }))
            },
        )
        .collect()
}

/// An attempt's value: its digest, and the value itself when kept in the row.
type Kept = (Option<String>, Option<Vec<u8>>);

/// An attempt's value kept in its row (checked against its digest), else its blob.
fn kept_json(conn: &Connection, (hash, inline): Kept, budget: &Budget) -> StoreResult<Value> {
    match (hash, inline) {
        (Some(hash), Some(inline)) => {
            budget.take(inline.len())?;
            super::blobs::inline_json(&hash, &inline)
        }
        (hash, _) => json_by_hash(conn, hash.as_deref(), budget),
    }
}

fn effects(conn: &Connection, run_id: &str, budget: &Budget) -> StoreResult<Vec<Value>> {
    let mut statement = conn.prepare_cached(
        "SELECT effect_id, effect_type, idempotency_key, status, result_hash FROM effects
         WHERE run_id = ?1 ORDER BY created_at, effect_id",
    )?;
    let rows: Vec<(String, String, String, String, Option<String>)> = statement
        .query_map([run_id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(effect_id, effect_type, key, status, result)| {
            Ok(json!({
                "effectId": effect_id, "effectType": effect_type, "idempotencyKey": key, "status": status,
                "result": json_by_hash(conn, result.as_deref(), budget)?,
            }))
        })
        .collect()
}

/// The run's newest interactive request with its accepted answer or validating candidate.
fn interaction(conn: &Connection, run_id: &str, budget: &Budget) -> StoreResult<Value> {
    let row: Option<(String, String, String, String)> = conn
        .prepare_cached(
            "SELECT request_id, attempt_id, kind, status FROM interactive_requests
             WHERE run_id = ?1 ORDER BY created_at DESC, request_id DESC LIMIT 1",
        )?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .optional()?;
    let Some((request_id, attempt_id, kind, status)) = row else {
        return Ok(Value::Null);
    };
    let validating: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT submission_id, payload_hash FROM interactive_submissions
             WHERE request_id = ?1 AND outcome = 'validating' ORDER BY submitted_at LIMIT 1",
        )?
        .query_row([&request_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let validating = match validating {
        Some((submission_id, payload)) => json!({
            "submissionId": submission_id,
            "payload": json_by_hash(conn, Some(&payload), budget)?,
        }),
        None => Value::Null,
    };
    Ok(json!({
        "requestId": request_id, "attemptId": attempt_id, "kind": kind, "status": status,
        "answer": accepted_answer(conn, &attempt_id, budget)?,
        "validating": validating,
    }))
}

/// The accepted submission payload of the request of `attempt_id`, or null.
fn accepted_answer(conn: &Connection, attempt_id: &str, budget: &Budget) -> StoreResult<Value> {
    let payload: Option<String> = conn
        .prepare_cached(
            "SELECT s.payload_hash FROM interactive_requests r
             JOIN interactive_submissions s ON s.submission_id = r.accepted_submission_id
             WHERE r.attempt_id = ?1",
        )?
        .query_row([attempt_id], |row| row.get(0))
        .optional()?;
    json_by_hash(conn, payload.as_deref(), budget)
}
