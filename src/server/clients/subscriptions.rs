//! A connection's subscriptions: `view.run.watch`, `view.runs.watch`, `view.session.watch`,
//! `view.run.unwatch` and `view.unwatch`. Each subscription is one forwarder task that waits for its feed's
//! newest value and writes it as an event, waiting for the socket each time: at most one
//! event per subscription is in the socket buffer, and values in between are coalesced.
//!
//! Architecture Invariant: a forwarder only writes to its own connection; a write that
//! fails or times out stops that connection, never a feed or another client.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::ActorCell;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::session_forwarder::SessionForwarder;
use super::writer::{SharedWriter, write_shared};
use crate::protocol::{
    ClientMessage, ClientSchema, Event, EventKind, JsonObject, OpaqueId, Operation, Outcome, Request, Revision,
    json_object,
};
use crate::server::answers::{Answer, read_refusal, rejected, run_id_of, session_id_of};
use crate::server::blocking;
use crate::server::coordinators::Coordinators;
use crate::server::views::feeds::{Feeds, ListReceiver, RunFeed, SessionReceiver, Snapshot, SnapshotReceiver};
use crate::store::run_view;
use crate::view::patch;

/// Subscriptions one connection may hold at once.
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 64;

pub struct Subscriptions {
    tasks: HashMap<String, Forwarding>,
    next: u64,
}

/// A running forwarder and its stop signal. Unwatching signals and waits: a forwarder stops
/// only between writes, so no event is ever cut in half or sent after the unwatch answer.
struct Forwarding {
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

/// Resolves when the forwarder is asked to stop (or its subscription is gone).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A subscription accepted by the handler; its forwarder starts after the response is written.
pub struct Pending {
    id: String,
    target: Target,
}

enum Target {
    Run {
        run_id: String,
        feed: Arc<RunFeed>,
        receiver: SnapshotReceiver,
        since: Option<i64>,
        /// The presentation revision when the watch was accepted.
        floor: i64,
    },
    List(ListReceiver),
    Session {
        session_id: String,
        receiver: SessionReceiver,
        epoch: Option<u64>,
        coordinators: Arc<Coordinators>,
    },
}

pub fn is_subscription_operation(operation: Operation) -> bool {
    matches!(
        operation,
        Operation::ViewRunWatch
            | Operation::ViewRunsWatch
            | Operation::ViewSessionWatch
            | Operation::ViewRunUnwatch
            | Operation::ViewUnwatch
    )
}

impl Subscriptions {
    pub fn new() -> Self {
        Self {
            tasks: HashMap::new(),
            next: 0,
        }
    }

    /// Answer a subscription request; a new subscription's forwarder starts with `start`.
    pub async fn handle(
        &mut self,
        feeds: &Arc<Feeds>,
        watcher: &Watcher,
        request: &Request,
    ) -> (Answer, Option<Pending>) {
        match request.operation {
            Operation::ViewRunWatch => self.watch_run(feeds, request).await,
            Operation::ViewRunsWatch => self.watch_list(feeds).await,
            Operation::ViewSessionWatch => self.watch_session(feeds, watcher, request).await,
            _ => (self.unwatch(request).await, None),
        }
    }

    /// `view.session.watch` (`sessionId`, `coordinator?`): with `coordinator: true` this
    /// connection becomes the session's coordinator under a new epoch, fencing the old one.
    async fn watch_session(
        &mut self,
        feeds: &Arc<Feeds>,
        watcher: &Watcher,
        request: &Request,
    ) -> (Answer, Option<Pending>) {
        let session_id = match session_id_of(request).and_then(|id| self.room().map(|()| id)) {
            Ok(session_id) => session_id,
            Err(refusal) => return (Err(refusal), None),
        };
        let Some(receiver) = feeds.watch_session(&session_id).await else {
            return (Err(feeds_unavailable()), None);
        };
        let coordinate = request.payload.get("coordinator").and_then(Value::as_bool) == Some(true);
        let epoch = match coordinate {
            false => None,
            true => match watcher.coordinators.claim(&session_id, watcher.connection) {
                Some(epoch) => Some(epoch),
                None => {
                    let refusal = rejected(
                        "tooManySessions",
                        "the server coordinates as many sessions as it can; close idle Pi sessions and retry",
                    );
                    return (Err(refusal), None);
                }
            },
        };
        let id = self.next_id("session");
        let mut answer = subscribed(&id);
        if let (Ok((_, receipt, _)), Some(epoch)) = (answer.as_mut(), epoch) {
            receipt.insert("epoch".into(), json!(epoch));
        }
        let target = Target::Session {
            session_id,
            receiver,
            epoch,
            coordinators: Arc::clone(&watcher.coordinators),
        };
        (answer, Some(Pending { id, target }))
    }

