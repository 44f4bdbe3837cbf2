//! Live feeds: one task per watched run (and one for the run list) rebuilds the view after
//! commits and publishes the newest one in a `watch` channel. Subscribers of one run share
//! one build per revision; a slow subscriber only ever sees the latest (coalesced) value, so
//! it can never slow the feed or another subscriber.
//!
//! Architecture Invariant: a feed only reads (plus storing the content its view names); it
//! ends when its last subscriber leaves.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::blocking;
use super::context::ServerContext;
use super::views;
use crate::protocol::JsonObject;
use crate::store::run_view;

/// Views a run feed keeps for reconnecting subscribers (a retained revision gets a patch).
pub const RETAINED_REVISIONS_MAX: usize = 16;
/// A feed rebuilds at most this often; commits in between are coalesced.
pub const RUN_FEED_INTERVAL_MS: u64 = 50;
/// The run list is rebuilt at most this often.
pub const LIST_FEED_INTERVAL_MS: u64 = 100;
/// Items of the watched run list (its first page).
pub const LIST_FEED_ITEMS: usize = 50;

/// One published view; `document` is `None` once the run no longer exists.
#[derive(Debug)]
pub struct Snapshot {
    pub revision: i64,
    pub document: Option<Arc<Value>>,
    /// The merge patch from the previously published view (revision, patch), computed once
    /// for every subscriber that holds that view.
    pub patch_from_previous: Option<(i64, Arc<Value>)>,
}

pub type SnapshotReceiver = watch::Receiver<Option<Arc<Snapshot>>>;

pub struct RunFeed {
    latest: watch::Sender<Option<Arc<Snapshot>>>,
    retained: Mutex<VecDeque<Arc<Snapshot>>>,
}

impl RunFeed {
    /// The retained view of `revision`, if it is still kept.
    pub fn retained(&self, revision: i64) -> Option<Arc<Snapshot>> {
        let retained = self.retained.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        retained.iter().find(|snapshot| snapshot.revision == revision).cloned()
    }

    fn publish(&self, mut snapshot: Snapshot) {
        let previous = self.latest.borrow().clone();
        if let Some(previous) = previous
            && let (Some(from), Some(to)) = (previous.document.as_deref(), snapshot.document.as_deref())
        {
            snapshot.patch_from_previous =
                crate::view::patch::diff(from, to).map(|patch| (previous.revision, Arc::new(patch)));
        }
        let snapshot = Arc::new(snapshot);
        {
            let mut retained = self.retained.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if retained.len() >= RETAINED_REVISIONS_MAX {
                retained.pop_front();
            }
            retained.push_back(Arc::clone(&snapshot));
        }
        self.latest.send_replace(Some(snapshot));
    }
}

/// The run list's latest first page.
pub struct ListSnapshot {
    pub revision: u64,
    pub page: Arc<JsonObject>,
}

pub type ListReceiver = watch::Receiver<Option<Arc<ListSnapshot>>>;

#[derive(Default)]
pub struct Feeds {
    runs: Mutex<HashMap<String, Arc<RunFeed>>>,
    list: Mutex<Option<watch::Sender<Option<Arc<ListSnapshot>>>>>,
}

impl Feeds {
    /// Subscribe to `run_id`'s feed, starting it if nobody watches that run yet.
    pub fn watch_run(&self, ctx: &Arc<ServerContext>, run_id: &str) -> (Arc<RunFeed>, SnapshotReceiver) {
        let mut runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(feed) = runs.get(run_id) {
            return (Arc::clone(feed), feed.latest.subscribe());
        }
        let (latest, receiver) = watch::channel(None);
        let feed = Arc::new(RunFeed {
            latest,
            retained: Mutex::new(VecDeque::new()),
        });
        runs.insert(run_id.to_string(), Arc::clone(&feed));
        tokio::spawn(run_feed(Arc::clone(ctx), run_id.to_string(), Arc::clone(&feed)));
        (feed, receiver)
    }

