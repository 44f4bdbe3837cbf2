//! Read-only checks and counts over the whole database: `state verify` and the counts of
//! `state status`. Never repairs anything.

use rusqlite::Connection;
use serde::Serialize;

use super::error::StoreResult;
use super::runs::session_reserved;

/// The spec's run-lifecycle invariants as queries that count violating rows.
pub const LIFECYCLE_INVARIANTS: &[(&str, &str)] = &[
    (
        "terminal queue row with a nonterminal run, or the reverse",
        "SELECT count(*) FROM runs r JOIN run_queue q ON q.run_id = r.run_id
         WHERE (q.status IN ('done', 'failed', 'cancelled'))
            != (r.status IN ('completed', 'failed', 'timed_out', 'cancelled'))",
    ),
    (
        "run-failure event while the run is not terminal",
        "SELECT count(*) FROM events e JOIN runs r ON r.run_id = e.run_id
         WHERE e.event_type IN ('run.failed', 'run.timed_out') AND r.status IN ('queued', 'running', 'waiting')",
    ),
    (
        "claim holder present exactly when the queue is starting or running",
        "SELECT count(*) FROM run_queue q
         LEFT JOIN leases l ON l.resource_type = 'run' AND l.resource_id = q.run_id
         WHERE (l.owner_type IS NOT NULL) != (q.status IN ('starting', 'running'))",
    ),
    (
        "run/queue pair outside the lifecycle table",
        "SELECT count(*) FROM runs r JOIN run_queue q ON q.run_id = r.run_id WHERE NOT (
           (r.status = 'queued' AND q.status = 'queued' AND r.paused = 0) OR
           (r.status = 'queued' AND q.status = 'parked' AND r.paused = 1) OR
           (r.status = 'running' AND q.status IN ('starting', 'running') AND r.paused = 0) OR
           (r.status = 'running' AND q.status = 'parked') OR
           (r.status = 'waiting' AND q.status = 'parked') OR
           (r.status = 'completed' AND q.status = 'done' AND r.paused = 0) OR
           (r.status IN ('failed', 'timed_out') AND q.status = 'failed' AND r.paused = 0) OR
           (r.status = 'cancelled' AND q.status = 'cancelled' AND r.paused = 0))",
    ),
    (
        "run revision without exactly one event and one viewer delta per revision",
        "SELECT count(*) FROM runs r
         WHERE r.revision != (SELECT count(*) FROM events e WHERE e.run_id = r.run_id)
            OR r.revision != (SELECT max(resource_revision) FROM events e WHERE e.run_id = r.run_id)
            OR r.revision != (SELECT count(*) FROM viewer_deltas d WHERE d.run_id = r.run_id)",
    ),
    (
        "run presentation changes that differ from the sum of their parts",
        "SELECT count(*) FROM runs r WHERE r.presentation_changes !=
           coalesce((SELECT sum(1 + (w.ready_at IS NOT NULL) + (w.finished_at IS NOT NULL) + w.liveness_changes)
                     FROM run_workers w WHERE w.run_id = r.run_id), 0)
           + coalesce((SELECT sum((SELECT max(u.update_seq) FROM interaction_updates u WHERE u.request_id = i.request_id))
                       FROM interactive_requests i WHERE i.run_id = r.run_id), 0)
           + coalesce((SELECT s.change_number FROM run_settings s WHERE s.run_id = r.run_id), 0)
           + coalesce((SELECT count(*) + count(t.ended_at) FROM workflow_turns t WHERE t.run_id = r.run_id), 0)",
    ),
    (
        "run attempt counts that differ from its node attempts",
        "SELECT count(*) FROM runs r
         WHERE r.attempt_count != (SELECT count(*) FROM node_attempts a WHERE a.run_id = r.run_id)
            OR r.completed_attempt_count != (SELECT count(*) FROM node_attempts a
                                             WHERE a.run_id = r.run_id AND a.status = 'completed')",
    ),
    (
        "unfinished node attempt on a terminal run",
        "SELECT count(*) FROM node_attempts a JOIN runs r ON r.run_id = a.run_id
         WHERE a.status IN ('running', 'waiting') AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled')",
    ),
    (
        "running node attempt on a run that is not running",
        "SELECT count(*) FROM node_attempts a JOIN runs r ON r.run_id = a.run_id
         WHERE a.status = 'running' AND r.status != 'running'",
    ),
    (
        "pending interactive request on a terminal run",
        "SELECT count(*) FROM interactive_requests i JOIN runs r ON r.run_id = i.run_id
         WHERE i.status = 'pending' AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled')",
    ),
    (
        "more than one open origin-session turn in a session",
        "SELECT count(*) FROM (SELECT target_session_id FROM workflow_turns WHERE status = 'open'
                               GROUP BY target_session_id HAVING count(*) > 1)",
    ),
    (
        "turn whose message belongs to another session or run, or never opens a turn",
        "SELECT count(*) FROM workflow_turns t JOIN workflow_messages m ON m.workflow_message_id = t.workflow_message_id
         WHERE m.target_session_id != t.target_session_id OR m.run_id != t.run_id
            OR m.kind IN ('decision', 'notification') OR m.status != 'sent'",
    ),
    (
        "open step turn on a terminal run",
        "SELECT count(*) FROM workflow_turns t JOIN workflow_messages m ON m.workflow_message_id = t.workflow_message_id
         JOIN runs r ON r.run_id = t.run_id
         WHERE t.status = 'open' AND m.kind = 'step' AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled')",
    ),
    (
        "workflow message for a session that is not its run's origin session",
        "SELECT count(*) FROM workflow_messages m LEFT JOIN run_bindings b ON b.run_id = m.run_id
         WHERE b.origin_session_id IS NULL OR b.origin_session_id != m.target_session_id",
    ),
    (
        "more than one pending step message for one request",
        "SELECT count(*) FROM (SELECT source_id FROM workflow_messages WHERE kind = 'step' AND status = 'pending'
                               GROUP BY source_id HAVING count(*) > 1)",
    ),
    (
        "pending step or decision message on a terminal run",
        "SELECT count(*) FROM workflow_messages m JOIN runs r ON r.run_id = m.run_id
         WHERE m.status = 'pending' AND m.kind IN ('step', 'decision')
           AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled')",
    ),
    (
        // The bound is `turns::UNPRODUCTIVE_REMINDERS_MAX`: the next end fails the step.
        "pending request past the unproductive-turn bound",
        "SELECT count(*) FROM interactive_requests WHERE status = 'pending' AND unproductive_turn_ends > 2",
    ),
    (
        "more than one active interactive run in a session",
        concat!(
            "SELECT count(*) FROM (SELECT origin_session_id FROM run_queue WHERE origin_session_id IS NOT NULL AND ",
            session_reserved!(),
            " GROUP BY origin_session_id HAVING count(*) > 1)"
        ),
    ),
    (
        "cleared terminal view naming a run of another session",
        "SELECT count(*) FROM session_views v LEFT JOIN run_bindings b ON b.run_id = v.cleared_run_id
         WHERE b.origin_session_id IS NULL OR b.origin_session_id != v.target_session_id",
    ),
    (
        "run settings whose versions are not numbered 0 to the current change without a gap",
        "SELECT count(*) FROM run_settings s
         WHERE s.change_number + 1 != (SELECT count(*) FROM run_setting_changes c WHERE c.run_id = s.run_id)
            OR s.change_number != (SELECT max(change_number) FROM run_setting_changes c WHERE c.run_id = s.run_id)",
    ),
    (
        "node attempt naming a settings version its run does not have",
        "SELECT count(*) FROM node_attempts a LEFT JOIN run_settings s ON s.run_id = a.run_id
         WHERE (a.settings_change_number IS NULL) != (s.run_id IS NULL)
            OR a.settings_change_number > s.change_number",
    ),
    (
        "protected decision whose request and resolution disagree (pending and resolved, or closed and unresolved)",
        "SELECT count(*) FROM human_decisions d JOIN interactive_requests i ON i.request_id = d.decision_id
         WHERE (i.status = 'pending') = EXISTS
           (SELECT 1 FROM human_decision_resolutions r WHERE r.decision_id = d.decision_id)",
    ),
    (
        "decision request without its decision record, or a decision record of another kind of request",
        "SELECT count(*) FROM interactive_requests i
         WHERE (i.kind = 'decision') != EXISTS (SELECT 1 FROM human_decisions d WHERE d.decision_id = i.request_id)",
    ),
];

