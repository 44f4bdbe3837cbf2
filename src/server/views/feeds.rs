//! Live feeds: one supervised task per watched run (and one for the run list), a transient
//! child of `clients/feeds`, rebuilds the view after commits and publishes the newest one in
//! a `watch` channel. Subscribers of one run share one build per revision; a slow subscriber
//! only ever sees the latest (coalesced) value, so it can never slow the feed or another
//! subscriber. A feed that panics is restarted with the same channel and rebuilds its view
//! from the store; subscribers keep their receivers.
//!
//! Architecture Invariant: a feed only reads (plus storing the content its view names); it
//! ends when its last subscriber leaves.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use supervisors::{ChildSpec, Restart, SupervisorMsg};

use super::cache::{self, Views};
use super::pace::Pace;
use super::sessions::{self, SessionView};
use crate::protocol::JsonObject;
use crate::server::blocking;
use crate::server::shared::{Shared, lock};
use crate::store::run_news::{RunNews, RunRow, RunStamp};
use crate::store::{Store, run_view};

/// Views a run feed keeps for reconnecting subscribers (a retained revision gets a patch).
pub const RETAINED_REVISIONS_MAX: usize = 16;
/// Under a long stream of changes a run feed rebuilds this often; commits in between coalesce
/// (`pace.rs`).
pub const RUN_FEED_INTERVAL_MS: u64 = 50;
/// Rebuilds a run feed makes at once before its interval applies: more than a short run's
/// changes from its subscription to its end (admission, ready, result batches, the end).
pub const RUN_FEED_BURST_MAX: u32 = 16;
/// Under a long stream of changes the run list is rebuilt this often.
pub const LIST_FEED_INTERVAL_MS: u64 = 100;
/// Rebuilds of the run list at once before its interval applies.
pub const LIST_FEED_BURST_MAX: u32 = 4;
/// The least time after a look that found nothing new before a feed looks at the store
/// again (it doubles with each such look, up to the feed's interval; a rebuild is followed by
/// no gap: `pace.rs`).
pub const FEED_CHECK_GAP_MS: u64 = 2;
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
    served: Served,
}