    /// Subscribe to the run list, starting its feed if needed.
    pub fn watch_list(&self, ctx: &Arc<ServerContext>) -> ListReceiver {
        let mut list = self.list.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sender) = list.as_ref() {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(None);
        *list = Some(sender.clone());
        tokio::spawn(list_feed(Arc::clone(ctx), sender));
        receiver
    }

    /// Remove a run feed whose subscribers all left (unless one just arrived).
    fn retire_run(&self, run_id: &str, feed: &Arc<RunFeed>) -> bool {
        let mut runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if feed.latest.receiver_count() > 0 {
            return false;
        }
        runs.remove(run_id);
        true
    }

    fn retire_list(&self, sender: &watch::Sender<Option<Arc<ListSnapshot>>>) -> bool {
        let mut list = self.list.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if sender.receiver_count() > 0 {
            return false;
        }
        *list = None;
        true
    }

    /// Runs watched right now (status and tests).
    pub fn watched_runs(&self) -> usize {
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

async fn run_feed(ctx: Arc<ServerContext>, run_id: String, feed: Arc<RunFeed>) {
    let mut commits = ctx.store.commits();
    let mut published: Option<i64> = None;
    let mut stored = HashSet::new();
    loop {
        commits.borrow_and_update();
        match refresh_run(&ctx, &run_id, published, &mut stored).await {
            Refresh::Unchanged => {}
            Refresh::Published(snapshot) => {
                published = Some(snapshot.revision);
                feed.publish(snapshot);
            }
            Refresh::Gone => {
                feed.publish(Snapshot {
                    revision: published.unwrap_or(0),
                    document: None,
                    patch_from_previous: None,
                });
            }
        }
        tokio::select! {
            changed = commits.changed() => if changed.is_err() { break },
            () = feed.latest.closed() => if ctx.feeds.retire_run(&run_id, &feed) { return },
        }
        tokio::time::sleep(Duration::from_millis(RUN_FEED_INTERVAL_MS)).await;
    }
    ctx.feeds.retire_run(&run_id, &feed);
}

enum Refresh {
    Unchanged,
    Published(Snapshot),
    Gone,
}

async fn refresh_run(
    ctx: &Arc<ServerContext>,
    run_id: &str,
    published: Option<i64>,
    stored: &mut HashSet<String>,
) -> Refresh {
    let owned = run_id.to_string();
    let revision = match blocking::read(&ctx.store, move |conn| run_view::presentation_revision(conn, &owned)).await {
        Ok(Some(revision)) => revision,
        Ok(None) => return Refresh::Gone,
        Err(err) => {
            tracing::warn!(error = %err, "run feed could not read the run's revision");
            return Refresh::Unchanged;
        }
    };
    if published == Some(revision) {
        return Refresh::Unchanged;
    }
    match views::build_run_view_storing(ctx, run_id, stored).await {
        Ok(view) => Refresh::Published(Snapshot {
            revision: view.revision,
            document: Some(Arc::new(view.document)),
            patch_from_previous: None,
        }),
        Err(crate::store::StoreError::RunNotFound { .. }) => Refresh::Gone,
        Err(err) => {
            tracing::warn!(error = %err, "run feed could not build the view");
            Refresh::Unchanged
        }
    }
}

async fn list_feed(ctx: Arc<ServerContext>, sender: watch::Sender<Option<Arc<ListSnapshot>>>) {
    let mut commits = ctx.store.commits();
    let mut last: Option<Arc<JsonObject>> = None;
    loop {
        let revision = *commits.borrow_and_update();
        match views::runs_page(&ctx, None, LIST_FEED_ITEMS).await {
            Ok(page) if last.as_deref() != Some(&page) => {
                let page = Arc::new(page);
                last = Some(Arc::clone(&page));
                sender.send_replace(Some(Arc::new(ListSnapshot { revision, page })));
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "run-list feed could not read the runs"),
        }
        tokio::select! {
            changed = commits.changed() => if changed.is_err() { break },
            () = sender.closed() => if ctx.feeds.retire_list(&sender) { return },
        }
        tokio::time::sleep(Duration::from_millis(LIST_FEED_INTERVAL_MS)).await;
    }
    ctx.feeds.retire_list(&sender);
}
