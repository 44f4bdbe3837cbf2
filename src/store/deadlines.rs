//! Step deadlines (docs/SESSIONS.md "Deadlines"): the model time a pending interactive agent
//! or assistant step used, as interval records, and the one transition that times a step
//! out when its budget is spent — or, for a checkpoint or decision, when its wall-clock
//! deadline passed.
//!
//! Only reported model-turn time in a connected session counts: an interval opens when the
//! server accepts (or, after a reconnect, re-accepts) the start of a step's turn and grows
//! only by the deadline task's observations, each bounded by `OBSERVATION_STEP_MS_MAX`, so
//! delivery, waiting, pause, a disconnected session, a suspended server, a clock jump and
//! server downtime add nothing. Startup closes every interval an older server left open.
//!
//! Architecture Invariant: an interval grows only while its request is pending, its turn is
//! open and its session has a coordinator; the deadline task closes it as soon as one of
//! those stops holding. A timed-out step is ended by `run_waits::end_waiting_step`, the one path
//! that closes a waiting step without an answer, under the server's control claim.

use rusqlite::{Connection, params};

use super::error::{StoreError, StoreResult};
use super::interactions::InteractionKind;
use super::run_waits::{self, WaitingEnd};
use super::writer::WriteTx;

/// One observation adds at most this much model time: the deadline task observes every
/// second, so a longer gap means the server was suspended or the clock jumped.
pub const OBSERVATION_STEP_MS_MAX: i64 = 5_000;
/// Steps timed out in one pass at most (the rest in the next pass, a second later).
pub const EXPIRED_BATCH_MAX: usize = 64;
/// The stored error of a timed-out step.
const TIMEOUT_ERROR_BYTES_MAX: usize = 1024;

// The deadline task's looks run every second while anything commits, so each one reads only
// live rows through a partial index (pending requests, running steps with a deadline, open
// turns and intervals), never the settled history: the plans are tested below.

const OPEN_INTERVALS_SQL: &str = "SELECT request_id, interval_number, target_session_id FROM active_intervals
     WHERE status = 'open' ORDER BY observed_at";

const UNOBSERVED_SQL: &str = "SELECT i.request_id, i.run_id, t.target_session_id, t.turn_id
     FROM workflow_turns t
     JOIN workflow_messages m ON m.workflow_message_id = t.workflow_message_id AND m.kind = 'step'
     JOIN interactive_requests i ON i.request_id = m.source_id
     JOIN node_attempts a ON a.attempt_id = i.attempt_id
     JOIN runs r ON r.run_id = i.run_id
     WHERE t.status = 'open' AND i.status = 'pending' AND i.kind IN ('agent', 'assistant')
       AND a.timeout_ms IS NOT NULL AND r.status = 'waiting' AND r.paused = 0
       AND NOT EXISTS (SELECT 1 FROM active_intervals o WHERE o.request_id = i.request_id AND o.status = 'open')";

const EXPIRED_SQL: &str = "SELECT i.run_id, i.request_id, i.attempt_id, i.kind, a.timeout_ms
     FROM interactive_requests i
     JOIN node_attempts a ON a.attempt_id = i.attempt_id
     JOIN runs r ON r.run_id = i.run_id
     WHERE i.status = 'pending' AND a.status = 'waiting' AND r.status = 'waiting' AND r.paused = 0
       AND ((i.kind IN ('agent', 'assistant') AND a.timeout_ms IS NOT NULL
             AND (SELECT coalesce(sum(v.elapsed_ms), 0) FROM active_intervals v WHERE v.request_id = i.request_id)
                 >= a.timeout_ms)
         OR (i.kind IN ('checkpoint', 'decision') AND a.deadline_at IS NOT NULL AND a.deadline_at <= ?1))
     ORDER BY i.created_at
     LIMIT ?2";

