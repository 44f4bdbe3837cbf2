//! The store's calls block (its writer is a thread); actors run them off the async workers.

use std::sync::Arc;

use crate::store::{Store, StoreError, StoreResult, WriteTx};

/// `Store::write` from async code.
pub async fn write<T, F>(store: &Arc<Store>, change: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || store.write(change))
        .await
        .map_err(|_| StoreError::WriterStopped)?
}

/// `Store::read` from async code.
pub async fn read<T, F>(store: &Arc<Store>, query: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || store.read(query))
        .await
        .map_err(|_| StoreError::WriterStopped)?
}
