//! The facts a live run view is drawn from, read in one snapshot: the run's lifecycle row,
//! its runner epoch, the unfinished attempt (the one durable source of the current node),
//! the pending request, effect review counts and a bounded window of attempts. Plus the
//! generated content a view advertises (`run_view_content`) and run-list pages.
//!
//! Architecture Invariant: reads only, except `put_view_content`, which stores generated
//! content before any view names it. Nothing here decides how a run is displayed; that is
//! `crate::view`.

use rusqlite::{Connection, OptionalExtension, params};

use super::attempts::{AttemptStatus, unfinished_attempt_from};
use super::blobs::DEFINITION_MEDIA_TYPE;
use super::error::{StoreError, StoreResult};
use super::run_news::RunRow;
use super::writer::WriteTx;
use crate::digest::sha256_hex;

/// One run-history page holds at most this many attempts (its byte budget is the caller's).
pub const ATTEMPTS_PAGE_MAX: usize = 200;
/// One run-list page holds at most this many runs.
pub const RUNS_PAGE_MAX: usize = 200;
/// A chunk of referenced content is at most this many bytes.
pub const CONTENT_CHUNK_BYTES_MAX: usize = 512 * 1024;
/// Referenced content is at most this many bytes (the largest stored value it can copy).
pub const CONTENT_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub run_id: String,
    pub workflow_name: String,
    pub status: String,
    pub queue_status: String,
    pub paused: bool,
    pub detail: Option<String>,
    pub revision: i64,
    pub execution_mode: String,
    pub origin: String,
    pub parent_run_id: Option<String>,
    pub definition_digest: String,
    pub error_hash: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    /// The current settings version (`None`: the workflow declares no settings).
    pub settings_change_number: Option<i64>,
    /// The continuation run that settled this one (its checkpoint was answered).
    pub continued_as: Option<String>,
    /// Its node attempts, all of them and the completed ones (kept in the run's row).
    pub attempt_count: i64,
    pub completed_steps: i64,
}

/// The run's live runner epoch, if one is starting or ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFacts {
    /// `starting`, `ready`, or `unresponsive` while it does not answer liveness pings.
    pub status: String,
    pub started_at: i64,
    pub ready_at: Option<i64>,
    pub unresponsive_since: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFacts {
    /// Insertion order within the database: the history cursor.
    pub seq: i64,
    pub attempt_id: String,
    pub node_id: String,
    pub node_path: String,
    pub node_type: String,
    pub visit: i64,
    pub status: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// The attempt's stored output (a completed attempt), by digest and length.
    pub output: Option<AttemptBlob>,
    /// The attempt's stored error (a failed or timed-out attempt), by digest and length.
    pub error: Option<AttemptBlob>,
}

/// A value an attempt references (its output or its error): a JSON blob of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptBlob {
    /// Lowercase hex SHA-256 of the stored bytes.
    pub digest: String,
    /// `None` when the blob row is missing (a damaged store: `state verify` reports it).
    pub byte_length: Option<i64>,
}

/// Which value of an attempt a content read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptValue {
    Output,
    Error,
}

impl AttemptValue {
    /// The value's digest column and inline column in `node_attempts`.
    fn columns(self) -> (&'static str, &'static str) {
        match self {
            Self::Output => ("output_hash", "output_inline"),
            Self::Error => ("error_hash", "error_inline"),
        }
    }
}

/// A stored fact of a run that a view references as content and `view.content` reads in
/// place (never copied into `run_view_content`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunValue {
    /// The output or error of one of the run's attempts.
    Attempt(AttemptValue),
    /// The run's definition snapshot (its `definition_digest`).
    Definition,
}

