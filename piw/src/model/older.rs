//! Older items the view does not inline, read newest first with `view.page` on demand: the
//! settings changes before the settings page's first page, and a pending step's updates
//! beyond the view's newest 20. One page request at a time; a failed read is the section's
//! error, and the next request tries again.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::view::{PendingRequest, StepUpdate};

/// Updates a run view inlines per request (docs/VIEWS.md): a full window may have older ones.
pub const VIEW_UPDATES_MAX: usize = 20;

/// Pages read after the first answer (settings page) or the view (updates).
#[derive(Debug, Clone, Default)]
pub struct OlderPages {
    /// Items of the older pages, in the order the server sent them (newest first).
    pub items: Vec<Value>,
    /// Where the next older page starts (`before`); `None` when nothing older remains.
    pub next_before: Option<i64>,
    /// A page request is on its way.
    pub loading: bool,
    /// Why the last page could not be read.
    pub error: Option<String>,
}

impl OlderPages {
    /// Start over at `next_before` (a new first page or a new request).
    pub fn reset(next_before: Option<i64>) -> Self {
        Self {
            next_before,
            ..Self::default()
        }
    }

    /// The `before` of the next page to ask for, marking it as asked; `None` when nothing
    /// older remains or a request is on its way.
    pub fn take_next(&mut self) -> Option<i64> {
        if self.loading {
            return None;
        }
        let before = self.next_before?;
        self.loading = true;
        self.error = None;
        Some(before)
    }

    /// A page answered: its items follow the ones held. An answer nobody waits for any
    /// more (the first page was read again meanwhile) is dropped.
    pub fn finish(&mut self, page: Result<(Vec<Value>, Option<i64>), String>) {
        if !std::mem::take(&mut self.loading) {
            return;
        }
        match page {
            Ok((items, next_before)) => {
                self.items.extend(items);
                self.next_before = next_before;
            }
            Err(err) => self.error = Some(err),
        }
    }

    /// Whether older items remain to be read.
    pub fn has_more(&self) -> bool {
        self.next_before.is_some()
    }
}

/// The pending request's step updates seen so far: the latest value per type and key, from
/// every view and every older page (an update that slides out of the view's window stays).
#[derive(Debug, Clone, Default)]
pub struct StepUpdates {
    /// The request these belong to; a new request starts over.
    pub request_id: Option<String>,
    latest: HashMap<(String, String), StepUpdate>,
    pub pages: OlderPages,
}

impl StepUpdates {
    /// Take in the view's pending request (or its absence).
    pub fn see_view(&mut self, request: Option<&PendingRequest>) {
        let id = request.map(|request| request.request_id.clone());
        if id != self.request_id {
            *self = Self::default();
            self.request_id = id;
            // A full window may hide older updates: they are read from its oldest on.
            if let Some(request) = request.filter(|r| r.updates.len() >= VIEW_UPDATES_MAX) {
                self.pages = OlderPages::reset(request.updates.iter().map(|u| u.seq).min());
            }
        }
        for update in request.into_iter().flat_map(|request| &request.updates) {
            self.keep(update.clone());
        }
    }

    /// An older page of this request answered.
    pub fn finish(&mut self, page: Result<(Vec<Value>, Option<i64>), String>) {
        self.pages.finish(page);
        for item in std::mem::take(&mut self.pages.items) {
            if let Ok(update) = StepUpdate::deserialize(&item) {
                self.keep(update);
            }
        }
    }

    fn keep(&mut self, update: StepUpdate) {
        let key = (update.update_type.clone(), update.key.clone());
        match self.latest.get(&key) {
            Some(held) if held.seq >= update.seq => {}
            _ => {
                self.latest.insert(key, update);
            }
        }
    }

    /// Every update seen, newest first.
    pub fn newest_first(&self) -> Vec<&StepUpdate> {
        let mut updates: Vec<&StepUpdate> = self.latest.values().collect();
        updates.sort_by_key(|update| std::cmp::Reverse(update.seq));
        updates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_page_at_a_time_and_none_after_the_last() {
        let mut pages = OlderPages::reset(Some(30));
        assert_eq!(pages.take_next(), Some(30));
        assert_eq!(pages.take_next(), None, "one request at a time");
        pages.finish(Ok((vec![json!({"seq": 29})], None)));
        assert_eq!(pages.items.len(), 1);
        assert!(!pages.has_more());
        assert_eq!(pages.take_next(), None);
    }

    fn request(id: &str, seqs: std::ops::RangeInclusive<i64>) -> PendingRequest {
        let updates = seqs
            .rev()
            .map(|seq| StepUpdate {
                update_type: "log".into(),
                key: format!("k{seq}"),
                seq,
                ..StepUpdate::default()
            })
            .collect();
        PendingRequest {
            request_id: id.into(),
            updates,
            ..PendingRequest::default()
        }
    }

    #[test]
    fn a_full_view_window_pages_older_updates_and_keeps_what_slid_out() {
        let mut updates = StepUpdates::default();
        updates.see_view(Some(&request("q1", 11..=30)));
        assert_eq!(updates.pages.take_next(), Some(11));
        updates.finish(Ok((vec![json!({"type": "log", "key": "k10", "seq": 10})], None)));
        // A newer update pushes seq 11 out of the view's window; it stays seen.
        updates.see_view(Some(&request("q1", 12..=31)));
        let seqs: Vec<i64> = updates.newest_first().iter().map(|u| u.seq).collect();
        assert_eq!(seqs, (10..=31).rev().collect::<Vec<_>>());
        assert!(!updates.pages.has_more());
        // Another request starts over; a short window has nothing older.
        updates.see_view(Some(&request("q2", 1..=3)));
        assert_eq!(updates.newest_first().len(), 3);
        assert!(!updates.pages.has_more());
    }

    #[test]
    fn a_failed_page_keeps_its_cursor_for_the_next_try() {
        let mut pages = OlderPages::reset(Some(30));
        pages.take_next();
        pages.finish(Err("not connected".into()));
        assert_eq!(pages.error.as_deref(), Some("not connected"));
        assert_eq!(pages.take_next(), Some(30));
        assert_eq!(pages.error, None);
    }
}
