//! The `store` child: it holds the store for the tree (started first, stopped last, so every
//! other child can still commit while it stops) and watches the writer thread. A store
//! cannot be restarted in place (the writer owns the one write connection), so a dead writer
//! stops the server with `storeFailed` instead: nothing durable could happen any more, and a
//! fresh server start recovers from the file.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::blocking;
use super::shared::{Shared, StopReason};

/// How often the writer thread is checked.
const WRITER_CHECK_MS: u64 = 1_000;

pub struct StoreOwner;

pub enum StoreOwnerMsg {
    CheckWriter,
}

impl Actor for StoreOwner {
    type Msg = StoreOwnerMsg;
    type State = Arc<Shared>;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        myself: ActorRef<StoreOwnerMsg>,
        shared: Arc<Shared>,
    ) -> Result<Arc<Shared>, ActorProcessingErr> {
        // Fail fast (and let the root decide) when the writer cannot commit.
        blocking::write(&shared.store, |_| Ok(())).await?;
        myself.send_interval(Duration::from_millis(WRITER_CHECK_MS), || StoreOwnerMsg::CheckWriter);
        Ok(shared)
    }

    async fn handle(
        &self,
        _: ActorRef<StoreOwnerMsg>,
        message: StoreOwnerMsg,
        shared: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        let StoreOwnerMsg::CheckWriter = message;
        if !shared.store.writer_running() && shared.stop_requested().is_none() {
            tracing::error!("the store's writer thread died; stopping the server (start it again to recover)");
            shared.request_stop(StopReason::StoreFailed);
        }
        Ok(())
    }
}