impl RunValue {
    /// The media type the fact is kept under in `blobs`.
    fn stored_media_type(self) -> &'static str {
        match self {
            Self::Attempt(_) => super::blobs::JSON_MEDIA_TYPE,
            Self::Definition => DEFINITION_MEDIA_TYPE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFacts {
    pub request_id: String,
    pub kind: String,
    pub created_at: i64,
    /// The attempt that asked (waiting, or a completed checkpoint node).
    pub attempt: Option<AttemptFacts>,
    /// The newest updates the step reported (newest first).
    pub updates: Vec<UpdateView>,
}

/// Updates a view shows per request.
pub const UPDATES_IN_VIEW_MAX: usize = 20;
/// Update data inlined in a view (larger data shows only its size).
pub const UPDATE_DATA_INLINE_BYTES_MAX: u64 = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateView {
    pub update_type: String,
    pub update_key: String,
    pub seq: i64,
    pub at: i64,
    pub data_bytes: u64,
    /// The data's canonical JSON text when it is at most [`UPDATE_DATA_INLINE_BYTES_MAX`]
    /// (text, so the view's no-null rule never changes a reported value).
    pub data_json: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunViewFacts {
    pub run: RunFacts,
    /// See [`presentation_revision`].
    pub presentation_revision: i64,
    pub worker: Option<WorkerFacts>,
    pub unfinished: Option<AttemptFacts>,
    pub pending_request: Option<RequestFacts>,
    pub ambiguous_effects: i64,
    /// The exact origin-session model turn open for this run: (turn ID, started at).
    pub origin_turn: Option<(String, i64)>,
    /// The newest attempts, oldest first (at most the requested window).
    pub recent_attempts: Vec<AttemptFacts>,
}

/// The run row with its queue status and execution mode; a macro so each query is one
/// `concat!` literal (see `unfinished_attempt_from`). Only a run settled `continued` has a
/// continuation (both are written in one transaction, `continuations::answer_checkpoint`),
/// so only its row looks one up: every other read (each status poll) skips that index.
macro_rules! run_select {
    () => {
        "SELECT r.run_id, r.workflow_name, r.status, q.status, r.paused, r.status_detail,
        r.revision, b.execution_mode, r.origin, r.parent_run_id, r.definition_digest, r.error_hash,
        r.created_at, r.updated_at, r.finished_at,
        (SELECT s.change_number FROM run_settings s WHERE s.run_id = r.run_id),
        CASE WHEN r.status_detail = 'continued' THEN
          (SELECT c.run_id FROM runs c WHERE c.parent_run_id = r.run_id AND c.origin = 'continuation' LIMIT 1)
        END,
        r.attempt_count, r.completed_attempt_count
     FROM runs r JOIN run_queue q ON q.run_id = r.run_id JOIN run_bindings b ON b.run_id = r.run_id"
    };
}

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunFacts> {
    Ok(RunFacts {
        run_id: row.get(0)?,
        workflow_name: row.get(1)?,
        status: row.get(2)?,
        queue_status: row.get(3)?,
        paused: row.get(4)?,
        detail: row.get(5)?,
        revision: row.get(6)?,
        execution_mode: row.get(7)?,
        origin: row.get(8)?,
        parent_run_id: row.get(9)?,
        definition_digest: row.get(10)?,
        error_hash: row.get(11)?,
        created_at: row.get(12)?,
        updated_at: row.get(13)?,
        finished_at: row.get(14)?,
        settings_change_number: row.get(15)?,
        continued_as: row.get(16)?,
        attempt_count: row.get(17)?,
        completed_steps: row.get(18)?,
    })
}

/// Every query selecting these reads `FROM node_attempts` (a value's length is its inline
/// bytes', else a correlated subquery on its blob; attempt values are JSON).
macro_rules! attempt_columns {
    () => {
        "rowid, attempt_id, node_id, node_path, node_type, visit, status, started_at, finished_at,
     output_hash, coalesce(length(output_inline), (SELECT b.byte_length FROM blobs b
                   WHERE b.blob_hash = node_attempts.output_hash AND b.media_type = 'application/json')),
     error_hash, coalesce(length(error_inline), (SELECT b.byte_length FROM blobs b
                  WHERE b.blob_hash = node_attempts.error_hash AND b.media_type = 'application/json'))"
    };
}

fn attempt_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<AttemptFacts> {
    Ok(AttemptFacts {
        seq: row.get(0)?,
        attempt_id: row.get(1)?,
        node_id: row.get(2)?,
        node_path: row.get(3)?,
        node_type: row.get(4)?,
        visit: row.get(5)?,
        status: row.get(6)?,
        started_at: row.get(7)?,
        finished_at: row.get(8)?,
        output: attempt_blob(row.get(9)?, row.get(10)?),
        error: attempt_blob(row.get(11)?, row.get(12)?),
    })
}

fn attempt_blob(digest: Option<String>, byte_length: Option<i64>) -> Option<AttemptBlob> {
    digest.map(|digest| AttemptBlob { digest, byte_length })
}

/// The run's presentation revision: its durable revision plus every state transition of
/// its runner epochs (started, ready, finished, liveness) plus every reported step update
/// plus its settings change number plus every origin-session turn start and end (a turn fact
/// while a runner holds the claim does not advance the run revision). A view shows worker
/// activity and updates, which do not change the run's revision; this number changes with
/// everything a view shows, only grows, and is the same for the same durable state (so it
/// survives a server restart). Every live run feed reads it after every commit, so the parts
/// are counted in the run's row as they change (`store::presentation`), not summed here.
pub fn presentation_revision(conn: &Connection, run_id: &str) -> StoreResult<Option<i64>> {
    Ok(presentation_look(conn, run_id)?.map(|(_, revision)| revision))
}

/// `presentation_revision` with the run's row, whose stamp says when a commit may have
/// changed the run (`store::run_news`): a live feed's look.
pub fn presentation_look(conn: &Connection, run_id: &str) -> StoreResult<Option<(RunRow, i64)>> {
    Ok(conn
        .prepare_cached("SELECT rowid, revision + presentation_changes FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |row| Ok((RunRow(row.get(0)?), row.get(1)?)))
        .optional()?)
}

/// One run's lifecycle row (with its queue status and execution mode).
pub fn run_facts(conn: &Connection, run_id: &str) -> StoreResult<RunFacts> {
    conn.prepare_cached(concat!(run_select!(), " WHERE r.run_id = ?1"))?
        .query_row([run_id], run_row)
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound {
            run_id: run_id.to_string(),
        })
}

/// Everything one run view needs, with the newest `window` attempts.
pub fn run_view_facts(conn: &Connection, run_id: &str, window: usize) -> StoreResult<RunViewFacts> {
    let revision = presentation_revision(conn, run_id)?;
    run_view_facts_at(conn, run_id, window, revision)
}

/// [`run_view_facts`] with the run's presentation revision as the caller read it in this
/// same transaction: a feed reads it first to skip an unchanged view, and reading it again
/// for the view it then builds cost as much as the look itself.
pub fn run_view_facts_at(
    conn: &Connection,
    run_id: &str,
    window: usize,
    presentation_revision: Option<i64>,
) -> StoreResult<RunViewFacts> {
    let run = run_facts(conn, run_id)?;
    Ok(RunViewFacts {
        presentation_revision: presentation_revision.unwrap_or(run.revision),
        worker: live_worker(conn, run_id)?,
        unfinished: unfinished_attempt(conn, run_id)?,
        pending_request: pending_request(conn, run_id)?,
        ambiguous_effects: ambiguous_effects(conn, run_id)?,
        origin_turn: super::turns::open_turn_of_run(conn, run_id)?,
        recent_attempts: recent_attempts(conn, run_id, window.min(ATTEMPTS_PAGE_MAX), run.attempt_count)?,
        run,
    })
}

fn live_worker(conn: &Connection, run_id: &str) -> StoreResult<Option<WorkerFacts>> {
    Ok(conn
        .prepare_cached(
            "SELECT CASE WHEN unresponsive_since IS NULL THEN status ELSE 'unresponsive' END,
                    started_at, ready_at, unresponsive_since FROM run_workers
             WHERE run_id = ?1 AND status IN ('starting', 'ready')",
        )?
        .query_row([run_id], |row| {
            Ok(WorkerFacts {
                status: row.get(0)?,
                started_at: row.get(1)?,
                unresponsive_since: row.get(3)?,
                ready_at: row.get(2)?,
            })
        })
        .optional()?)
}

/// The run's one unfinished (running or waiting) attempt: its current node.
pub fn unfinished_attempt(conn: &Connection, run_id: &str) -> StoreResult<Option<AttemptFacts>> {
    Ok(conn
        .prepare_cached(concat!("SELECT ", attempt_columns!(), " ", unfinished_attempt_from!()))?
        .query_row([run_id], attempt_row)
        .optional()?)
}

/// The condition (on `interactive_requests i`, run `?1`) that holds for exactly the run's
/// newest pending request, by `created_at` then `request_id`: the pending row no other
/// pending row of the run follows. Not `ORDER BY … LIMIT 1`: the `(run_id, status)` index
/// finds the pending rows (nearly always none or one), and SQLite opened a sorter for the
/// `ORDER BY` on every read of it (each status poll, each run-feed rebuild).
macro_rules! newest_pending_request_where {
    () => {
        "i.run_id = ?1 AND i.status = 'pending'
         AND NOT EXISTS (SELECT 1 FROM interactive_requests o WHERE o.run_id = ?1 AND o.status = 'pending'
                         AND (o.created_at, o.request_id) > (i.created_at, i.request_id))"
    };
}
pub(crate) use newest_pending_request_where;

fn pending_request(conn: &Connection, run_id: &str) -> StoreResult<Option<RequestFacts>> {
    let request: Option<(String, String, i64, String)> = conn
        .prepare_cached(concat!(
            "SELECT i.request_id, i.kind, i.created_at, i.attempt_id FROM interactive_requests i WHERE ",
            newest_pending_request_where!()
        ))?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .optional()?;
    let Some((request_id, kind, created_at, attempt_id)) = request else {
        return Ok(None);
    };
    let attempt = conn
        .prepare_cached(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM node_attempts WHERE attempt_id = ?1"
        ))?
        .query_row([&attempt_id], attempt_row)
        .optional()?;
    let updates = request_updates(conn, &request_id)?;
    Ok(Some(RequestFacts {
        request_id,
        kind,
        created_at,
        attempt,
        updates,
    }))
}

fn request_updates(conn: &Connection, request_id: &str) -> StoreResult<Vec<UpdateView>> {
    update_views(
        conn,
        super::interactions::latest_updates(conn, request_id, UPDATES_IN_VIEW_MAX)?,
    )
}

/// Updates per `view.page` kind `updates`.
pub const UPDATES_PAGE_MAX: usize = 200;

/// One page of a request's updates (the latest value per type and key, as the view shows
/// them), newest first, older than the update seq `before`, at most `limit`
/// (≤ [`UPDATES_PAGE_MAX`]). `None` when the request is not one of the run's: a client
/// reads only the requests of the run it names.
pub fn updates_page(
    conn: &Connection,
    run_id: &str,
    request_id: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Option<Vec<UpdateView>>> {
    assert!(limit <= UPDATES_PAGE_MAX, "update pages are bounded");
    let owned: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM interactive_requests WHERE request_id = ?1 AND run_id = ?2")?
        .query_row([request_id, run_id], |row| row.get(0))
        .optional()?;
    if owned.is_none() {
        return Ok(None);
    }
    let facts = super::interactions::updates_before(conn, request_id, before, limit)?;
    update_views(conn, facts).map(Some)
}

/// Stored updates as a view shows them: small data inlined as JSON text, larger data only
/// its size.
fn update_views(conn: &Connection, facts: Vec<super::interactions::UpdateFacts>) -> StoreResult<Vec<UpdateView>> {
    let mut views = Vec::new();
    for update in facts {
        let data_bytes = super::blobs::blob_ref(conn, &update.data_hash, super::blobs::JSON_MEDIA_TYPE)
            .map(|reference| reference.bytes)
            .unwrap_or(0);
        let data_json = match data_bytes <= UPDATE_DATA_INLINE_BYTES_MAX {
            true => super::blobs::read_json(conn, &update.data_hash)?
                .map(|data| String::from_utf8(crate::protocol::value_to_canonical_vec(&data)).unwrap_or_default()),
            false => None,
        };
        views.push(UpdateView {
            update_type: update.update_type,
            update_key: update.update_key,
            seq: update.update_seq,
            at: update.updated_at,
            data_bytes,
            data_json,
        });
    }
    Ok(views)
}

/// The pending request's ID and kind alone (run lists, summaries and submissions need
/// nothing more).
pub fn pending_request_brief(conn: &Connection, run_id: &str) -> StoreResult<Option<(String, String)>> {
    Ok(conn
        .prepare_cached(concat!(
            "SELECT i.request_id, i.kind FROM interactive_requests i WHERE ",
            newest_pending_request_where!()
        ))?
        .query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The run's own ambiguous effects: a channel's (owner `channel`, a decision's message) never
/// makes its run need review (`channel recover` settles it).
fn ambiguous_effects(conn: &Connection, run_id: &str) -> StoreResult<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM effects WHERE run_id = ?1 AND status = 'ambiguous' AND owner = 'runner'")?
        .query_row([run_id], |row| row.get(0))?)
}

/// A run with at most this many attempts has its view's window found by sorting them all in
/// one statement; a longer one's, per status ([`seqs_per_status`]), so a rebuild's cost does
/// not grow with the run's history.
const ATTEMPTS_SORTED_WHOLE_MAX: i64 = 64;

fn recent_attempts(
    conn: &Connection,
    run_id: &str,
    window: usize,
    attempt_count: i64,
) -> StoreResult<Vec<AttemptFacts>> {
    let mut newest_first = if attempt_count <= ATTEMPTS_SORTED_WHOLE_MAX {
        conn.prepare_cached(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM node_attempts WHERE run_id = ?1 ORDER BY rowid DESC LIMIT ?2"
        ))?
        .query_map(params![run_id, window as i64], attempt_row)?
        .collect::<Result<Vec<_>, _>>()?
    } else {
        attempts_by_seq(conn, &seqs_per_status(conn, run_id, Seqs::Newest, window)?)?
    };
    newest_first.reverse();
    Ok(newest_first)
}

/// Attempts after `after_seq` (oldest first), at most `limit` (≤ [`ATTEMPTS_PAGE_MAX`]).
pub fn attempts_page(
    conn: &Connection,
    run_id: &str,
    after_seq: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<AttemptFacts>> {
    assert!(limit <= ATTEMPTS_PAGE_MAX, "attempt pages are bounded");
    let seqs = seqs_per_status(conn, run_id, Seqs::After(after_seq.unwrap_or(0)), limit)?;
    attempts_by_seq(conn, &seqs)
}

/// Which of a run's attempt sequence numbers (rowids) [`seqs_per_status`] finds.
#[derive(Clone, Copy)]
enum Seqs {
    /// The newest, newest first.
    Newest,
    /// The oldest after this one, oldest first.
    After(i64),
}

/// Up to `limit` of the run's attempt sequence numbers, in the order `which` names. The
/// index `(run_id, status)` keeps each status's attempts in rowid order, so each status
/// gives its first `limit` without a sort, and only those (at most 7 × `limit`) are merged.
/// Why not one `ORDER BY rowid`: that sorts every attempt of the run, and SQLite computes each
/// row's columns before the sort (for a watched run of 10,000 attempts, ~13 ms a rebuild).
fn seqs_per_status(conn: &Connection, run_id: &str, which: Seqs, limit: usize) -> StoreResult<Vec<i64>> {
    let (sql, bound) = match which {
        Seqs::Newest => (NEWEST_OF_STATUS_SQL, i64::MAX),
        Seqs::After(after) => (AFTER_OF_STATUS_SQL, after),
    };
    let mut statement = conn.prepare_cached(sql)?;
    let mut seqs = Vec::with_capacity(limit.saturating_mul(AttemptStatus::ALL.len()));
    for status in AttemptStatus::ALL {
        let found = statement.query_map(params![run_id, status.as_str(), bound, limit as i64], first_seq)?;
        seqs.extend(found.collect::<Result<Vec<_>, _>>()?);
    }
    match which {
        Seqs::Newest => seqs.sort_unstable_by(|a, b| b.cmp(a)),
        Seqs::After(_) => seqs.sort_unstable(),
    }
    seqs.truncate(limit);
    Ok(seqs)
}

/// A run's newest attempts of one status before `?3` (`?4` of them): an index walk, no sort.
const NEWEST_OF_STATUS_SQL: &str =
    "SELECT rowid FROM node_attempts WHERE run_id = ?1 AND status = ?2 AND rowid < ?3 ORDER BY rowid DESC LIMIT ?4";
/// A run's oldest attempts of one status after `?3` (`?4` of them): an index walk, no sort.
const AFTER_OF_STATUS_SQL: &str =
    "SELECT rowid FROM node_attempts WHERE run_id = ?1 AND status = ?2 AND rowid > ?3 ORDER BY rowid LIMIT ?4";

fn first_seq(row: &rusqlite::Row<'_>) -> rusqlite::Result<i64> {
    row.get(0)
}

/// The attempts with these sequence numbers, in the same order.
fn attempts_by_seq(conn: &Connection, seqs: &[i64]) -> StoreResult<Vec<AttemptFacts>> {
    let mut statement = conn.prepare_cached(concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM node_attempts WHERE rowid = ?1"
    ))?;
    let attempts = seqs
        .iter()
        .map(|seq| statement.query_row([seq], attempt_row))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(attempts)
}

/// One run-list item: status facts only (never a history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunListFacts {
    pub run: RunFacts,
    pub worker_active: bool,
    /// An exact origin-session model turn of this run is open.
    pub origin_turn: bool,
    pub pending_kind: Option<String>,
    pub ambiguous_effects: i64,
    pub current_node_id: Option<String>,
}

/// Runs newest first, strictly after the `(created_at, run_id)` cursor when given.
pub fn runs_page(conn: &Connection, before: Option<(i64, &str)>, limit: usize) -> StoreResult<Vec<RunListFacts>> {
    newest_runs(conn, before, limit)?
        .into_iter()
        .map(|run| list_facts(conn, run))
        .collect()
}

/// Run rows newest first, strictly after the `(created_at, run_id)` cursor when given.
pub fn newest_runs(conn: &Connection, before: Option<(i64, &str)>, limit: usize) -> StoreResult<Vec<RunFacts>> {
    assert!(limit <= RUNS_PAGE_MAX, "run pages are bounded");
    Ok(match before {
        None => conn
            .prepare_cached(concat!(
                run_select!(),
                " ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?1"
            ))?
            .query_map(params![limit as i64], run_row)?
            .collect::<Result<Vec<_>, _>>()?,
        Some((created_at, run_id)) => conn
            .prepare_cached(concat!(
                run_select!(),
                " WHERE (r.created_at, r.run_id) < (?1, ?2)
                 ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?3"
            ))?
            .query_map(params![created_at, run_id, limit as i64], run_row)?
            .collect::<Result<Vec<_>, _>>()?,
    })
}

fn list_facts(conn: &Connection, run: RunFacts) -> StoreResult<RunListFacts> {
    let run_id = run.run_id.clone();
    Ok(RunListFacts {
        worker_active: live_worker(conn, &run_id)?.is_some(),
        origin_turn: super::turns::open_turn_of_run(conn, &run_id)?.is_some(),
        pending_kind: pending_request_brief(conn, &run_id)?.map(|(_, kind)| kind),
        ambiguous_effects: ambiguous_effects(conn, &run_id)?,
        current_node_id: unfinished_attempt(conn, &run_id)?.map(|attempt| attempt.node_id),
        run,
    })
}

/// A reference to content a view advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRef {
    /// Lowercase hex SHA-256 of the bytes.
    pub digest: String,
    pub media_type: String,
    pub byte_length: usize,
}

/// Store generated view content under its exact run, digest and media type before a view
/// names it (an identical one is kept as is).
pub fn put_view_content(tx: &WriteTx<'_>, run_id: &str, media_type: &str, content: &[u8]) -> StoreResult<ContentRef> {
    if content.len() > CONTENT_BYTES_MAX {
        return Err(StoreError::TooLarge {
            what: "view content",
            bytes: content.len(),
            max: CONTENT_BYTES_MAX,
        });
    }
    let digest = sha256_hex(content);
    tx.conn()
        .prepare_cached(
            "INSERT INTO run_view_content (run_id, content_hash, media_type, byte_length, content, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            run_id,
            digest,
            media_type,
            content.len() as i64,
            content,
            tx.now_ms()
        ])?;
    Ok(ContentRef {
        digest,
        media_type: media_type.to_string(),
        byte_length: content.len(),
    })
}