    async fn watch_run(&mut self, feeds: &Arc<Feeds>, request: &Request) -> (Answer, Option<Pending>) {
        let run_id = match run_id_of(request).and_then(|run_id| self.room().map(|()| run_id)) {
            Ok(run_id) => run_id,
            Err(refusal) => return (Err(refusal), None),
        };
        let owned = run_id.clone();
        // The first event is at least this new: a client that changed the run and then
        // watches it never gets a view from before its own change (a feed may lag a commit).
        let floor = match blocking::read_small(feeds.store(), move |conn| run_view::presentation_revision(conn, &owned))
        {
            Ok(Some(revision)) => revision,
            Ok(None) => {
                let missing = crate::store::StoreError::RunNotFound { run_id };
                return (Err(read_refusal(missing)), None);
            }
            Err(err) => return (Err(read_refusal(err)), None),
        };
        let since = request.payload.get("sinceRevision").and_then(Value::as_i64);
        let Some((feed, receiver)) = feeds.watch_run(&run_id).await else {
            return (Err(feeds_unavailable()), None);
        };
        let id = self.next_id("run");
        let answer = subscribed(&id);
        let target = Target::Run {
            run_id,
            feed,
            receiver,
            since,
            floor,
        };
        (answer, Some(Pending { id, target }))
    }

    async fn watch_list(&mut self, feeds: &Arc<Feeds>) -> (Answer, Option<Pending>) {
        if let Err(refusal) = self.room() {
            return (Err(refusal), None);
        }
        let Some(receiver) = feeds.watch_list().await else {
            return (Err(feeds_unavailable()), None);
        };
        let id = self.next_id("runs");
        (
            subscribed(&id),
            Some(Pending {
                id,
                target: Target::List(receiver),
            }),
        )
    }

    async fn unwatch(&mut self, request: &Request) -> Answer {
        let Some(id) = request.payload.get("subscriptionId").and_then(Value::as_str) else {
            return Err(rejected("invalidRequest", "name the subscriptionId to remove"));
        };
        let removed = match self.tasks.remove(id) {
            Some(forwarding) => {
                let _ = forwarding.stop.send(true);
                // A write in progress ends first: every write, waiting for the writer
                // included, is bounded by the write timeout, after which the forwarder
                // closes the connection itself. Never abort it mid-write.
                let _ = forwarding.task.await;
                true
            }
            None => false,
        };
        let mut receipt = JsonObject::new();
        receipt.insert("subscriptionId".into(), json!(id));
        receipt.insert("removed".into(), json!(removed));
        Ok((Outcome::Accepted, receipt, None))
    }

    /// Start the forwarder of a subscription whose response was written.
    pub fn start(&mut self, pending: Pending, writer: SharedWriter, connection: ActorCell) {
        let id = pending.id.clone();
        let (stop, stopping) = watch::channel(false);
        let task = match pending.target {
            Target::Run {
                run_id,
                feed,
                receiver,
                since,
                floor,
            } => {
                let forwarder = RunForwarder {
                    subscription_id: id.clone(),
                    run_id,
                    writer,
                    connection,
                };
                let sent = since.and_then(|revision| feed.retained(revision));
                tokio::spawn(forwarder.run(receiver, sent, floor, stopping))
            }
            Target::List(receiver) => tokio::spawn(forward_list(id.clone(), receiver, writer, connection, stopping)),
            Target::Session {
                session_id,
                receiver,
                epoch,
                coordinators,
            } => {
                let forwarder = SessionForwarder {
                    subscription_id: id.clone(),
                    session_id,
                    epoch,
                    coordinators,
                    writer,
                    connection,
                };
                tokio::spawn(forwarder.run(receiver, stopping))
            }
        };
        self.tasks.insert(id, Forwarding { task, stop });
    }

    /// No subscription is held (a finished forwarder no longer counts).
    pub fn is_empty(&self) -> bool {
        self.tasks.values().all(|forwarding| forwarding.task.is_finished())
    }

    /// Stop every forwarder (the connection closed: a cut write no longer matters).
    pub fn clear(&mut self) {
        for (_, forwarding) in self.tasks.drain() {
            forwarding.task.abort();
        }
    }

    fn room(&mut self) -> Result<(), (Outcome, crate::protocol::ResponseError)> {
        self.tasks.retain(|_, forwarding| !forwarding.task.is_finished());
        if self.tasks.len() >= SUBSCRIPTIONS_PER_CONNECTION_MAX {
            return Err(rejected(
                "tooManySubscriptions",
                &format!(
                    "a connection holds at most {SUBSCRIPTIONS_PER_CONNECTION_MAX} subscriptions; unwatch one first"
                ),
            ));
        }
        Ok(())
    }

