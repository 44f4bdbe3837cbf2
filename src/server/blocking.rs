//! The store from async code: writes go to the writer thread and are awaited directly;
//! reads (which run on the caller's thread) run off the async workers.

use std::sync::Arc;

use crate::store::{Store, StoreError, StoreResult, WriteTx};

/// `Store::write` from async code.
pub async fn write<T, F>(store: &Arc<Store>, change: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
{
    store.write_async(change).await
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