impl RunFeed {
    /// The retained view of `revision`, if it is still kept.
    pub fn retained(&self, revision: i64) -> Option<Arc<Snapshot>> {
        let retained = lock(&self.retained);
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
            let mut retained = lock(&self.retained);
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

/// How long a watch waits for a feed another watch is starting.
const FEED_START_WAIT_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FeedState {
    /// Its task is being started by the watch that created the channel.
    Starting,
    /// A task runs for it.
    Served,
    /// No task will feed it any more (its start failed, or its task ended for good).
    Ended,
}

/// Whether a feed task serves a channel. A task marks it while it runs and unmarks it when it
/// ends in any way (returns, panics, is aborted with its subtree); a watch joins only a
/// channel that is served — waiting while it starts — and otherwise starts a new feed.
#[derive(Clone)]
struct Served(Arc<watch::Sender<FeedState>>);

impl Served {
    fn new() -> Self {
        Self(Arc::new(watch::channel(FeedState::Starting).0))
    }

    fn is_ended(&self) -> bool {
        *self.0.borrow() == FeedState::Ended
    }

    /// Once its start settled: whether a task serves the channel.
    async fn wait_started(&self) -> bool {
        let mut state = self.0.subscribe();
        let settled = state.wait_for(|state| *state != FeedState::Starting);
        match tokio::time::timeout(Duration::from_millis(FEED_START_WAIT_MS), settled).await {
            Ok(Ok(state)) => *state == FeedState::Served,
            _ => false,
        }
    }

    /// The start failed: no task will serve it.
    fn failed(&self) {
        self.0.send_replace(FeedState::Ended);
    }

    /// Held by a running feed task.
    fn serving(&self) -> ServingGuard {
        self.0.send_replace(FeedState::Served);
        ServingGuard(Arc::clone(&self.0))
    }
}

struct ServingGuard(Arc<watch::Sender<FeedState>>);

impl Drop for ServingGuard {
    fn drop(&mut self) {
        self.0.send_replace(FeedState::Ended);
    }
}

/// The run list's channel and whether a task feeds it.
#[derive(Clone)]
struct ListFeed {
    sender: watch::Sender<Option<Arc<ListSnapshot>>>,
    served: Served,
}

/// A session's channel and whether a task feeds it.
#[derive(Clone)]
struct SessionFeed {
    sender: watch::Sender<Option<Arc<SessionView>>>,
    served: Served,
}

pub type SessionReceiver = watch::Receiver<Option<Arc<SessionView>>>;

/// A session feed rebuilds at least this often without commits: a retained terminal run
/// leaves the view by time alone.
pub const SESSION_FEED_REFRESH_MS: u64 = 5_000;
/// Under a long stream of changes a session feed rebuilds this often. Shorter than a run
/// feed's: a look is one small read when nothing of the session changed, and a step usually
/// commits a few ms after the turn end before it (measured: 50 ms here put ~30 ms on every
/// step's delivery).
pub const SESSION_FEED_INTERVAL_MS: u64 = 10;
/// Session views rebuilt at once before the session feed's interval applies.
pub const SESSION_FEED_BURST_MAX: u32 = 4;
/// Sessions watched at once, at most (one per open Pi session, plus viewers).
pub const SESSION_FEEDS_MAX: usize = 1024;

/// Where feed children run, below the root.
pub const FEEDS_SUPERVISOR_PATH: [&str; 2] = ["clients", "feeds"];

/// The feeds' handle: which runs have a feed, the run list's feed, and how to start one.
pub struct Feeds {
    shared: Arc<Shared>,
    views: Arc<Views>,
    runs: Mutex<HashMap<String, Arc<RunFeed>>>,
    list: Mutex<Option<ListFeed>>,
    sessions: Mutex<HashMap<String, SessionFeed>>,
    /// Feed children started (names them uniquely).
    started: AtomicU64,
}

impl Feeds {
    pub fn new(shared: Arc<Shared>, views: Arc<Views>) -> Arc<Self> {
        Arc::new(Self {
            shared,
            views,
            runs: Mutex::new(HashMap::new()),
            list: Mutex::new(None),
            sessions: Mutex::new(HashMap::new()),
            started: AtomicU64::new(0),
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.views.store
    }

    /// Subscribe to `run_id`'s feed, starting it if nobody watches that run yet; `None` when
    /// no feed can start (the tree is starting or stopping).
    pub async fn watch_run(self: &Arc<Self>, run_id: &str) -> Option<(Arc<RunFeed>, SnapshotReceiver)> {
        let (feed, receiver, created) = {
            let mut runs = lock(&self.runs);
            match runs.get(run_id).filter(|feed| !feed.served.is_ended()) {
                Some(feed) => (Arc::clone(feed), feed.latest.subscribe(), false),
                None => {
                    let (latest, receiver) = watch::channel(None);
                    let feed = Arc::new(RunFeed {
                        latest,
                        retained: Mutex::new(VecDeque::new()),
                        served: Served::new(),
                    });
                    runs.insert(run_id.to_string(), Arc::clone(&feed));
                    (feed, receiver, true)
                }
            }
        };
        if !created {
            return feed.served.wait_started().await.then_some((feed, receiver));
        }
        let (feeds, owned, task_feed) = (Arc::clone(self), run_id.to_string(), Arc::clone(&feed));
        let started = self
            .start_child("run-feed", move || {
                run_feed(Arc::clone(&feeds), owned.clone(), Arc::clone(&task_feed))
            })
            .await;
        if !started {
            feed.served.failed();
            self.forget_run(run_id, &feed);
            return None;
        }
        Some((feed, receiver))
    }

    /// Subscribe to the run list, starting its feed if needed.
    pub async fn watch_list(self: &Arc<Self>) -> Option<ListReceiver> {
        let (feed, receiver, created) = {
            let mut list = lock(&self.list);
            match list.as_ref().filter(|feed| !feed.served.is_ended()) {
                Some(feed) => (feed.clone(), feed.sender.subscribe(), false),
                None => {
                    let (sender, receiver) = watch::channel(None);
                    let feed = ListFeed {
                        sender,
                        served: Served::new(),
                    };
                    *list = Some(feed.clone());
                    (feed, receiver, true)
                }
            }
        };
        if !created {
            return feed.served.wait_started().await.then_some(receiver);
        }
        let (feeds, task_feed) = (Arc::clone(self), feed.clone());
        let started = self
            .start_child("run-list", move || {
                list_feed(Arc::clone(&feeds), task_feed.sender.clone(), task_feed.served.clone())
            })
            .await;
        if !started {
            feed.served.failed();
            self.retire_list(&feed.sender);
            return None;
        }
        Some(receiver)
    }

    /// Subscribe to `session_id`'s view, starting its feed if nobody watches that session
    /// yet; `None` when no feed can start (the tree is starting or stopping, or the bound of
    /// watched sessions is reached).
    pub async fn watch_session(self: &Arc<Self>, session_id: &str) -> Option<SessionReceiver> {
        let (feed, receiver, created) = {
            let mut sessions = lock(&self.sessions);
            match sessions.get(session_id).filter(|feed| !feed.served.is_ended()) {
                Some(feed) => (feed.clone(), feed.sender.subscribe(), false),
                None if sessions.len() >= SESSION_FEEDS_MAX => return None,
                None => {
                    let (sender, receiver) = watch::channel(None);
                    let feed = SessionFeed {
                        sender,
                        served: Served::new(),
                    };
                    sessions.insert(session_id.to_string(), feed.clone());
                    (feed, receiver, true)
                }
            }
        };
        if !created {
            return feed.served.wait_started().await.then_some(receiver);
        }
        let (feeds, owned, task_feed) = (Arc::clone(self), session_id.to_string(), feed.clone());
        let started = self
            .start_child("session-feed", move || {
                session_feed(Arc::clone(&feeds), owned.clone(), task_feed.clone())
            })
            .await;
        if !started {
            feed.served.failed();
            self.retire_session(session_id, &feed.sender);
            return None;
        }
        Some(receiver)
    }

    /// Remove a session feed whose subscribers all left (unless one just arrived), if it is
    /// still this one.
    fn retire_session(&self, session_id: &str, sender: &watch::Sender<Option<Arc<SessionView>>>) -> bool {
        let mut sessions = lock(&self.sessions);
        if sender.receiver_count() > 0 {
            return false;
        }
        if sessions
            .get(session_id)
            .is_some_and(|current| current.sender.same_channel(sender))
        {
            sessions.remove(session_id);
        }
        true
    }

    /// The views handle (one-off session reads build through it).
    pub fn views(&self) -> &Arc<Views> {
        &self.views
    }

    /// Start a transient feed child under `clients/feeds`.
    async fn start_child<F, Fut>(&self, name: &str, task: F) -> bool
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
    {
        let Some(supervisor) = self.shared.supervisor(&FEEDS_SUPERVISOR_PATH).await else {
            return false;
        };
        let number = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let spec = ChildSpec::task(format!("{name}-{number}"), Restart::Transient, task);
        let timeout = Some(Duration::from_millis(FEED_START_WAIT_MS));
        let started = supervisor
            .call(|reply| SupervisorMsg::StartChild(spec, reply), timeout)
            .await;
        let ok = matches!(started, Ok(ractor::rpc::CallResult::Success(Ok(()))));
        if !ok {
            tracing::warn!(feed = name, "a live feed could not be started");
        }
        ok
    }

    /// Remove a run feed whose subscribers all left (unless one just arrived).
    fn retire_run(&self, run_id: &str, feed: &Arc<RunFeed>) -> bool {
        // Under the lock a watch subscribes under: nobody can join between check and removal.
        let mut runs = lock(&self.runs);
        if feed.latest.receiver_count() > 0 {
            return false;
        }
        forget_run(&mut runs, run_id, feed);
        true
    }

    fn forget_run(&self, run_id: &str, feed: &Arc<RunFeed>) {
        forget_run(&mut lock(&self.runs), run_id, feed);
    }

    /// Remove the run-list feed whose subscribers all left (unless one just arrived), if it
    /// is still this one.
    fn retire_list(&self, sender: &watch::Sender<Option<Arc<ListSnapshot>>>) -> bool {
        let mut list = lock(&self.list);
        if sender.receiver_count() > 0 {
            return false;
        }
        if list.as_ref().is_some_and(|current| current.sender.same_channel(sender)) {
            *list = None;
        }
        true
    }

    /// Runs watched right now (status and tests).
    pub fn watched_runs(&self) -> usize {
        lock(&self.runs).len()
    }
}

async fn run_feed(feeds: Arc<Feeds>, run_id: String, feed: Arc<RunFeed>) -> Result<(), String> {
    let _serving = feed.served.serving();
    let mut commits = feeds.store().commits();
    let news = feeds.store().run_news();
    let mut published: Option<i64> = None;
    let mut stored = HashSet::new();
    let mut pace = Pace::new(RUN_FEED_INTERVAL_MS, RUN_FEED_BURST_MAX, FEED_CHECK_GAP_MS);
    // The run's row, once a look found it: its stamp tells other runs' commits apart.
    let mut row: Option<RunRow> = None;
    loop {
        let looked_at = Instant::now();
        commits.borrow_and_update();
        // Taken before the look, so a commit after the look's read moves it.
        let stamped = row.map(|row| (row, news.stamp(row)));
        let (refresh, looked_row) = refresh_run(&feeds.views, &run_id, published, &mut stored).await;
        row = looked_row;
        let rebuilt = match refresh {
            Refresh::Unchanged => false,
            Refresh::Published(snapshot) => {
                published = Some(snapshot.revision);
                feed.publish(snapshot);
                true
            }
            Refresh::Gone => {
                feed.publish(Snapshot {
                    revision: published.unwrap_or(0),
                    document: None,
                    patch_from_previous: None,
                });
                true
            }
        };
        // Only the row this look found, stamped before it, can skip a commit; a row found
        // first (or anew) by this look is looked at after the next commit.
        let stamped = stamped.filter(|(stamped_row, _)| Some(*stamped_row) == row);
        tokio::select! {
            changed = run_changes(&mut commits, &news, stamped) => if changed.is_err() { break },
            () = feed.latest.closed() => if feeds.retire_run(&run_id, &feed) { return Ok(()) },
        }
        pace.wait_after(looked_at, rebuilt).await;
    }
    feeds.retire_run(&run_id, &feed);
    Ok(())
}

/// Wait for a commit that may have changed the run: with its row and its stamp from before
/// the last look, one that moved the stamp, woken by nothing else (`store::run_news`);
/// without, any commit. `Err` when no commit can come any more.
async fn run_changes(
    commits: &mut watch::Receiver<u64>,
    news: &RunNews,
    stamped: Option<(RunRow, RunStamp)>,
) -> Result<(), watch::error::RecvError> {
    match stamped {
        Some((row, stamp)) => {
            news.wait_changed(row, stamp).await;
            // Commits seen through the stamp are not news for the next look's wait.
            commits.borrow_and_update();
            Ok(())
        }
        None => commits.changed().await,
    }
}

enum Refresh {
    Unchanged,
    Published(Snapshot),
    Gone,
}

/// What one look at the store found: the run is gone, its view did not move since the
/// published one, or the facts of its new view.
enum Look {
    Gone,
    Unchanged(RunRow),
    Changed(RunRow, Box<cache::RunViewRead>),
}

/// Look at the run and rebuild its view if it moved; with the run's row when the look
/// succeeded (after a failure the next commit, whichever run's, tries again).
async fn refresh_run(
    views: &Views,
    run_id: &str,
    published: Option<i64>,
    stored: &mut HashSet<String>,
) -> (Refresh, Option<RunRow>) {
    let owned = run_id.to_string();
    // The revision and, when it moved, the view's facts (indexed lookups of one run's rows,
    // its recent attempts bounded): one snapshot, read in place.
    let look = blocking::read_small(&views.store, move |conn| {
        match run_view::presentation_look(conn, &owned)? {
            None => Ok(Look::Gone),
            Some((row, revision)) if published == Some(revision) => Ok(Look::Unchanged(row)),
            Some((row, revision)) => {
                cache::read_run_view_at(conn, &owned, revision).map(|read| Look::Changed(row, Box::new(read)))
            }
        }
    });
    let (row, read) = match look {
        Ok(Look::Changed(row, read)) => (row, read),
        Ok(Look::Unchanged(row)) => return (Refresh::Unchanged, Some(row)),
        Ok(Look::Gone) | Err(crate::store::StoreError::RunNotFound { .. }) => return (Refresh::Gone, None),
        Err(err) => {
            tracing::warn!(error = %err, "run feed could not read the run's view");
            return (Refresh::Unchanged, None);
        }
    };
    match cache::finish_run_view(views, run_id, *read, stored).await {
        Ok(view) => {
            let snapshot = Snapshot {
                revision: view.revision,
                document: Some(Arc::new(view.document)),
                patch_from_previous: None,
            };
            (Refresh::Published(snapshot), Some(row))
        }
        Err(err) => {
            tracing::warn!(error = %err, "run feed could not build the view");
            // No row: the next commit, whichever run's, tries again.
            (Refresh::Unchanged, None)
        }
    }
}

async fn list_feed(
    feeds: Arc<Feeds>,
    sender: watch::Sender<Option<Arc<ListSnapshot>>>,
    served: Served,
) -> Result<(), String> {
    let _serving = served.serving();
    let mut commits = feeds.store().commits();
    let mut last: Option<Arc<JsonObject>> = None;
    let mut pace = Pace::new(LIST_FEED_INTERVAL_MS, LIST_FEED_BURST_MAX, FEED_CHECK_GAP_MS);
    loop {
        let looked_at = Instant::now();
        let revision = *commits.borrow_and_update();
        match cache::runs_page(&feeds.views, None, LIST_FEED_ITEMS).await {
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
            () = sender.closed() => if feeds.retire_list(&sender) { return Ok(()) },
        }
        // Every look builds the page, changed or not.
        pace.wait_after(looked_at, true).await;
    }
    feeds.retire_list(&sender);
    Ok(())
}

/// Rebuild a session's view after commits (paced: `SESSION_FEED_BURST_MAX` at once, then one
/// every `SESSION_FEED_INTERVAL_MS`) and publish it when it changed.
async fn session_feed(feeds: Arc<Feeds>, session_id: String, feed: SessionFeed) -> Result<(), String> {
    let _serving = feed.served.serving();
    let mut commits = feeds.store().commits();
    let (mut last_key, mut last_digest): (Option<String>, Option<String>) = (None, None);
    let mut pace = Pace::new(SESSION_FEED_INTERVAL_MS, SESSION_FEED_BURST_MAX, FEED_CHECK_GAP_MS);
    loop {
        let looked_at = Instant::now();
        commits.borrow_and_update();
        let key = sessions::session_key(&feeds.views, &session_id).await;
        let changed = !matches!((&key, &last_key), (Ok(key), Some(last)) if key == last);
        if changed {
            match sessions::build_session_view(&feeds.views, &session_id).await {
                Ok(view) => {
                    last_key = key.ok();
                    if last_digest.as_deref() != Some(view.digest.as_str()) {
                        last_digest = Some(view.digest.clone());
                        feed.sender.send_replace(Some(Arc::new(view)));
                    }
                }
                Err(err) => tracing::warn!(error = %err, "a session feed could not read its session"),
            }
        }
        tokio::select! {
            changed = commits.changed() => if changed.is_err() { break },
            () = feed.sender.closed() => if feeds.retire_session(&session_id, &feed.sender) { return Ok(()) },
            // Time alone changes a session view too (a retained terminal run leaves it).
            () = tokio::time::sleep(Duration::from_millis(SESSION_FEED_REFRESH_MS)) => {}
        }
        pace.wait_after(looked_at, changed).await;
    }
    feeds.retire_session(&session_id, &feed.sender);
    Ok(())
}

/// Remove `run_id`'s entry if it is still this feed (a newer feed may have replaced it).
fn forget_run(runs: &mut HashMap<String, Arc<RunFeed>>, run_id: &str, feed: &Arc<RunFeed>) {
    if runs.get(run_id).is_some_and(|current| Arc::ptr_eq(current, feed)) {
        runs.remove(run_id);
    }
}
