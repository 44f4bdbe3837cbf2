//! Which runs a commit changed, so a live view of one run sleeps through other runs' commits.
//!
//! Every change a run's view shows moves its row in `runs` (its revision or its
//! `presentation_changes`, `store::presentation`), and its removal deletes that row. SQLite's
//! update hook on the writer's connection names the row of every such change; after a commit
//! the writer stamps a slot per changed row and wakes whoever waits on that slot, and only
//! then moves the commit counter. A view that took its run's stamp before it last read the
//! run waits on its slot alone (`wait_changed`): other runs' commits neither wake it nor cost
//! it a read. Why: with every live view woken by every commit, 100 watched finished runs cost
//! each new run ~1 ms more of the server's CPU (docs/PERFORMANCE.md, thirty-second round).
//!
//! Slots are shared by rows (`RUN_NEWS_SLOTS`): two runs in one slot wake each other, which
//! costs a read and nothing else. A batch that changed more rows than it records
//! (`RUN_NEWS_ROWS_MAX`, a retention sweep) stamps and wakes every slot at once.
//!
//! Architecture Invariant: a stamp may move when its run did not change, never stay put when
//! it did: a false "changed" costs a read, a false "unchanged" would leave a watcher on a
//! stale view. So the rows of a job rolled back inside a committed batch still stamp, and a
//! view that does not know its run's row yet reads after every commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use rusqlite::hooks::Action;
use tokio::sync::Notify;

use super::error::StoreResult;

/// Slots the rows of `runs` share (a power of two: a row's slot is its low bits).
pub const RUN_NEWS_SLOTS: usize = 1_024;
/// Changed rows of `runs` one batch records one by one; past this it stamps every slot.
pub const RUN_NEWS_ROWS_MAX: usize = 256;

const _: () = assert!(RUN_NEWS_SLOTS.is_power_of_two());
const _: () = assert!(RUN_NEWS_ROWS_MAX < RUN_NEWS_SLOTS);

/// A run's row in `runs` (its SQLite rowid): what the writer's hook names. Stable while the
/// run exists (the schema vacuums only incrementally, which moves pages, never rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRow(pub i64);

/// A run's stamp at one moment: unchanged until a commit that may have changed the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStamp {
    slot: u64,
    everything: u64,
}

/// One slot's stamp and its waiters.
#[derive(Debug, Default)]
struct Slot {
    stamp: AtomicU64,
    waiters: Notify,
}

/// The stamps, shared by the writer (which moves them) and the views (which read them).
#[derive(Debug)]
pub struct RunNews {
    slots: Box<[Slot]>,
    /// Moves when a batch changed too many rows to name: every run's stamp moves with it.
    everything: AtomicU64,
}

impl RunNews {
    pub fn new() -> Self {
        Self {
            slots: (0..RUN_NEWS_SLOTS).map(|_| Slot::default()).collect(),
            everything: AtomicU64::new(0),
        }
    }

    /// `row`'s stamp now. Take it before reading the run: a commit after the read moves it.
    pub fn stamp(&self, row: RunRow) -> RunStamp {
        RunStamp {
            slot: self.slots[slot_of(row)].stamp.load(Ordering::SeqCst),
            everything: self.everything.load(Ordering::SeqCst),
        }
    }

    /// Whether a commit since `stamp` was taken may have changed `row`'s run.
    pub fn changed_since(&self, row: RunRow, stamp: RunStamp) -> bool {
        self.stamp(row) != stamp
    }

    /// Wait until a commit since `stamp` may have changed `row`'s run (at once if one did).
    pub async fn wait_changed(&self, row: RunRow, stamp: RunStamp) {
        let waiters = &self.slots[slot_of(row)].waiters;
        loop {
            // Registered before the check: a stamp moved after the check wakes this wait.
            let woken = waiters.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.changed_since(row, stamp) {
                return;
            }
            woken.await;
        }
    }

    /// Stamp what one committed batch changed and wake its waiters (the writer, before it
    /// moves the commit counter).
    fn publish(&self, changed: &ChangedRows) {
        if changed.overflowed {
            self.everything.fetch_add(1, Ordering::SeqCst);
            for slot in &self.slots {
                slot.waiters.notify_waiters();
            }
            return;
        }
        for row in &changed.rows {
            let slot = &self.slots[slot_of(RunRow(*row))];
            slot.stamp.fetch_add(1, Ordering::SeqCst);
            slot.waiters.notify_waiters();
        }
    }
}

impl Default for RunNews {
    fn default() -> Self {
        Self::new()
    }
}

fn slot_of(row: RunRow) -> usize {
    (row.0 as u64 as usize) & (RUN_NEWS_SLOTS - 1)
}

/// Rows of `runs` changed by the writer's current batch (bounded).
#[derive(Debug, Default)]
struct ChangedRows {
    rows: Vec<i64>,
    overflowed: bool,
}

impl ChangedRows {
    fn note(&mut self, row: i64) {
        if self.overflowed || self.rows.contains(&row) {
            return;
        }
        if self.rows.len() == RUN_NEWS_ROWS_MAX {
            self.overflowed = true;
            self.rows.clear();
            return;
        }
        self.rows.push(row);
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.overflowed = false;
    }
}