/// Whether the content exists for exactly this run, digest and media type.
pub fn view_content_ref(
    conn: &Connection,
    run_id: &str,
    digest: &str,
    media_type: &str,
) -> StoreResult<Option<ContentRef>> {
    Ok(conn
        .prepare_cached(
            "SELECT byte_length FROM run_view_content WHERE run_id = ?1 AND content_hash = ?2 AND media_type = ?3",
        )?
        .query_row(params![run_id, digest, media_type], |row| row.get::<_, i64>(0))
        .optional()?
        .map(|length| ContentRef {
            digest: digest.to_string(),
            media_type: media_type.to_string(),
            byte_length: length as usize,
        }))
}

/// One chunk of view content (`length` ≤ [`CONTENT_CHUNK_BYTES_MAX`]); `None` when the run,
/// digest and media type do not name stored content together.
pub fn read_view_content(
    conn: &Connection,
    reference: &ContentRef,
    run_id: &str,
    offset: usize,
    length: usize,
) -> StoreResult<Option<Vec<u8>>> {
    assert!(length <= CONTENT_CHUNK_BYTES_MAX, "content chunks are bounded");
    Ok(conn
        .prepare_cached(
            "SELECT substr(content, ?4, ?5) FROM run_view_content
             WHERE run_id = ?1 AND content_hash = ?2 AND media_type = ?3",
        )?
        .query_row(
            params![
                run_id,
                reference.digest,
                reference.media_type,
                offset as i64 + 1,
                length as i64
            ],
            |row| row.get(0),
        )
        .optional()?)
}

