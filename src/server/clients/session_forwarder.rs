//! The forwarder of one `view.session.watch` subscription: writes the session's newest view
//! as a `session_snapshot` event whenever the view or the session's coordinator changes,
//! rendered for this subscriber's epoch (only the active coordinator sees `nextEligible`).
//!
//! Architecture Invariant: writes only to its own connection; a failed write stops that
//! connection, never the feed or another subscriber.

use std::sync::Arc;

use ractor::ActorCell;
use serde_json::Value;
use tokio::sync::watch;

use super::writer::{SharedWriter, write_shared};
use crate::protocol::{ClientMessage, ClientSchema, Event, EventKind, JsonObject, OpaqueId, Revision};
use crate::server::coordinators::Coordinators;
use crate::server::views::feeds::SessionReceiver;
use crate::server::views::sessions::render_for;

pub struct SessionForwarder {
    pub subscription_id: String,
    pub session_id: String,
    /// The epoch this subscription claimed (`coordinator: true`), if any.
    pub epoch: Option<u64>,
    pub coordinators: Arc<Coordinators>,
    pub writer: SharedWriter,
    pub connection: ActorCell,
}

impl SessionForwarder {
    pub async fn run(self, mut receiver: SessionReceiver, mut stop: watch::Receiver<bool>) {
        let mut coordinator_changes = self.coordinators.changes();
        let mut sequence: u64 = 0;
        let mut sent: Option<Value> = None;
        loop {
            let current = receiver.borrow_and_update().clone();
            coordinator_changes.borrow_and_update();
            if let Some(view) = current {
                let rendered = render_for(&view, self.epoch, self.coordinators.active_epoch(&self.session_id));
                if sent.as_ref() != Some(&rendered) {
                    sequence += 1;
                    if self.write(sequence, &rendered).await.is_err() {
                        self.connection.stop(Some("subscriber write failed".into()));
                        return;
                    }
                    sent = Some(rendered);
                }
            }
            let changed = tokio::select! {
                biased;
                () = stopped(&mut stop) => false,
                changed = receiver.changed() => changed.is_ok(),
                changed = coordinator_changes.changed() => changed.is_ok(),
            };
            if !changed {
                return;
            }
        }
    }

    async fn write(&self, sequence: u64, view: &Value) -> Result<(), ()> {
        let mut payload = JsonObject::new();
        payload.insert("view".into(), view.clone());
        let event = ClientMessage::Event(Event {
            schema: ClientSchema::V1,
            subscription_id: OpaqueId::new(self.subscription_id.clone()).map_err(|_| ())?,
            event: EventKind::SessionSnapshot,
            // A session view has no durable revision: the sequence within this subscription.
            revision: Revision::new(sequence).ok(),
            run_id: None,
            payload,
        });
        write_shared(&self.writer, event).await
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
