//! The `store` child: it holds the store for the tree (started first, stopped last, so every
//! other child can still commit while it stops) and watches the writer thread. A store
//! cannot be restarted in place (the writer owns the one write connection), so a dead writer
//! stops the server with `storeFailed` instead: nothing durable could happen any more, and a
//! fresh server start recovers from the file. A full disk is not a dead writer: the writer
//! rolls back what the disk refused, answers `diskFull` and keeps serving, and the first
//! write after space returns commits (`store/writer.rs`), so nothing here stops the server
//! for it. It also watches the files the server holds (state directory, lock, database):
//! one removed or replaced stops the server with `stateRemoved`, so a server never runs on
//! deleted files next to a new one.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::blocking;
use super::ownership::HeldFiles;
use super::shared::{Shared, StopReason};

/// How often the writer thread and the held files are checked.
const HEALTH_CHECK_MS: u64 = 1_000;

pub struct StoreOwner;

pub enum StoreOwnerMsg {
    CheckHealth,
}

#[derive(Clone)]
pub struct StoreOwnerArgs {
    pub shared: Arc<Shared>,
    pub held: HeldFiles,
}

impl Actor for StoreOwner {
    type Msg = StoreOwnerMsg;
    type State = StoreOwnerArgs;
    type Arguments = StoreOwnerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<StoreOwnerMsg>,
        args: StoreOwnerArgs,
    ) -> Result<StoreOwnerArgs, ActorProcessingErr> {
        // Fail fast (and let the root decide) when the writer cannot commit.
        blocking::write(&args.shared.store, |_| Ok(())).await?;
        myself.send_interval(Duration::from_millis(HEALTH_CHECK_MS), || StoreOwnerMsg::CheckHealth);
        Ok(args)
    }

    async fn handle(
        &self,
        _: ActorRef<StoreOwnerMsg>,
        message: StoreOwnerMsg,
        args: &mut StoreOwnerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let StoreOwnerMsg::CheckHealth = message;
        let shared = &args.shared;
        if shared.stop_requested().is_some() {
            return Ok(());
        }
        if !shared.store.writer_running() {
            tracing::error!("the store's writer thread died; stopping the server (start it again to recover)");
            shared.request_stop(StopReason::StoreFailed);
        } else if let Some(what) = args.held.changed() {
            tracing::error!(
                what,
                "a file this server holds was removed or replaced; stopping (start the server again)"
            );
            shared.request_stop(StopReason::StateRemoved);
        }
        Ok(())
    }
}