/// What a `view.content` read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentRead {
    /// The run, digest and media type name no content together.
    Unavailable,
    /// The offset is past the end of the content.
    PastEnd,
    /// One chunk (`length` bytes at most, shorter at the end).
    Chunk { reference: ContentRef, bytes: Vec<u8> },
}

/// One chunk of content a view of `run_id` references: generated content stored in
/// `run_view_content`, else — when `value` says which stored fact the media type stands for —
/// the output or error of one of this run's own attempts, or this run's definition. The fact
/// must belong to the run, so a digest from another run (or any other stored blob) is
/// `Unavailable`.
pub fn read_content(
    conn: &Connection,
    run_id: &str,
    digest: &str,
    media_type: &str,
    value: Option<RunValue>,
    offset: usize,
    length: usize,
) -> StoreResult<ContentRead> {
    if let Some(reference) = view_content_ref(conn, run_id, digest, media_type)? {
        if offset > reference.byte_length {
            return Ok(ContentRead::PastEnd);
        }
        return Ok(match read_view_content(conn, &reference, run_id, offset, length)? {
            Some(bytes) => ContentRead::Chunk { reference, bytes },
            None => ContentRead::Unavailable,
        });
    }
    let Some(value) = value else {
        return Ok(ContentRead::Unavailable);
    };
    let owned = match value {
        RunValue::Attempt(attempt) => attempt_of_run_has(conn, run_id, digest, attempt)?,
        RunValue::Definition => definition_of_run_is(conn, run_id, digest)?.then_some(None),
    };
    match owned {
        None => Ok(ContentRead::Unavailable),
        Some(Some(inline)) => read_inline(digest, media_type, &inline, offset, length),
        Some(None) => read_stored_blob(conn, digest, media_type, value.stored_media_type(), offset, length),
    }
}