/// One invariant that some rows violate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: &'static str,
    pub rows: i64,
}

/// Lifecycle invariants that do not hold, with their violating row counts.
pub fn lifecycle_violations(conn: &Connection) -> StoreResult<Vec<Violation>> {
    let mut violations = Vec::new();
    for (invariant, sql) in LIFECYCLE_INVARIANTS {
        let rows: i64 = conn.prepare_cached(sql)?.query_row([], |row| row.get(0))?;
        if rows != 0 {
            violations.push(Violation { invariant, rows });
        }
    }
    Ok(violations)
}

/// What `state verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// `ok`, or the first problems SQLite's integrity check reported.
    pub integrity: Vec<String>,
    pub foreign_key_violations: i64,
    pub violations: Vec<Violation>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.integrity == ["ok"] && self.foreign_key_violations == 0 && self.violations.is_empty()
    }
}

/// Integrity messages reported at most (SQLite can list thousands).
const INTEGRITY_MESSAGES_MAX: usize = 20;

pub fn verify(conn: &Connection) -> StoreResult<VerifyReport> {
    let integrity = conn
        .prepare(&format!("PRAGMA integrity_check({INTEGRITY_MESSAGES_MAX})"))?
        .query_map([], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    let foreign_key_violations: i64 =
        conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| row.get(0))?;
    Ok(VerifyReport {
        integrity,
        foreign_key_violations,
        violations: lifecycle_violations(conn)?,
    })
}