const NEXT_DUE_SQL: &str = "SELECT min(due) FROM (
       SELECT a.deadline_at AS due
       FROM interactive_requests i
       JOIN node_attempts a ON a.attempt_id = i.attempt_id
       JOIN runs r ON r.run_id = i.run_id
       WHERE i.status = 'pending' AND a.status = 'waiting' AND r.status = 'waiting' AND r.paused = 0
         AND i.kind IN ('checkpoint', 'decision') AND a.deadline_at IS NOT NULL
       UNION ALL
       SELECT a.deadline_at + ?1 AS due
       FROM node_attempts a JOIN runs r ON r.run_id = a.run_id
       WHERE a.status = 'running' AND a.deadline_at IS NOT NULL AND r.status = 'running')";

/// The run's own effects only (`e.run_id` leads the effects' unique index; `attempt_id` has
/// none): the run's overdue step, unless an effect of it is left to judge.
const TIME_OUT_OVERDUE_SQL: &str = "UPDATE node_attempts SET status = 'timed_out', error_hash = ?1, finished_at = ?2
     WHERE run_id = ?3 AND status = 'running' AND deadline_at IS NOT NULL AND deadline_at <= ?2 - ?4
       AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.run_id = ?3 AND e.attempt_id = node_attempts.attempt_id
                       AND e.status IN ('pending', 'applying', 'ambiguous'))";

/// `deadline_at <= now - grace`, not `deadline_at + grace <= now`: only a bare column bounds
/// the index range (and gives the order).
const OVERDUE_SQL: &str = "SELECT a.run_id FROM node_attempts a JOIN runs r ON r.run_id = a.run_id
     WHERE a.status = 'running' AND a.deadline_at IS NOT NULL AND a.deadline_at <= ?2 - ?1
       AND r.status = 'running'
     ORDER BY a.deadline_at LIMIT ?3";

/// An interval that is growing now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenInterval {
    pub request_id: String,
    pub interval_number: i64,
    pub session_id: String,
}

/// A step's turn that should be counting but has no open interval: just started, re-reported
/// after a reconnect, or a retry in the same turn after a rejected submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unobserved {
    pub request_id: String,
    pub run_id: String,
    pub session_id: String,
    pub turn_id: String,
}