/// A chunk of an attempt's value kept in its row, checked against its digest like a blob.
fn read_inline(
    digest: &str,
    media_type: &str,
    inline: &[u8],
    offset: usize,
    length: usize,
) -> StoreResult<ContentRead> {
    super::blobs::verify_inline(digest, inline)?;
    if offset > inline.len() {
        return Ok(ContentRead::PastEnd);
    }
    if length > super::blobs::BLOB_PART_BYTES_MAX {
        return Err(super::blobs::BlobError::PartTooLarge { requested: length }.into());
    }
    let end = inline.len().min(offset.saturating_add(length));
    let reference = ContentRef {
        digest: digest.to_string(),
        media_type: media_type.to_string(),
        byte_length: inline.len(),
    };
    Ok(ContentRead::Chunk {
        reference,
        bytes: inline[offset..end].to_vec(),
    })
}

/// A chunk of the stored blob `digest` (kept under `stored_as`), answered as `media_type`.
fn read_stored_blob(
    conn: &Connection,
    digest: &str,
    media_type: &str,
    stored_as: &str,
    offset: usize,
    length: usize,
) -> StoreResult<ContentRead> {
    let blob = match super::blobs::blob_ref(conn, digest, stored_as) {
        Ok(blob) => blob,
        Err(StoreError::Blob(super::blobs::BlobError::NotFound { .. })) => return Ok(ContentRead::Unavailable),
        Err(err) => return Err(err),
    };
    if offset as u64 > blob.bytes {
        return Ok(ContentRead::PastEnd);
    }
    let bytes = super::blobs::read_blob_part(conn, &blob, offset as u64, length)?;
    let reference = ContentRef {
        digest: digest.to_string(),
        media_type: media_type.to_string(),
        byte_length: blob.bytes as usize,
    };
    Ok(ContentRead::Chunk { reference, bytes })
}