/// The counts `server status` reports (spec "Status and privacy"). Counts only: no IDs,
/// paths or payloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateCounts {
    pub queued: i64,
    pub running: i64,
    pub parked: i64,
    pub waiting: i64,
    pub paused: i64,
    pub terminal: i64,
    pub expired_claims: i64,
    pub pending_interactions: i64,
    pub ambiguous_effects: i64,
}

pub fn state_counts(conn: &Connection, now_ms: i64) -> StoreResult<StateCounts> {
    let count = |sql: &str| -> StoreResult<i64> { Ok(conn.prepare_cached(sql)?.query_row([], |row| row.get(0))?) };
    Ok(StateCounts {
        queued: count("SELECT count(*) FROM run_queue WHERE status = 'queued'")?,
        running: count("SELECT count(*) FROM run_queue WHERE status IN ('starting', 'running')")?,
        parked: count(
            "SELECT count(*) FROM run_queue q JOIN runs r ON r.run_id = q.run_id
             WHERE q.status = 'parked' AND r.status != 'waiting'",
        )?,
        waiting: count("SELECT count(*) FROM runs WHERE status = 'waiting'")?,
        paused: count("SELECT count(*) FROM runs WHERE paused = 1")?,
        terminal: count("SELECT count(*) FROM run_queue WHERE status IN ('done', 'failed', 'cancelled')")?,
        expired_claims: conn
            .prepare_cached("SELECT count(*) FROM leases WHERE owner_type IS NOT NULL AND expires_at <= ?1")?
            .query_row([now_ms], |row| row.get(0))?,
        pending_interactions: count("SELECT count(*) FROM interactive_requests WHERE status = 'pending'")?,
        ambiguous_effects: count("SELECT count(*) FROM effects WHERE status = 'ambiguous'")?,
    })
}

/// Work that needs a live server: admitted or running runs, waits with a wall-clock deadline
/// (a checkpoint's or decision's: scheduled work the server must be up to time out),
/// unsettled effects, decisions presented on an external channel (open, or not yet closed
/// there) and validating submissions. An idle server may exit only when this is
/// 0. An agent step's budget is model time, which passes only while a Pi session is
/// connected (and a connection keeps the server up anyway), so it keeps nothing alive.
pub fn unsettled_work(conn: &Connection) -> StoreResult<i64> {
    Ok(conn
        .prepare_cached(UNSETTLED_WORK_SQL)?
        .query_row([], |row| row.get(0))?)
}

/// `unsettled_work`'s count: each part through a key or a partial index of live rows (tested),
/// since an idle server without clients looks every few seconds.
const UNSETTLED_WORK_SQL: &str = "SELECT
        (SELECT count(*) FROM run_queue q JOIN runs r ON r.run_id = q.run_id
           WHERE q.status IN ('queued', 'starting', 'running') AND r.paused = 0)
      + (SELECT count(*) FROM interactive_requests i
           JOIN node_attempts a ON a.attempt_id = i.attempt_id
           JOIN runs r ON r.run_id = i.run_id
           WHERE i.status = 'pending' AND i.kind IN ('checkpoint', 'decision')
             AND a.status = 'waiting' AND a.deadline_at IS NOT NULL AND r.paused = 0)
      + (SELECT count(*) FROM effects WHERE status = 'pending')
      + (SELECT count(*) FROM effects WHERE status = 'applying')
      + (SELECT count(*) FROM channel_messages WHERE state = 'pending')
      + (SELECT count(*) FROM channel_messages WHERE state = 'presented')
      + (SELECT count(*) FROM interactive_submissions WHERE outcome = 'validating')";

#[cfg(test)]
mod tests {
    use super::UNSETTLED_WORK_SQL;
    use crate::store::query_plans::assert_live_reads_only;

    #[test]
    fn the_idle_check_reads_only_live_rows() {
        assert_live_reads_only(&[("unsettled work", UNSETTLED_WORK_SQL)]);
    }
}
