//! Figures from the store's timestamps: runner starts, `run.start` → first node and its
//! phases, where a sequential run's wall goes.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

use super::percentile;

/// Runner processes: record → `runner.ready`, from `run_workers` (ms).
pub(crate) fn runner_starts(state: &Path) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement =
        db.prepare("SELECT ready_at - started_at FROM run_workers WHERE ready_at IS NOT NULL ORDER BY started_at")?;
    let starts: Vec<f64> = statement
        .query_map([], |row| row.get::<_, i64>(0))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|ms| ms as f64)
        .collect();
    Ok(json!({"epochs": starts.len(), "p50_ms": percentile(&starts, 0.5), "p99_ms": percentile(&starts, 0.99)}))
}

/// Whether `run_id` is one of `only` (every run without a filter).
fn selected(only: Option<&[String]>, run_id: &str) -> bool {
    only.is_none_or(|ids| ids.iter().any(|id| id == run_id))
}

/// `run.start` accepted (the run's creation) → its first node committed (ms), over every run
/// or over `only`.
pub(crate) fn start_to_first_node(state: &Path, only: Option<&[String]>) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement = db.prepare(
        "SELECT r.run_id, (SELECT min(e.created_at) FROM events e WHERE e.run_id = r.run_id AND e.event_type = 'node.finished')
                - r.created_at
         FROM runs r",
    )?;
    let samples: Vec<f64> = statement
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<i64>>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|(run_id, _)| selected(only, run_id))
        .filter_map(|(_, ms)| ms)
        .map(|ms| ms as f64)
        .collect();
    Ok(json!({"runs": samples.len(), "p50_ms": percentile(&samples, 0.5), "p99_ms": percentile(&samples, 0.99)}))
}

/// The wall clock now, in ms since the epoch (the store's timestamps are on the same clock).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// From the client sending `run.start` (its resolve included) to the first node committed,
/// over `runs` sent at `sent_ms` (the same clock as the store's timestamps).
pub(crate) fn request_to_first_node(state: &Path, runs: &[String], sent_ms: &[i64]) -> anyhow::Result<Value> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement =
        db.prepare("SELECT min(created_at) FROM events WHERE run_id = ?1 AND event_type = 'node.finished'")?;
    let mut samples = Vec::new();
    for (run_id, sent) in runs.iter().zip(sent_ms) {
        if let Some(first) = statement.query_row([run_id], |row| row.get::<_, Option<i64>>(0))? {
            samples.push((first - sent) as f64);
        }
    }
    Ok(json!({"runs": samples.len(), "p50_ms": percentile(&samples, 0.5), "p99_ms": percentile(&samples, 0.99)}))
}

/// One run's timestamps in the store (whole ms), for a run with exactly one runner epoch:
/// created, runner epoch recorded, `runner.ready`, first node committed, the end committed.
struct StoreMarks {
    created: i64,
    epoch: i64,
    ready: Option<i64>,
    first_node: Option<i64>,
    finished: Option<i64>,
}

/// The store's timestamps of every run that had one runner epoch, by run ID.
fn store_marks(state: &Path) -> anyhow::Result<HashMap<String, StoreMarks>> {
    let db = Connection::open_with_flags(state.join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut statement = db.prepare(
        "SELECT r.run_id, r.created_at, w.started_at, w.ready_at,
                (SELECT min(e.created_at) FROM events e WHERE e.run_id = r.run_id AND e.event_type = 'node.finished'),
                r.finished_at
         FROM runs r JOIN run_workers w ON w.run_id = r.run_id
         WHERE (SELECT count(*) FROM run_workers o WHERE o.run_id = r.run_id) = 1",
    )?;
    let marks = statement
        .query_map([], |row| {
            let marks = StoreMarks {
                created: row.get(1)?,
                epoch: row.get(2)?,
                ready: row.get(3)?,
                first_node: row.get(4)?,
                finished: row.get(5)?,
            };
            Ok((row.get::<_, String>(0)?, marks))
        })?
        .collect::<Result<HashMap<_, _>, _>>()?;
    Ok(marks)
}

/// Where `run.start` → first node goes, per run with one runner (ms, p50 of each phase, from
/// the store's millisecond timestamps): created → runner epoch recorded (queue and
/// admission), → `runner.ready` (take or spawn, the workflow's load and source check), →
/// first node committed (first command and the node). Over every ready run or over `only`.
pub(crate) fn phases(state: &Path, only: Option<&[String]>) -> anyhow::Result<Value> {
    let marks = store_marks(state)?;
    let (mut admit, mut launch, mut first) = (Vec::new(), Vec::new(), Vec::new());
    for (_, run) in marks.iter().filter(|(run_id, _)| selected(only, run_id)) {
        let Some(ready) = run.ready else { continue };
        admit.push((run.epoch - run.created) as f64);
        launch.push((ready - run.epoch) as f64);
        first.extend(run.first_node.map(|first_node| (first_node - ready) as f64));
    }
    Ok(json!({
        "runs": admit.len(),
        "queue_admit_p50_ms": percentile(&admit, 0.5),
        "launch_to_ready_p50_ms": percentile(&launch, 0.5),
        "ready_to_first_node_p50_ms": percentile(&first, 0.5),
    }))
}

/// When a client sent a run's `run.start` and saw its end (ms since the epoch, the store's clock).
pub(crate) struct ClientMarks {
    pub(crate) run_id: String,
    pub(crate) sent_ms: i64,
    pub(crate) seen_ms: i64,
}

/// Where a sequential run's wall goes, p50 of each step (ms; the store's timestamps are whole
/// ms): sent → created (the resolve and the request's checks), → runner epoch recorded (queue
/// and admission), → `runner.ready`, → first node committed, → the run's end committed, → the
/// client saw it. Runs with more than one runner epoch are left out.
pub(crate) fn timeline(state: &Path, marks: &[ClientMarks]) -> anyhow::Result<Value> {
    let stored = store_marks(state)?;
    let mut steps: [Vec<f64>; 6] = Default::default();
    for mark in marks {
        let Some(run) = stored.get(&mark.run_id) else { continue };
        let (Some(ready), Some(first_node), Some(finished)) = (run.ready, run.first_node, run.finished) else {
            continue;
        };
        let points = [
            mark.sent_ms,
            run.created,
            run.epoch,
            ready,
            first_node,
            finished,
            mark.seen_ms,
        ];
        for (step, pair) in steps.iter_mut().zip(points.windows(2)) {
            step.push((pair[1] - pair[0]) as f64);
        }
    }
    let p50 = |index: usize| percentile(&steps[index], 0.5);
    Ok(json!({
        "runs": steps[0].len(),
        "sent_to_created_p50_ms": p50(0),
        "queue_admit_p50_ms": p50(1),
        "launch_to_ready_p50_ms": p50(2),
        "ready_to_first_node_p50_ms": p50(3),
        "first_node_to_end_p50_ms": p50(4),
        "end_to_seen_p50_ms": p50(5),
    }))
}
