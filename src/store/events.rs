//! Run revisions, immutable events and viewer deltas: steps 6–7 of every run change.
//!
//! Architecture Invariant: a run's revision changes only through `advance` /
//! `advance_each`, which append exactly one event and one viewer delta at each new revision. Events are never updated
//! (a trigger enforces it).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};
use super::writer::WriteTx;

/// A viewer delta is a small display record; content goes to references, not here.
pub const VIEWER_DELTA_BYTES_MAX: usize = 4 * 1024;

/// Who caused a run change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The server acting for the run's runner (claim owner `host`).
    Host,
    /// A control claim, e.g. cancelling an expired running row.
    Control,
    /// A client command (pause, resume, cancel of unclaimed work).
    Client,
    /// The server itself (queueing, recovery).
    System,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Control => "control",
            Self::Client => "client",
            Self::System => "system",
        }
    }
}

/// The immutable event a change appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    pub event_type: &'static str,
    pub actor: Actor,
    /// Digest of the event's payload blob, when it has one.
    pub payload_hash: Option<String>,
}

impl RunEvent {
    pub fn new(event_type: &'static str, actor: Actor) -> Self {
        Self {
            event_type,
            actor,
            payload_hash: None,
        }
    }
}

/// The run's current revision, or `RunNotFound`.
pub(crate) fn current_revision(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<i64> {
    tx.conn()
        .prepare_cached("SELECT revision FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get(0))
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound {
            run_id: run_id.to_string(),
        })
}

pub(crate) fn check_expected_revision(run_id: &str, expected: Option<i64>, actual: i64) -> StoreResult<()> {
    match expected {
        Some(expected) if expected != actual => Err(StoreError::RevisionMismatch {
            run_id: run_id.to_string(),
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunDelta<'a> {
    event: &'a str,
    status: &'a str,
    queue: &'a str,
    paused: bool,
    detail: Option<&'a str>,
}

/// Bump the revision from `current` and append the event and viewer delta at the new one.
pub(crate) fn advance(
    tx: &WriteTx<'_>,
    run_id: &str,
    current: i64,
    event: &RunEvent,
    lease_generation: Option<i64>,
) -> StoreResult<i64> {
    advance_each(tx, run_id, current, std::slice::from_ref(event), lease_generation)
}

/// Bump the revision from `current` by one per event and append each event and its viewer
/// delta at its own revision, in order: one `UPDATE` and one read of the run's status for
/// all of them (a runner's batch of pure results changes nothing else between its events).
pub(crate) fn advance_each(
    tx: &WriteTx<'_>,
    run_id: &str,
    current: i64,
    events: &[RunEvent],
    lease_generation: Option<i64>,
) -> StoreResult<i64> {
    assert!(!events.is_empty(), "a revision moves only with an event");
    let last = current + events.len() as i64;
    let bumped = tx
        .conn()
        .prepare_cached("UPDATE runs SET revision = ?1, updated_at = ?2 WHERE run_id = ?3 AND revision = ?4")?
        .execute(params![last, tx.now_ms(), run_id, current])?;
    assert_eq!(bumped, 1, "the revision read in this transaction must still be current");
    let status = RunStatusRow::read(tx, run_id)?;
    for (revision, event) in (current + 1..=last).zip(events) {
        append_with(tx, run_id, revision, event, lease_generation, &status)?;
    }
    Ok(last)
}

/// Append the event and viewer delta of `revision` (also used for a run's first revision).
pub(crate) fn append(
    tx: &WriteTx<'_>,
    run_id: &str,
    revision: i64,
    event: &RunEvent,
    lease_generation: Option<i64>,
) -> StoreResult<()> {
    let status = RunStatusRow::read(tx, run_id)?;
    append_with(tx, run_id, revision, event, lease_generation, &status)
}

fn append_with(
    tx: &WriteTx<'_>,
    run_id: &str,
    revision: i64,
    event: &RunEvent,
    lease_generation: Option<i64>,
    status: &RunStatusRow,
) -> StoreResult<()> {
    let conn = tx.conn();
    let now = tx.now_ms();
    conn.prepare_cached(
        "INSERT INTO events (run_id, resource_revision, event_type, actor_type, lease_generation, payload_hash, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![run_id, revision, event.event_type, event.actor.as_str(), lease_generation, event.payload_hash, now])?;
    let delta = status.delta_json(event.event_type)?;
    conn.prepare_cached(
        "INSERT INTO viewer_deltas (run_id, resource_revision, delta_kind, delta_json, created_at)
         VALUES (?1, ?2, 'run', ?3, ?4)",
    )?
    .execute(params![run_id, revision, delta, now])?;
    Ok(())
}

/// What a viewer delta says of the run besides its event: read once per change.
struct RunStatusRow {
    status: String,
    queue: String,
    paused: bool,
    detail: Option<String>,
}

impl RunStatusRow {
    fn read(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<Self> {
        Ok(tx
            .conn()
            .prepare_cached(
                "SELECT r.status, q.status, r.paused, r.status_detail
                 FROM runs r JOIN run_queue q ON q.run_id = r.run_id WHERE r.run_id = ?1",
            )?
            .query_row([run_id], |row| {
                Ok(Self {
                    status: row.get(0)?,
                    queue: row.get(1)?,
                    paused: row.get(2)?,
                    detail: row.get(3)?,
                })
            })?)
    }

    fn delta_json(&self, event_type: &str) -> StoreResult<String> {
        let delta = RunDelta {
            event: event_type,
            status: &self.status,
            queue: &self.queue,
            paused: self.paused,
            detail: self.detail.as_deref(),
        };
        let bytes = crate::protocol::to_canonical_vec(&delta)
            .map_err(|err| StoreError::CommitFailed(format!("viewer delta encoding: {err}")))?;
        // JSON text is UTF-8: the encoder writes Rust strings and ASCII only.
        let json = String::from_utf8(bytes).expect("canonical JSON is UTF-8");
        if json.len() > VIEWER_DELTA_BYTES_MAX {
            return Err(StoreError::TooLarge {
                what: "viewer delta",
                bytes: json.len(),
                max: VIEWER_DELTA_BYTES_MAX,
            });
        }
        Ok(json)
    }
}
