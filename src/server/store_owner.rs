//! The `store` child: it holds the store for the tree (started first, stopped last, so every
//! other child can still commit while it stops) and watches the writer thread. A store
//! cannot be restarted in place (the writer owns the one write connection), so a dead writer
//! stops the server with `storeFailed` instead: nothing durable could happen any more, and a
//! fresh server start recovers from the file. A full disk is not a dead writer: the writer
//! rolls back what the disk refused, answers `diskFull` and keeps serving, and the first
//! write after space returns commits (`store/writer.rs`), so nothing here stops the server
//! for it. It also watches the files the server holds (state directory, lock, database):
//! one removed or replaced stops the server with `stateRemoved`, so a server never runs on
//! deleted files next to a new one. Both checks run when something happened (the writer
//! thread ended; a held directory reported a change: `path_watch.rs`), not on a timer, so an
//! idle server does not wake for them.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use super::blocking;
use super::ownership::HeldFiles;
use super::path_watch::PathWatch;
use super::shared::{Shared, StopReason};

pub struct StoreOwner;

pub enum StoreOwnerMsg {
    CheckHealth,
}

#[derive(Clone)]
pub struct StoreOwnerArgs {
    pub shared: Arc<Shared>,
    pub held: HeldFiles,
}

pub struct StoreOwnerState {
    args: StoreOwnerArgs,
    /// Sends `CheckHealth` when the writer ends or a held file may have changed.
    watcher: JoinHandle<()>,
}

impl Actor for StoreOwner {
    type Msg = StoreOwnerMsg;
    type State = StoreOwnerState;
    type Arguments = StoreOwnerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<StoreOwnerMsg>,
        args: StoreOwnerArgs,
    ) -> Result<StoreOwnerState, ActorProcessingErr> {
        // Fail fast (and let the root decide) when the writer cannot commit.
        blocking::write(&args.shared.store, |_| Ok(())).await?;
        let watch = PathWatch::new(args.held.paths());
        let writer_ended = args.shared.store.writer_ended();
        let watcher = tokio::spawn(watch_health(myself, watch, writer_ended));
        Ok(StoreOwnerState { args, watcher })
    }

    async fn post_stop(
        &self,
        _: ActorRef<StoreOwnerMsg>,
        state: &mut StoreOwnerState,
    ) -> Result<(), ActorProcessingErr> {
        state.watcher.abort();
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<StoreOwnerMsg>,
        message: StoreOwnerMsg,
        state: &mut StoreOwnerState,
    ) -> Result<(), ActorProcessingErr> {
        let StoreOwnerMsg::CheckHealth = message;
        let args = &state.args;
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

/// Ask for a check when the writer thread ends, and whenever the watch says to look.
async fn watch_health(
    myself: ActorRef<StoreOwnerMsg>,
    mut watch: PathWatch,
    writer_ended: impl std::future::Future<Output = ()>,
) {
    let mut writer_ended = std::pin::pin!(writer_ended);
    let mut writer_running = true;
    loop {
        tokio::select! {
            () = &mut writer_ended, if writer_running => writer_running = false,
            () = watch.next() => {}
        }
        if myself.cast(StoreOwnerMsg::CheckHealth).is_err() {
            return;
        }
    }
}
