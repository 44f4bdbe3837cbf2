//! The store from async code: writes go to the writer thread and are awaited directly;
//! reads run off the async workers, except small ones (`read_small`), which run in place.

use std::sync::Arc;

use crate::store::{Durability, Store, StoreError, StoreResult, WriteTx};

/// `Store::write` from async code: answered once the commit is on the disk.
pub async fn write<T, F>(store: &Arc<Store>, change: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
{
    store.write_async(Durability::Disk, change).await
}

/// A write of facts a power loss ends anyway (a run's admission, a runner's launch and end;
/// renewals and view content go through `write_unwatched`): answered once the commit is in
/// the kernel, without an `fsync` of its own (see `Durability::Kernel` for when that is
/// allowed, and why it is safe).
pub async fn write_without_fsync<T, F>(store: &Arc<Store>, change: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
{
    store.write_async(Durability::Kernel, change).await
}

/// `write_without_fsync` of rows no watcher of the commit counter reads (a claim's or the
/// server lease's renewal, content a live view derived; see `store::Watched`): its commit
/// alone wakes no live view, scheduler or deadline task.
pub async fn write_unwatched<T, F>(store: &Arc<Store>, change: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
{
    store.write_unwatched_async(change).await
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

/// `Store::read` in place, on the calling task's thread, for a read known to be small: an
/// indexed lookup of a few rows (a feed's look, an admission's candidates, a run's status).
/// A trip to the blocking pool costs two thread wake-ups, which on a small machine cost more
/// than such a read (about a tenth of the server's CPU per run went to them). A read that
/// scans, builds a page, or returns content of unbounded size goes through `read`.
pub fn read_small<T, F>(store: &Store, query: F) -> StoreResult<T>
where
    F: FnOnce(&rusqlite::Connection) -> StoreResult<T>,
{
    store.read_small(query)
}

/// `read_small` when `small`, else `read`: for a query whose size its arguments decide (a
/// plain status or one with its result, one runner epoch's rows or every epoch's).
pub async fn read_small_if<T, F>(store: &Arc<Store>, small: bool, query: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
{
    match small {
        true => read_small(store, query),
        false => read(store, query).await,
    }
}
