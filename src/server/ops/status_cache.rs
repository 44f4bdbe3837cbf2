//! Plain `run.status` answers kept while the store has not changed: a client polling a run
//! between its commits gets the answer read after the last one, without a read transaction
//! (after every commit a read fetches each of its pages again).
//!
//! Exact, not merely recent: an answer is kept under the store's data version read before
//! its read transaction began (`Store::data_version`, which moves with every commit that
//! changed rows, before the commit's writers are answered), and served only while that
//! version is current. Nothing a summary shows depends on the clock.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::protocol::JsonObject;

/// Runs whose plain status is kept at once; all of them are dropped at the next change.
pub const STATUS_CACHE_RUNS_MAX: usize = 256;

#[derive(Default)]
pub struct StatusCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The data version every kept answer was read under.
    data_version: u64,
    answers: HashMap<String, JsonObject>,
}

impl StatusCache {
    /// The answer kept for `run_id` when the store is still at `data_version`.
    pub fn get(&self, run_id: &str, data_version: u64) -> Option<JsonObject> {
        let kept = self.lock();
        if kept.data_version != data_version {
            return None;
        }
        kept.answers.get(run_id).cloned()
    }

    /// Keep `answer`, read in a transaction that began after the store was at `data_version`.
    /// An answer read under an older version than the kept ones is not kept: it may predate
    /// their change.
    pub fn put(&self, run_id: &str, data_version: u64, answer: &JsonObject) {
        let mut kept = self.lock();
        if data_version < kept.data_version {
            return;
        }
        if data_version > kept.data_version {
            kept.answers.clear();
            kept.data_version = data_version;
        }
        if kept.answers.len() >= STATUS_CACHE_RUNS_MAX && !kept.answers.contains_key(run_id) {
            return;
        }
        kept.answers.insert(run_id.to_string(), answer.clone());
        debug_assert!(kept.answers.len() <= STATUS_CACHE_RUNS_MAX);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