/// Whether `digest` is exactly this run's definition digest.
fn definition_of_run_is(conn: &Connection, run_id: &str, digest: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1 AND definition_digest = 'sha256:' || ?2")?
        .query_row(params![run_id, digest], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Whether an attempt of exactly this run holds `digest` as its output (or error): `None`
/// when none does, else the value itself when the attempt's row keeps it (`Some(None)`: a
/// blob). Two attempts with one digest may keep it either way (an answer's receipt is a
/// blob); each is the same bytes.
fn attempt_of_run_has(
    conn: &Connection,
    run_id: &str,
    digest: &str,
    value: AttemptValue,
) -> StoreResult<Option<Option<Vec<u8>>>> {
    let (hash, inline) = value.columns();
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {inline} FROM node_attempts WHERE run_id = ?1 AND {hash} = ?2 LIMIT 1"
        ))?
        .query_row(params![run_id, digest], |row| row.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rusqlite::{Connection, params};

    use super::{
        AFTER_OF_STATUS_SQL, ATTEMPTS_SORTED_WHOLE_MAX, AttemptFacts, NEWEST_OF_STATUS_SQL, attempt_row, attempts_page,
        run_view_facts,
    };
    use crate::store::query_plans::assert_live_reads_only;
    use crate::store::runs::{self, NewRun};
    use crate::store::{Store, StoreResult, SystemClock};

    fn queue(store: &Store, run_id: &str) {
        let run = NewRun::example(run_id);
        store.write(move |tx| runs::queue_run(tx, &run)).expect("queue");
    }

    /// `count` attempts of `run_id`, every status taking turns (the one unfinished attempt a
    /// run may have is `waiting`, at `waiting_at`), interleaved with attempts of `other`.
    fn attempts(store: &Store, run_id: &str, other: &str, count: usize, waiting_at: usize) {
        let (run_id, other) = (run_id.to_string(), other.to_string());
        let finished = ["completed", "failed", "interrupted", "timed_out", "cancelled"];
        store
            .write(move |tx| {
                let mut insert = tx.conn().prepare(
                    "INSERT INTO node_attempts (attempt_id, run_id, node_id, node_path, visit, node_type, status,
                                                lease_generation, started_at, finished_at)
                     VALUES (?1, ?2, 'n', 'n', ?3, 'compute', ?4, 1, ?3, CASE WHEN ?4 = 'waiting' THEN NULL ELSE ?3 END)",
                )?;
                for index in 0..count {
                    let status = if index == waiting_at { "waiting" } else { finished[index % finished.len()] };
                    let visit = index as i64 + 1;
                    insert.execute(params![format!("{run_id}-{index}"), run_id, visit, status])?;
                    insert.execute(params![format!("{other}-{run_id}-{index}"), other, visit, "completed"])?;
                }
                // What the store's own attempt writes keep (`attempts::count_attempts`).
                tx.conn().execute(
                    "UPDATE runs SET attempt_count = (SELECT count(*) FROM node_attempts a WHERE a.run_id = runs.run_id),
                                     completed_attempt_count = (SELECT count(*) FROM node_attempts a
                                                                WHERE a.run_id = runs.run_id AND a.status = 'completed')",
                    [],
                )?;
                Ok(())
            })
            .expect("attempts");
    }

    /// What one sort of all the run's attempts gives (the statements the window replaced).
    fn sorted_whole(conn: &Connection, sql: &str, values: impl rusqlite::Params) -> StoreResult<Vec<AttemptFacts>> {
        Ok(conn
            .prepare(&format!("SELECT {} FROM node_attempts WHERE {sql}", attempt_columns!()))?
            .query_map(values, attempt_row)?
            .collect::<Result<_, _>>()?)
    }

    #[test]
    fn a_long_runs_window_and_pages_are_the_attempts_one_sort_would_give() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("state.sqlite"), Arc::new(SystemClock)).expect("store");
        let count = (ATTEMPTS_SORTED_WHOLE_MAX as usize) * 2 + 7;
        for run_id in ["long", "short", "other"] {
            queue(&store, run_id);
        }
        attempts(&store, "long", "other", count, count - 3);
        attempts(&store, "short", "other", 12, 4);
        store
            .read(|conn| {
                for (run_id, window) in [("long", 20), ("long", 1), ("long", 200), ("short", 20), ("short", 5)] {
                    let facts = run_view_facts(conn, run_id, window)?;
                    // The long run is past the whole-sort bound: its window is read per status.
                    let total = if run_id == "long" { count } else { 12 };
                    assert_eq!(facts.run.attempt_count, total as i64, "{run_id}");
                    let mut newest = sorted_whole(
                        conn,
                        "run_id = ?1 ORDER BY rowid DESC LIMIT ?2",
                        params![run_id, window as i64],
                    )?;
                    newest.reverse();
                    assert_eq!(
                        facts.recent_attempts, newest,
                        "{run_id}: the newest {window}, oldest first"
                    );
                    assert!(
                        facts
                            .recent_attempts
                            .iter()
                            .all(|attempt| attempt.attempt_id.starts_with(run_id))
                    );
                }
                let seqs: Vec<i64> = sorted_whole(conn, "run_id = 'long' ORDER BY rowid", [])?
                    .iter()
                    .map(|attempt| attempt.seq)
                    .collect();
                for after in [
                    None,
                    Some(0),
                    Some(seqs[10]),
                    Some(seqs[count - 4]),
                    Some(seqs[count - 1]),
                ] {
                    for limit in [1, 20, 200] {
                        let page = attempts_page(conn, "long", after, limit)?;
                        let expected = sorted_whole(
                            conn,
                            "run_id = 'long' AND rowid > ?1 ORDER BY rowid LIMIT ?2",
                            params![after.unwrap_or(0), limit as i64],
                        )?;
                        assert_eq!(page, expected, "after {after:?}, limit {limit}");
                    }
                }
                Ok(())
            })
            .expect("read");
    }

    #[test]
    fn the_per_status_looks_walk_the_index_without_a_sort() {
        assert_live_reads_only(&[
            ("newest of a status", NEWEST_OF_STATUS_SQL),
            ("after a seq, of a status", AFTER_OF_STATUS_SQL),
        ]);
    }
}