/// The writer's side: the hook's record of the batch in progress, and the stamps it moves.
pub(super) struct NewsRecorder {
    changed: Arc<Mutex<ChangedRows>>,
    news: Arc<RunNews>,
}

impl NewsRecorder {
    /// Record every change of a `runs` row on `conn` (the writer's connection) from now on.
    pub(super) fn install(conn: &mut Connection, news: Arc<RunNews>) -> StoreResult<Self> {
        let changed = Arc::new(Mutex::new(ChangedRows::default()));
        let noted = Arc::clone(&changed);
        conn.update_hook(Some(move |_action: Action, db: &str, table: &str, row: i64| {
            if table == "runs" && db == "main" {
                noted.lock().unwrap_or_else(PoisonError::into_inner).note(row);
            }
        }))?;
        Ok(Self { changed, news })
    }

    /// After a batch ended: stamp what it changed if it committed, and start the next one
    /// empty. A batch that rolled back changed nothing durable, so it stamps nothing.
    pub(super) fn batch_ended(&self, committed: bool) {
        let mut changed = self.changed.lock().unwrap_or_else(PoisonError::into_inner);
        if committed {
            self.news.publish(&changed);
        }
        changed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_change_moves_its_stamp_and_no_other_slot() {
        let news = RunNews::new();
        let (row, other) = (RunRow(7), RunRow(8));
        let (before, other_before) = (news.stamp(row), news.stamp(other));
        let mut changed = ChangedRows::default();
        changed.note(7);
        news.publish(&changed);
        assert!(news.changed_since(row, before));
        assert!(!news.changed_since(other, other_before));
    }

    #[test]
    fn rows_sharing_a_slot_wake_each_other() {
        let news = RunNews::new();
        let (row, sharer) = (RunRow(3), RunRow(3 + RUN_NEWS_SLOTS as i64));
        let before = news.stamp(sharer);
        let mut changed = ChangedRows::default();
        changed.note(row.0);
        news.publish(&changed);
        assert!(news.changed_since(sharer, before));
    }

    #[test]
    fn too_many_rows_move_every_stamp() {
        let news = RunNews::new();
        let untouched = RunRow(RUN_NEWS_SLOTS as i64 - 1);
        let before = news.stamp(untouched);
        let mut changed = ChangedRows::default();
        for row in 0..=RUN_NEWS_ROWS_MAX as i64 {
            changed.note(row);
        }
        assert!(
            changed.overflowed && changed.rows.is_empty(),
            "the record stays bounded"
        );
        news.publish(&changed);
        assert!(news.changed_since(untouched, before));
    }

    #[tokio::test]
    async fn a_wait_ends_with_its_runs_change_only() {
        let news = Arc::new(RunNews::new());
        let (row, other) = (RunRow(5), RunRow(6));
        let stamp = news.stamp(row);
        let waiting = tokio::spawn({
            let news = Arc::clone(&news);
            async move { news.wait_changed(row, stamp).await }
        });
        let mut changed = ChangedRows::default();
        changed.note(other.0);
        news.publish(&changed);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "another run's commit does not end the wait");
        changed.clear();
        changed.note(row.0);
        news.publish(&changed);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the run's own commit ends the wait")
            .unwrap();
        // A stamp that already moved: no wait at all.
        news.wait_changed(row, stamp).await;
    }

    #[test]
    fn the_hook_names_changed_runs_and_only_committed_batches_stamp() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE runs (run_id TEXT PRIMARY KEY, revision INTEGER); CREATE TABLE other (x);")
            .unwrap();
        let news = Arc::new(RunNews::new());
        let recorder = NewsRecorder::install(&mut conn, Arc::clone(&news)).unwrap();
        conn.execute("INSERT INTO runs VALUES ('a', 1)", []).unwrap();
        recorder.batch_ended(true);
        let row = RunRow(
            conn.query_row("SELECT rowid FROM runs WHERE run_id = 'a'", [], |r| r.get(0))
                .unwrap(),
        );
        let before = news.stamp(row);
        conn.execute("INSERT INTO other VALUES (1)", []).unwrap();
        recorder.batch_ended(true);
        assert!(
            !news.changed_since(row, before),
            "another table's rows are not a run's news"
        );
        conn.execute("UPDATE runs SET revision = 2 WHERE run_id = 'a'", [])
            .unwrap();
        recorder.batch_ended(false);
        assert!(!news.changed_since(row, before), "a rolled-back batch stamps nothing");
        conn.execute("UPDATE runs SET revision = 3 WHERE run_id = 'a'", [])
            .unwrap();
        recorder.batch_ended(true);
        assert!(news.changed_since(row, before));
        let after_update = news.stamp(row);
        conn.execute("DELETE FROM runs WHERE run_id = 'a'", []).unwrap();
        recorder.batch_ended(true);
        assert!(news.changed_since(row, after_update), "a run's removal is news too");
    }
}