/// Open turns serving a pending agent or assistant step with a time budget, in a waiting and
/// unpaused run, with no open interval (at most one open turn per session).
pub fn unobserved(conn: &Connection) -> StoreResult<Vec<Unobserved>> {
    let mut statement = conn.prepare_cached(UNOBSERVED_SQL)?;
    let rows = statement.query_map([], |row| {
        Ok(Unobserved {
            request_id: row.get(0)?,
            run_id: row.get(1)?,
            session_id: row.get(2)?,
            turn_id: row.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn open_interval(tx: &WriteTx<'_>, step: &Unobserved) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO active_intervals (request_id, interval_number, run_id, target_session_id, turn_id, status,
                                           started_at, observed_at)
             VALUES (?1, (SELECT coalesce(max(interval_number), 0) + 1 FROM active_intervals WHERE request_id = ?1),
                     ?2, ?3, ?4, 'open', ?5, ?5)",
        )?
        .execute(params![
            step.request_id,
            step.run_id,
            step.session_id,
            step.turn_id,
            tx.now_ms()
        ])?;
    Ok(())
}

/// The turn ended or was proved lost: its interval stops growing (no last observation is
/// added; the task observes every second).
pub(super) fn close_intervals_of_turn(tx: &WriteTx<'_>, session_id: &str, turn_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "UPDATE active_intervals SET status = 'closed'
             WHERE target_session_id = ?1 AND turn_id = ?2 AND status = 'open'",
        )?
        .execute(params![session_id, turn_id])?;
    Ok(())
}

/// The request closed (answered, cancelled, timed out): nothing of it grows any more.
pub(super) fn close_intervals_of_request(tx: &WriteTx<'_>, request_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE active_intervals SET status = 'closed' WHERE request_id = ?1 AND status = 'open'")?
        .execute([request_id])?;
    Ok(())
}

/// The run ended or paused: none of its steps' intervals grows.
pub(super) fn close_intervals_of_run(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<()> {
    tx.conn()
        .prepare_cached("UPDATE active_intervals SET status = 'closed' WHERE run_id = ?1 AND status = 'open'")?
        .execute([run_id])?;
    Ok(())
}

/// Startup: the old server's downtime is not model time. Returns the intervals closed.
pub fn close_all_open(tx: &WriteTx<'_>) -> StoreResult<usize> {
    Ok(tx
        .conn()
        .prepare_cached("UPDATE active_intervals SET status = 'closed' WHERE status = 'open'")?
        .execute([])?)
}

/// The intervals growing now (bounded by the sessions with an open turn: one each).
pub fn open_intervals(conn: &Connection) -> StoreResult<Vec<OpenInterval>> {
    let mut statement = conn.prepare_cached(OPEN_INTERVALS_SQL)?;
    let rows = statement.query_map([], |row| {
        Ok(OpenInterval {
            request_id: row.get(0)?,
            interval_number: row.get(1)?,
            session_id: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What one observation would change; empty means nothing to write.
#[derive(Debug, Default)]
pub struct Observation {
    pub open: Vec<OpenInterval>,
    pub unobserved: Vec<Unobserved>,
}

impl Observation {
    /// Whether `observe` has anything to do now: an open interval grows or closes, and a
    /// step turn gets an interval only in a `connected` session. A step whose session has no
    /// coordinator waits for one (Pi closed mid-turn): observing it changes nothing, however
    /// long that lasts, so the caller need not look again until a coordinator comes.
    pub fn needs_observing(&self, connected: impl Fn(&str) -> bool) -> bool {
        !self.open.is_empty() || self.unobserved.iter().any(|step| connected(&step.session_id))
    }
}

/// Read what the next observation covers.
pub fn observation(conn: &Connection) -> StoreResult<Observation> {
    Ok(Observation {
        open: open_intervals(conn)?,
        unobserved: unobserved(conn)?,
    })
}

/// One observation, in one transaction: each open interval of a `connected` session grows
/// by the time since its last observation (at most `OBSERVATION_STEP_MS_MAX`, never
/// negative); one whose session has no coordinator, whose turn is over or whose run no
/// longer waits unpaused for it closes instead; a step turn that should count and has no
/// open interval (in a connected session) gets one.
pub fn observe(tx: &WriteTx<'_>, seen: &Observation, connected: impl Fn(&str) -> bool) -> StoreResult<()> {
    let now = tx.now_ms();
    for interval in &seen.open {
        let key = params![interval.request_id, interval.interval_number];
        if connected(&interval.session_id) && still_served(tx.conn(), interval)? {
            tx.conn()
                .prepare_cached(
                    "UPDATE active_intervals
                     SET elapsed_ms = elapsed_ms + max(0, min(?3 - observed_at, ?4)), observed_at = max(observed_at, ?3)
                     WHERE request_id = ?1 AND interval_number = ?2 AND status = 'open'",
                )?
                .execute(params![
                    interval.request_id,
                    interval.interval_number,
                    now,
                    OBSERVATION_STEP_MS_MAX
                ])?;
        } else {
            tx.conn()
                .prepare_cached(
                    "UPDATE active_intervals SET status = 'closed'
                     WHERE request_id = ?1 AND interval_number = ?2 AND status = 'open'",
                )?
                .execute(key)?;
        }
    }
    for step in &seen.unobserved {
        // Read before this transaction: open only what still has no open interval.
        if connected(&step.session_id) && unobserved(tx.conn())?.contains(step) {
            open_interval(tx, step)?;
        }
    }
    Ok(())
}

/// The interval's turn is open and its step pending in a waiting, unpaused run.
fn still_served(conn: &Connection, interval: &OpenInterval) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) > 0 FROM active_intervals v
             JOIN workflow_turns t ON t.target_session_id = v.target_session_id AND t.turn_id = v.turn_id
             JOIN interactive_requests i ON i.request_id = v.request_id
             JOIN runs r ON r.run_id = v.run_id
             WHERE v.request_id = ?1 AND v.interval_number = ?2
               AND t.status = 'open' AND i.status = 'pending' AND r.status = 'waiting' AND r.paused = 0",
        )?
        .query_row(params![interval.request_id, interval.interval_number], |row| row.get(0))?)
}

/// Model time `request_id` used so far.
pub fn used_ms(conn: &Connection, request_id: &str) -> StoreResult<i64> {
    Ok(conn
        .prepare_cached("SELECT coalesce(sum(elapsed_ms), 0) FROM active_intervals WHERE request_id = ?1")?
        .query_row([request_id], |row| row.get(0))?)
}

/// A step whose time is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub run_id: String,
    pub request_id: String,
    pub attempt_id: String,
    /// `agent` / `assistant` (model time) or `checkpoint` / `decision` (wall clock).
    pub kind: String,
    pub timeout_ms: Option<i64>,
}

/// Pending steps of waiting, unpaused runs whose time is up at `now_ms`: an agent or
/// assistant step whose model time reached its `timeout_ms`, a checkpoint or decision whose
/// wall-clock `deadline_at` passed.
pub fn expired(conn: &Connection, now_ms: i64, limit: usize) -> StoreResult<Vec<Expired>> {
    let mut statement = conn.prepare_cached(EXPIRED_SQL)?;
    let rows = statement.query_map(params![now_ms, limit as i64], |row| {
        Ok(Expired {
            run_id: row.get(0)?,
            request_id: row.get(1)?,
            attempt_id: row.get(2)?,
            kind: row.get(3)?,
            timeout_ms: row.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Time the step out: its attempt and request become `timed_out` with a `timedOut` error
/// and the run is queued for the runner that follows its `$result.outcome` route (or ends
/// the run `timed_out`); a protected decision's default wins instead when it has one. The
/// server does this under a control claim of its own (generation + 1), taken and released in
/// the same transaction (`run_waits::Fence::Control`). Refused, changing nothing, when the
/// step is no longer what `expired` read — answered, paused — or a live claim is held.
pub fn time_out(tx: &WriteTx<'_>, step: &Expired) -> StoreResult<i64> {
    // A refusal can come after a write (the error blob, a decision's `expired_no_default`
    // resolution), and `time_out_due` goes on in the same transaction: roll the step back alone.
    tx.nested(|tx| time_out_step(tx, step))
}

fn time_out_step(tx: &WriteTx<'_>, step: &Expired) -> StoreResult<i64> {
    let message = match (step.kind.as_str(), step.timeout_ms) {
        ("agent" | "assistant", Some(ms)) => format!(
            "the step used its {} s of model time (reported Pi turns in a connected session) without an accepted result",
            ms / 1000
        ),
        _ => "the step's deadline passed without an answer".to_string(),
    };
    let error = serde_json::json!({ "code": "timedOut", "message": message });
    let error_hash = super::blobs::put_json(tx, &error, TIMEOUT_ERROR_BYTES_MAX)?;
    // A protected decision's default wins at its deadline; with none it times out.
    if step.kind == InteractionKind::Decision.as_str()
        && let Some(revision) = super::decisions::on_deadline(tx, step)?
    {
        return Ok(revision);
    }
    run_waits::end_waiting_step(
        tx,
        &step.run_id,
        &step.request_id,
        &step.attempt_id,
        WaitingEnd::TimedOut,
        &error_hash,
    )
}

/// Time out every step whose time is up now (at most `EXPIRED_BATCH_MAX`), in the caller's
/// transaction; a step that changed since the read (answered, paused) or whose run a live
/// claim holds is left alone, unchanged, for a later pass. Returns the runs queued to record
/// their timeouts.
pub fn time_out_due(tx: &WriteTx<'_>) -> StoreResult<Vec<String>> {
    let mut queued = Vec::new();
    for step in expired(tx.conn(), tx.now_ms(), EXPIRED_BATCH_MAX)? {
        match time_out(tx, &step) {
            Ok(_) => queued.push(step.run_id),
            // Answered or paused since the read, or claimed: its own transition wins.
            Err(
                StoreError::InvalidTransition { .. }
                | StoreError::ClaimHeld { .. }
                | StoreError::AttemptNotActive { .. },
            ) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(queued)
}

// Headless deadlines ------------------------------------------------------------------------

/// The earliest time a wall-clock rule can act: a pending checkpoint's or decision's
/// deadline (in a waiting, unpaused run), or a running step's deadline plus
/// `OVERDUE_GRACE_MS`. None when nothing has one. Model-time limits are not in it: model time
/// grows only while a turn is open, and the deadline task observes every tick then.
pub fn next_due_ms(conn: &Connection) -> StoreResult<Option<i64>> {
    Ok(conn
        .prepare_cached(NEXT_DUE_SQL)?
        .query_row(params![OVERDUE_GRACE_MS], |row| row.get(0))?)
}

/// A running step's own runner gets this long past the step's deadline to end it (its
/// timer fires at the deadline; stopping a Pi child takes a moment). Past it, the server
/// stops the runner and the reclaim records the step `timed_out`.
pub const OVERDUE_GRACE_MS: i64 = 5_000;
/// Overdue runs one look stops at most.
pub const OVERDUE_BATCH_MAX: usize = 64;

/// Runs whose running step (a headless agent step, which commits its wall-clock deadline
/// when it starts) is past its deadline by `OVERDUE_GRACE_MS` at `now_ms`.
pub fn overdue_runs(conn: &Connection, now_ms: i64, limit: usize) -> StoreResult<Vec<String>> {
    let mut statement = conn.prepare_cached(OVERDUE_SQL)?;
    let rows = statement.query_map(params![OVERDUE_GRACE_MS, now_ms, limit as i64], |row| row.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A reclaimed run's running step that is past its deadline by `OVERDUE_GRACE_MS` (its
/// runner was stopped for it, or the server was down past it) ends `timed_out` instead of
/// rerunning; one with an effect left to judge is not touched (the effect's contract decides
/// first). Returns the steps timed out.
pub(super) fn time_out_overdue(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<usize> {
    let error = serde_json::json!({
        "code": "timedOut",
        "message": "the step passed its deadline and its runner did not end it (its event loop may have been blocked); \
                    the server stopped the runner",
    });
    let error_hash = super::blobs::put_json(tx, &error, TIMEOUT_ERROR_BYTES_MAX)?;
    Ok(tx.conn().prepare_cached(TIME_OUT_OVERDUE_SQL)?.execute(params![
        error_hash,
        tx.now_ms(),
        run_id,
        OVERDUE_GRACE_MS
    ])?)
}

#[cfg(test)]
mod tests {
    use super::{EXPIRED_SQL, NEXT_DUE_SQL, OPEN_INTERVALS_SQL, OVERDUE_SQL, TIME_OUT_OVERDUE_SQL, UNOBSERVED_SQL};
    use crate::store::query_plans::assert_live_reads_only;

    #[test]
    fn the_deadline_looks_read_only_live_rows() {
        assert_live_reads_only(&[
            ("open intervals", OPEN_INTERVALS_SQL),
            ("unobserved steps", UNOBSERVED_SQL),
            ("expired steps", EXPIRED_SQL),
            ("next due", NEXT_DUE_SQL),
            ("overdue runs", OVERDUE_SQL),
            ("an overdue step's timeout", TIME_OUT_OVERDUE_SQL),
        ]);
    }
}
