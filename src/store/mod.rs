//! The durable state store: one SQLite file, one writer thread, read-only view connections.
//!
//! Grouped by aggregate: `runs` (runs and queue lifecycle), `claims`, `attempts`,
//! `events` (revisions, events, viewer deltas), `commands` (receipts), `blobs`, `effects`,
//! `interactions`, `messages` (workflow messages, branch reports), `turns` (origin-session
//! model turns), `session_view` (the origin-session view's facts), `workers` (runner
//! epochs), `processes` (registry) and `run_state` (the runner's one narrow read).
//! Each spec transaction exists once, as one function taking a `WriteTx`.
//!
//! Architecture Invariant: no SQL outside `src/store/`. Other modules call these
//! operations; a future PostgreSQL backend would implement the same ones.
//!
//! API boundary: `Store` (open, write, read) and the transaction functions of each
//! aggregate module.

pub mod attempts;
pub mod blobs;
pub mod channels;
pub mod claims;
pub mod clock;
pub mod commands;
pub mod continuations;
pub mod deadlines;
pub mod decisions;
pub mod effects;
pub mod error;
pub mod events;
pub mod interactions;
pub mod messages;
pub mod presentation;
pub mod processes;
#[cfg(test)]
mod query_plans;
pub mod recovery;
pub mod retention;
mod run_endings;
pub mod run_news;
pub mod run_state;
pub mod run_summary;
pub mod run_view;
pub mod run_waits;
pub mod runs;
pub mod schema;
pub mod server_lease;
pub mod session_view;
pub mod settings;
pub mod turns;
pub mod verify;
pub mod workers;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ClaimLostError, ClaimLostReason, StoreError, StoreResult};
pub use writer::{Durability, Watched, WriteTx};

use writer::Writer;

/// `query` inside one read transaction on `conn`, so it sees one snapshot; and whether the
/// transaction closed, leaving the connection fit for another read. A read never writes: a
/// reader connection cannot, the writer's lent one could, so a query that changed rows is
/// rolled back and refused (a bug, not a user error). A failed `COMMIT` of a read does not
/// undo what its snapshot showed: the result stands, the connection is not reused.
fn read_transaction<T>(conn: &Connection, query: impl FnOnce(&Connection) -> StoreResult<T>) -> (StoreResult<T>, bool) {
    debug_assert!(
        conn.is_autocommit(),
        "a read begins on a connection with no open transaction"
    );
    let changes_before = conn.total_changes();
    if let Err(err) = writer::control(conn, "BEGIN DEFERRED") {
        return (Err(err.into()), false);
    }
    let result = query(conn);
    if conn.total_changes() != changes_before {
        let _ = writer::control(conn, "ROLLBACK");
        let refused = StoreError::CommitFailed("a read tried to change rows; it was rolled back".to_string());
        return (Err(refused), conn.is_autocommit());
    }
    match writer::control(conn, "COMMIT") {
        Ok(()) => (result, true),
        Err(_) => {
            let _ = writer::control(conn, "ROLLBACK");
            (result, false)
        }
    }
}

/// Idle read-only connections kept for reuse; more are opened on demand and closed after.
pub const READERS_IDLE_MAX: usize = 4;

/// The state database of one server.
pub struct Store {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    writer: Writer,
    idle_readers: Mutex<Vec<Connection>>,
}

impl Store {
    /// Open (or create) the database at `path`. A file of another schema digest is refused
    /// before anything is written to it.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        schema::prepare_database(path, clock.now_ms())?;
        let conn = schema::open_writer(path)?;
        let writer = Writer::spawn(conn, Arc::clone(&clock))?;
        Ok(Self {
            path: path.to_path_buf(),
            clock,
            writer,
            idle_readers: Mutex::new(Vec::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Run `change` in one write transaction on the writer thread; returns after commit.
    pub fn write<T, F>(&self, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.writer.write(change)
    }

    /// `write` for async callers (no blocking-pool thread in between), as durable as
    /// `durability` asks (see `Durability`: `Disk` unless the change is a `Kernel` one).
    pub async fn write_async<T, F>(&self, durability: Durability, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.writer.write_async(durability, change).await
    }

    /// A `Kernel` write of rows no watcher of the commit counter reads (see `Watched`): its
    /// commit alone wakes no live view, scheduler or deadline task.
    pub async fn write_unwatched_async<T, F>(&self, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.writer
            .submit_as(Durability::Kernel, Watched::Unwatched, change)?
            .wait()
            .await
    }

    /// Queue a write now; await its answer later (see `Writer::submit`).
    pub fn submit_write<T, F>(&self, durability: Durability, change: F) -> StoreResult<writer::PendingAnswer<T>>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.writer.submit(durability, change)
    }

    /// Whether the writer thread still runs; false means no write can commit any more.
    pub fn writer_running(&self) -> bool {
        self.writer.is_running()
    }

    /// Completes when the writer thread has ended: no write can commit any more.
    pub fn writer_ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.writer.ended()
    }

    /// Changes after every committed write transaction (see `Writer::commits`).
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.writer.commits()
    }

    /// The commit counter's value now (see `commits`).
    pub fn commit_count(&self) -> u64 {
        self.writer.commit_count()
    }

    /// Which runs the commits changed (`run_news`): a view of one run skips other runs'
    /// commits.
    pub fn run_news(&self) -> Arc<run_news::RunNews> {
        self.writer.run_news()
    }

    /// Moves with every commit that changed rows, before its writers are answered (see
    /// `Writer::data_version`): a result read under an unchanged number is still exact.
    pub fn data_version(&self) -> u64 {
        self.writer.data_version()
    }

    /// Run `query` on a read-only connection inside one read transaction, so it sees one
    /// consistent snapshot.
    pub fn read<T>(&self, query: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let conn = self.take_reader()?;
        let (result, closed) = read_transaction(&conn, query);
        if closed {
            self.return_reader(conn);
        }
        result
    }

    /// `read` of a few indexed rows (a feed's look, an admission's candidates, a runner's
    /// first command), on the writer's connection when the writer is between batches: its
    /// page cache is still warm, where a reader's empties at every commit. The writer waits
    /// for it, so nothing that scans or returns unbounded content comes here.
    pub fn read_small<T>(&self, query: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        match self.writer.lend_for_read() {
            // The writer lends it between batches only; a read left open is rolled back by
            // the writer's next batch.
            Some(conn) => read_transaction(&conn, query).0,
            None => self.read(query),
        }
    }

    /// Give back the memory of SQLite's caches, for a server that went quiet: the idle read
    /// connections close (their page and statement caches go with them; the next read opens
    /// one again) and the writer's connection frees its statement cache and its unpinned
    /// cache pages. Nothing a later read or write sees changes.
    pub async fn release_memory(&self) -> StoreResult<()> {
        let idle = std::mem::take(
            &mut *self
                .idle_readers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        drop(idle);
        self.writer
            .write_async(Durability::Kernel, |tx| {
                tx.conn().flush_prepared_statement_cache();
                tx.conn().release_memory()?;
                Ok(())
            })
            .await
    }

    fn take_reader(&self) -> StoreResult<Connection> {
        let idle = self
            .idle_readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        match idle {
            Some(conn) => Ok(conn),
            None => schema::open_reader(&self.path),
        }
    }

    fn return_reader(&self, conn: Connection) {
        let mut idle = self
            .idle_readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < READERS_IDLE_MAX {
            idle.push(conn);
        }
    }
}