    fn next_id(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{kind}-{}", self.next)
    }
}

impl Default for Subscriptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Who asks for a subscription: the connection (its number names it to the coordinators).
pub struct Watcher {
    pub connection: u64,
    pub coordinators: Arc<Coordinators>,
}

fn subscribed(id: &str) -> Answer {
    let mut receipt = JsonObject::new();
    receipt.insert("subscriptionId".into(), json!(id));
    Ok((Outcome::Accepted, receipt, None))
}

struct RunForwarder {
    subscription_id: String,
    run_id: String,
    writer: SharedWriter,
    connection: ActorCell,
}

impl RunForwarder {
    /// Send the newest view whenever it changes: a patch from the last one sent when it can,
    /// else a snapshot; `unavailable` once the run is gone.
    async fn run(
        self,
        mut receiver: SnapshotReceiver,
        mut sent: Option<Arc<Snapshot>>,
        floor: i64,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let held = sent.as_ref().map(|s| s.revision);
            // Biased: a stop asked for during a write wins over a newer snapshot.
            let next = tokio::select! {
                biased;
                () = stop_requested(&mut stop) => None,
                next = next_snapshot(&mut receiver, held, floor) => next,
            };
            let Some(snapshot) = next else {
                return;
            };
            let Some(document) = snapshot.document.as_deref() else {
                let _ = self
                    .write(EventKind::Unavailable, snapshot.revision, JsonObject::new())
                    .await;
                return;
            };
            let (kind, payload) = match patch_for(sent.as_deref(), &snapshot, document) {
                Some((from, patch)) => (
                    EventKind::RunPatch,
                    json_object([("fromRevision", json!(from)), ("patch", patch)]),
                ),
                None => (EventKind::RunSnapshot, json_object([("view", document.clone())])),
            };
            if self.write(kind, snapshot.revision, payload).await.is_err() {
                self.connection.stop(Some("subscriber write failed".into()));
                return;
            }
            sent = Some(snapshot);
        }
    }

    async fn write(&self, kind: EventKind, revision: i64, payload: JsonObject) -> Result<(), ()> {
        let event = event(&self.subscription_id, kind, revision, Some(&self.run_id), payload)?;
        write_shared(&self.writer, event).await
    }
}

/// The patch from the view a subscriber holds to `snapshot`: the feed's shared one when it
/// starts there, else computed for this subscriber; `None` means send a snapshot.
fn patch_for(sent: Option<&Snapshot>, snapshot: &Snapshot, document: &Value) -> Option<(i64, Value)> {
    let sent = sent?;
    if let Some((from, patch)) = &snapshot.patch_from_previous
        && *from == sent.revision
    {
        return Some((*from, Value::clone(patch)));
    }
    let previous = sent.document.as_deref()?;
    patch::diff(previous, document).map(|patch| (sent.revision, patch))
}

/// Wait for a published snapshot newer than `sent` and at least `floor` (or the run's end);
/// `None` when the feed ended.
async fn next_snapshot(receiver: &mut SnapshotReceiver, sent: Option<i64>, floor: i64) -> Option<Arc<Snapshot>> {
    loop {
        let current = receiver.borrow_and_update().clone();
        if let Some(snapshot) = current
            && (snapshot.document.is_none() || (Some(snapshot.revision) != sent && snapshot.revision >= floor))
        {
            return Some(snapshot);
        }
        receiver.changed().await.ok()?;
    }
}

async fn forward_list(
    subscription_id: String,
    mut receiver: ListReceiver,
    writer: SharedWriter,
    connection: ActorCell,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let current = receiver.borrow_and_update().clone();
        if let Some(snapshot) = current {
            let written = match event(
                &subscription_id,
                EventKind::Runs,
                snapshot.revision as i64,
                None,
                (*snapshot.page).clone(),
            ) {
                Ok(event) => write_shared(&writer, event).await,
                Err(()) => Err(()),
            };
            if written.is_err() {
                connection.stop(Some("subscriber write failed".into()));
                return;
            }
        }
        let changed = tokio::select! {
            biased;
            () = stop_requested(&mut stop) => false,
            changed = receiver.changed() => changed.is_ok(),
        };
        if !changed {
            return;
        }
    }
}

fn event(
    subscription_id: &str,
    kind: EventKind,
    revision: i64,
    run_id: Option<&str>,
    payload: JsonObject,
) -> Result<ClientMessage, ()> {
    Ok(ClientMessage::Event(Event {
        schema: ClientSchema::V1,
        subscription_id: OpaqueId::new(subscription_id.to_string()).map_err(|_| ())?,
        event: kind,
        revision: Revision::new(revision.max(0) as u64).ok(),
        run_id: match run_id {
            Some(run_id) => Some(OpaqueId::new(run_id.to_string()).map_err(|_| ())?),
            None => None,
        },
        payload,
    }))
}

/// The feeds' supervisor is not running (the server is starting or stopping).
fn feeds_unavailable() -> (Outcome, crate::protocol::ResponseError) {
    rejected(
        "unavailable",
        "live views are not available right now (the server is starting or stopping); retry",
    )
}
