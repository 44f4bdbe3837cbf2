//! The store writer: the one connection that writes, on its own thread.
//!
//! Every job runs inside `BEGIN IMMEDIATE`. Jobs that queue up while a commit is in flight
//! share the next transaction (group commit), each inside its own savepoint, so a failing
//! job rolls back alone; every caller gets its answer only after the shared COMMIT. This is
//! how protected writes keep pace with raw commits under `synchronous = FULL`.
//!
//! A job says how durable it must be before its caller hears of it (`Durability`): a batch
//! with any `Disk` job commits with `synchronous = FULL` (an `fsync`), one of `Kernel` jobs
//! alone with `synchronous = NORMAL` (the WAL write only).
//!
//! A job also says whether watchers of the commit counter (live views, the scheduler, the
//! deadline task) care about its rows (`Watched`): a commit whose changed rows are all
//! `Unwatched` ones (a claim's renewal, content a view derived) wakes none of them.
//!
//! A full disk is not fatal: a transaction that SQLite cannot write for space is rolled back
//! whole, each of its callers gets `StoreError::DiskFull`, and the writer goes on serving
//! (reads never needed it); the first write after space returns commits, with no restart.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::clock::Clock;
use super::error::{StoreError, StoreResult};
use super::run_news::{NewsRecorder, RunNews};

/// Jobs waiting for the writer; callers block (backpressure) beyond this.
pub const WRITER_QUEUE_LEN_MAX: usize = 1_024;
/// Jobs committed together at most; bounds one transaction's duration.
pub const GROUP_COMMIT_JOBS_MAX: usize = 64;

/// One write transaction as seen by domain code: a connection inside `BEGIN IMMEDIATE` (and
/// a savepoint of its own), with the clock read once for the whole job. Domain code may use
/// nested savepoints but never COMMIT, ROLLBACK or BEGIN: the writer owns the transaction.
pub struct WriteTx<'c> {
    conn: &'c Connection,
    now_ms: i64,
}

impl<'c> WriteTx<'c> {
    pub(crate) fn new(conn: &'c Connection, now_ms: i64) -> Self {
        Self { conn, now_ms }
    }

    pub fn conn(&self) -> &'c Connection {
        self.conn
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Run `change` in a nested savepoint: an error rolls back what it wrote, and only that,
    /// so the rest of the job (written before or after) commits without it. The error is
    /// returned; a savepoint that cannot be opened or closed is an error too.
    pub fn nested<T>(&self, change: impl FnOnce(&WriteTx<'c>) -> StoreResult<T>) -> StoreResult<T> {
        control(self.conn, "SAVEPOINT nested")?;
        match change(self) {
            Ok(value) => match control(self.conn, "RELEASE nested") {
                Ok(()) => Ok(value),
                Err(err) => {
                    self.roll_back_nested();
                    Err(err.into())
                }
            },
            Err(err) => {
                self.roll_back_nested();
                Err(err)
            }
        }
    }

    fn roll_back_nested(&self) {
        let rolled_back = control(self.conn, "ROLLBACK TO nested").and_then(|()| control(self.conn, "RELEASE nested"));
        // A caller may go on after the error, so what `change` wrote must be gone; if SQLite
        // cannot say so, the whole job is abandoned (the writer catches the panic and rolls
        // back the job's own savepoint).
        if let Err(err) = rolled_back {
            panic!("a nested savepoint could not be rolled back: {err}");
        }
    }
}

/// How far a commit must reach before its callers hear of it.
///
/// Architecture Invariant: a `Kernel` commit records only facts about this machine's own
/// processes and claims (a run's admission, a runner's launch, readiness and end, the
/// renewal of a run's claim or of the server's lease, content a live view derived), which a
/// power loss ends anyway, and which nobody off this machine learns of: every client of the
/// socket, every runner and adapter dies with it too. Every receipt, workflow fact and run
/// outcome is a `Disk` commit.
///
/// Why a power loss cannot leave a contradiction: the WAL is one append-only file, and its
/// recovery replays frames up to the first one that fails its checksum chain, so a power loss
/// drops only the newest commits, never an older one without the newer. A `Disk` commit's
/// `fsync` covers every frame before it, so it makes every earlier `Kernel` commit durable
/// too. A crash of the server loses neither: a `Kernel` commit's WAL frames reach the kernel
/// before its callers hear of it.
///
/// Architecture Invariant: a `Deferred` job records only a fact that nobody waits for and
/// whose loss in a crash of the server within `DEFERRED_WAIT_MS_MAX` leaves what recovery
/// already handles: a runner's plain end (recovery records an epoch left without an outcome
/// `orphaned`, as for a runner the crash outlived). Its caller does not wait for it; jobs
/// queued after it still commit after it (or with it), so nothing later can overtake it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On the disk before any caller hears of it (`synchronous = FULL`): survives power loss.
    Disk,
    /// In the kernel's page cache before any caller hears of it (`synchronous = NORMAL`):
    /// survives a crash of the server; on the disk with the next `Disk` commit.
    Kernel,
    /// `Kernel`, and its commit waits up to `DEFERRED_WAIT_MS_MAX` for the next job to share
    /// it: a commit, a wake of every watcher and a status read saved when one comes.
    Deferred,
}

/// The longest a `Deferred` job waits for company before it commits alone.
pub const DEFERRED_WAIT_MS_MAX: u64 = 20;

impl Durability {
    /// The `synchronous` setting a batch needs: FULL (2) if any of its jobs needs the disk.
    fn synchronous(self) -> i64 {
        match self {
            Durability::Disk => 2,
            Durability::Kernel | Durability::Deferred => 1,
        }
    }
}

/// Whether the watchers of the commit counter care about a job's rows.
///
/// Architecture Invariant: a job is `Unwatched` only when no watcher reads what it changes:
/// the lease rows' heartbeat and expiry (the reclaimer keeps its own time) and
/// `run_view_content` (derived from facts a view already showed). Anything a view, the
/// scheduler, the deadline task, a channel adapter or a waiting submission reads is
/// `Watched`; a wrong `Unwatched` would leave a watcher asleep on news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    Watched,
    Unwatched,
}

/// One queued write: runs once inside its savepoint, then learns the shared commit result.
trait WriteJob: Send {
    /// How durable its commit must be before it is answered.
    fn durability(&self) -> Durability;
    /// Whether its changed rows wake the watchers of the commit counter.
    fn watched(&self) -> Watched;
    /// Run the change (a disk that refused it for space is reported as `DiskFull` in
    /// `dir`, the state directory).
    fn run(&mut self, tx: &WriteTx<'_>, dir: &Path) -> Ran;
    /// Answer the caller. `commit` is the shared transaction's outcome.
    fn deliver(self: Box<Self>, commit: Result<(), BatchFailure>);
}

/// How one job's change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    /// It succeeded: its savepoint may be kept.
    Kept,
    /// It failed (or panicked): its savepoint is rolled back, the batch goes on.
    RolledBack,
    /// The disk refused it for space: the whole transaction is rolled back.
    DiskFull,
}

/// Why a shared transaction did not commit.
#[derive(Debug, Clone)]
enum BatchFailure {
    /// The disk holding the state directory refused the write for space.
    DiskFull(PathBuf),
    Failed(String),
}

impl BatchFailure {
    fn of(err: rusqlite::Error, dir: &Path) -> Self {
        if super::error::sqlite_disk_full(&err) {
            BatchFailure::DiskFull(dir.to_path_buf())
        } else {
            BatchFailure::Failed(err.to_string())
        }
    }

    fn error(self) -> StoreError {
        match self {
            BatchFailure::DiskFull(dir) => StoreError::DiskFull { dir },
            BatchFailure::Failed(message) => StoreError::CommitFailed(message),
        }
    }
}

struct PendingWrite<T, F> {
    durability: Durability,
    watched: Watched,
    change: Option<F>,
    result: Option<StoreResult<T>>,
    reply: Reply<T>,
}

/// Where a job's answer goes: a blocked thread, or an awaiting task (no thread hop).
enum Reply<T> {
    Blocking(SyncSender<StoreResult<T>>),
    Async(tokio::sync::oneshot::Sender<StoreResult<T>>),
}

impl<T, F> WriteJob for PendingWrite<T, F>
where
    T: Send,
    F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send,
{
    fn durability(&self) -> Durability {
        self.durability
    }

    fn watched(&self) -> Watched {
        self.watched
    }

    fn run(&mut self, tx: &WriteTx<'_>, dir: &Path) -> Ran {
        let Some(change) = self.change.take() else {
            return Ran::RolledBack;
        };
        let result = change(tx).map_err(|err| err.with_disk_full_in(dir));
        let ran = match &result {
            Ok(_) => Ran::Kept,
            Err(err) if err.is_disk_full() => Ran::DiskFull,
            Err(_) => Ran::RolledBack,
        };
        self.result = Some(result);
        ran
    }

    fn deliver(self: Box<Self>, commit: Result<(), BatchFailure>) {
        let answer = match (commit, self.result) {
            (Ok(()), Some(result)) => result,
            (Err(failure), Some(Ok(_))) | (Err(failure), None) => Err(failure.error()),
            // A rolled-back change reports its own error, whatever happened to the batch.
            (Err(_), Some(Err(err))) => Err(err),
            (Ok(()), None) => Err(StoreError::CommitFailed(
                "the change did not run or panicked, and was rolled back".to_string(),
            )),
        };
        // The caller may have given up waiting; nothing else to do then.
        match self.reply {
            Reply::Blocking(reply) => {
                let _ = reply.send(answer);
            }
            Reply::Async(reply) => {
                let _ = reply.send(answer);
            }
        }
    }
}

/// Messages of the writer actor.
enum WriterMessage {
    Write(Box<dyn WriteJob>),
}

/// Handle to the writer thread. Dropping the last handle stops the thread after it drains.
pub struct Writer {
    sender: Option<SyncSender<WriterMessage>>,
    /// The writer thread's connection: locked by the thread for each batch, and lent between
    /// batches for one small read (`lend_for_read`).
    conn: Arc<Mutex<Connection>>,
    thread: Option<JoinHandle<()>>,
    /// Counts committed transactions that changed rows of `Watched` jobs; live views wait on
    /// it instead of polling.
    commits: tokio::sync::watch::Receiver<u64>,
    /// See `data_version`.
    data_version: Arc<AtomicU64>,
    /// Which runs the commits changed (`run_news`), stamped before `commits` moves.
    news: Arc<RunNews>,
    /// Closed when the writer thread ends (its sender lives on the thread's stack, so a
    /// panic closes it too): a watcher waits on it instead of polling `is_running`.
    alive: tokio::sync::watch::Receiver<()>,
}

impl Writer {
    pub fn spawn(mut conn: Connection, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let news = Arc::new(RunNews::new());
        let recorder = NewsRecorder::install(&mut conn, Arc::clone(&news))?;
        let (sender, receiver) = sync_channel(WRITER_QUEUE_LEN_MAX);
        let (committed, commits) = tokio::sync::watch::channel(0);
        let (running, alive) = tokio::sync::watch::channel(());
        let data_version = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&data_version);
        let conn = Arc::new(Mutex::new(conn));
        let owned = Arc::clone(&conn);
        let thread = std::thread::Builder::new()
            .name("store-writer".to_string())
            .spawn(move || {
                let _running = running;
                run_writer(
                    &owned,
                    clock,
                    receiver,
                    Counters {
                        committed,
                        data_version: counted,
                        recorder,
                    },
                );
            })?;
        Ok(Self {
            sender: Some(sender),
            conn,
            thread: Some(thread),
            commits,
            data_version,
            news,
            alive,
        })
    }

    /// Completes when the writer thread has ended (see `is_running`).
    pub fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut alive = self.alive.clone();
        async move {
            // Nothing is ever sent: `changed` returns only once the sender is gone.
            while alive.changed().await.is_ok() {}
        }
    }

    /// Whether the writer thread still runs (it ends only when its last handle is dropped,
    /// or if it died: then no write can ever commit again).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|thread| !thread.is_finished())
    }

    /// The commit counter: it changes after every committed transaction that changed rows of
    /// a `Watched` job (answers first).
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.commits.clone()
    }

    /// The commit counter's value now (see `commits`).
    pub fn commit_count(&self) -> u64 {
        *self.commits.borrow()
    }

    /// Which runs the commits changed: stamped before `commits` moves (`run_news`).
    pub fn run_news(&self) -> Arc<RunNews> {
        Arc::clone(&self.news)
    }

    /// Counts committed transactions that changed any rows. Unlike `commits` it moves before
    /// the commit's jobs are answered: a read that starts after a write's answer (and any read
    /// that saw the write) finds a newer number than every read before the commit, so a
    /// result read under one number stays exact while the number is unchanged.
    pub fn data_version(&self) -> u64 {
        self.data_version.load(Ordering::Acquire)
    }

    /// The writer's connection for one small read, when the writer is between batches (else
    /// `None`: the caller reads on a reader connection). The writer's page cache stays valid
    /// across its own commits, where a reader's empties at every commit and reads its pages
    /// again; the writer waits for the lent read to end before its next batch, so only reads
    /// of a few indexed rows may borrow it (`Store::read_small`).
    pub(super) fn lend_for_read(&self) -> Option<MutexGuard<'_, Connection>> {
        // `None` when busy with a batch, or after a lent read panicked (the writer rolls back
        // what it left open before its next batch).
        self.conn.try_lock().ok()
    }

    /// Run `change` in a write transaction and return its result after the commit reached
    /// the disk. An `Err` from `change` rolls back everything it wrote.
    pub fn write<T, F>(&self, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, reply_receiver) = sync_channel::<StoreResult<T>>(1);
        let job = PendingWrite {
            durability: Durability::Disk,
            watched: Watched::Watched,
            change: Some(change),
            result: None,
            reply: Reply::Blocking(reply),
        };
        let sender = self.sender.as_ref().ok_or(StoreError::WriterStopped)?;
        sender
            .send(WriterMessage::Write(Box::new(job)))
            .map_err(|_| StoreError::WriterStopped)?;
        reply_receiver.recv().map_err(|_| StoreError::WriterStopped)?
    }

    /// `write` for async callers: the writer answers the awaiting task directly, without a
    /// blocking-pool thread in between (each thread hop costs about as much as a write's
    /// statements on a small machine).
    pub async fn write_async<T, F>(&self, durability: Durability, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.submit(durability, change)?.wait().await
    }

    /// Queue `change` now and return its pending answer. Changes submitted back to back run
    /// in submission order and usually share one commit (group commit): a runner's
    /// pipelined proposals cost one fsync together, each still atomic in its own savepoint.
    /// A full queue is waited for in place (must run on a multi-thread runtime).
    pub fn submit<T, F>(&self, durability: Durability, change: F) -> StoreResult<PendingAnswer<T>>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.submit_as(durability, Watched::Watched, change)
    }

    /// `submit` of a job that says whether watchers of the commit counter care (`Watched`).
    pub fn submit_as<T, F>(&self, durability: Durability, watched: Watched, change: F) -> StoreResult<PendingAnswer<T>>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, receiver) = tokio::sync::oneshot::channel::<StoreResult<T>>();
        let job = PendingWrite {
            durability,
            watched,
            change: Some(change),
            result: None,
            reply: Reply::Async(reply),
        };
        let sender = self.sender.as_ref().ok_or(StoreError::WriterStopped)?;
        match sender.try_send(WriterMessage::Write(Box::new(job))) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(message)) => {
                tokio::task::block_in_place(|| sender.send(message)).map_err(|_| StoreError::WriterStopped)?;
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Err(StoreError::WriterStopped),
        }
        Ok(PendingAnswer(receiver))
    }
}

/// The answer of a submitted write, delivered after its commit.
pub struct PendingAnswer<T>(tokio::sync::oneshot::Receiver<StoreResult<T>>);

impl<T> PendingAnswer<T> {
    pub async fn wait(self) -> StoreResult<T> {
        self.0.await.map_err(|_| StoreError::WriterStopped)?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread's two commit counters (see `Writer::commits` and
/// `Writer::data_version`), and the runs its commits changed.
struct Counters {
    committed: tokio::sync::watch::Sender<u64>,
    data_version: Arc<AtomicU64>,
    recorder: NewsRecorder,
}

fn run_writer(
    shared: &Mutex<Connection>,
    clock: Arc<dyn Clock>,
    receiver: Receiver<WriterMessage>,
    counters: Counters,
) {
    // The state directory, named in `DiskFull` (the user's own directory, not a secret).
    let dir = lock_connection(shared)
        .path()
        .map(Path::new)
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut disk_full = false;
    // The connection opens with `synchronous = FULL` (`schema::open_writer`).
    let mut synchronous = Durability::Disk.synchronous();
    // No spin for the next job after a commit: in a server's work the next job comes from
    // another thread after an answer went out, far later than a spin could wait, so a spin
    // only burned CPU (docs/PERFORMANCE.md, tenth round).
    while let Ok(WriterMessage::Write(first)) = receiver.recv() {
        let deferred = first.durability() == Durability::Deferred;
        let mut pending = VecDeque::from([first]);
        if deferred {
            // Nobody waits for it: the next job (or the deadline, or the writer's end) takes
            // it along.
            let company = receiver.recv_timeout(std::time::Duration::from_millis(DEFERRED_WAIT_MS_MAX));
            if let Ok(WriterMessage::Write(job)) = company {
                pending.push_back(job);
            }
        }
        while pending.len() < GROUP_COMMIT_JOBS_MAX {
            match receiver.try_recv() {
                Ok(WriterMessage::Write(job)) => pending.push_back(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        while !pending.is_empty() {
            let conn = lock_connection(shared);
            let (batch, ran) = commit_batch(
                &conn,
                clock.as_ref(),
                &dir,
                &mut pending,
                &mut synchronous,
                &counters.data_version,
            );
            // The connection is free before anyone hears of the batch: a task woken by its
            // answer finds it for a small read.
            drop(conn);
            let answer = batch.as_ref().map(|_| ()).map_err(BatchFailure::clone);
            for job in ran {
                job.deliver(answer.clone());
            }
            note_disk(&mut disk_full, &batch, &dir);
            // The runs it changed are stamped before the counter moves: a watcher woken by
            // the counter finds its run's stamp moved (`run_news`).
            counters.recorder.batch_ended(batch.is_ok());
            // Only a commit that changed rows a watcher reads is news: a write that found its
            // rows already in place, or changed only `Unwatched` ones, wakes no watcher.
            if matches!(batch, Ok(Wrote { watched: true, .. })) {
                counters.committed.send_modify(|count| *count += 1);
            }
        }
    }
}

/// The connection for a batch. A read that panicked while it had the connection lent poisons
/// the lock; the connection is still sound, and the batch first rolls back what that read
/// left open.
fn lock_connection(shared: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Log when the disk fills and when space returns, once each (not once per refused write).
/// Space is back only when a transaction that changed rows committed: one that changed
/// nothing writes nothing, and commits on a full disk too.
fn note_disk(disk_full: &mut bool, batch: &Result<Wrote, BatchFailure>, dir: &Path) {
    match batch {
        Err(BatchFailure::DiskFull(_)) if !*disk_full => {
            *disk_full = true;
            tracing::error!(
                dir = %dir.display(),
                "the disk holding the state directory is full: writes are refused (diskFull) and rolled back until \
                 space returns; reads go on"
            );
        }
        Err(BatchFailure::DiskFull(_)) => tracing::debug!("store write refused: the disk is still full"),
        Ok(Wrote { rows: true, .. }) if *disk_full => {
            *disk_full = false;
            tracing::info!("space returned on the disk of the state directory: writes commit again");
        }
        Ok(_) | Err(BatchFailure::Failed(_)) => {}
    }
}

/// What a committed batch changed: any rows, and any rows of a `Watched` job.
#[derive(Debug, Clone, Copy)]
struct Wrote {
    rows: bool,
    watched: bool,
}

/// Run jobs from the front of `pending` in one transaction, then answer each of them.
///
/// SQLite may roll back a whole transaction on its own (an I/O error). The writer notices
/// after each job; the jobs that ran get the failure and the rest stay in `pending` for a
/// fresh transaction, so no job ever runs outside `BEGIN IMMEDIATE`. A job
/// the disk refused for space ends the transaction the same way, rolled back whole (SQLite's
/// advice after `SQLITE_FULL`: its pager may be unusable until then). `Ok` when it committed,
/// with what it changed. The batch commits with the `synchronous` setting its
/// most demanding job needs (`synchronous` holds the connection's current one). A commit that
/// changed rows moves `data_version` before any job hears of it. Returns the jobs that ran
/// (or could not), for the caller to answer once the connection is free.
fn commit_batch(
    conn: &Connection,
    clock: &dyn Clock,
    dir: &Path,
    pending: &mut VecDeque<Box<dyn WriteJob>>,
    synchronous: &mut i64,
    data_version: &AtomicU64,
) -> (Result<Wrote, BatchFailure>, Vec<Box<dyn WriteJob>>) {
    if !conn.is_autocommit() {
        // Never expected: a transaction left open by an earlier failure.
        let _ = control(conn, "ROLLBACK");
    }
    let needed = batch_durability(pending);
    let begun = set_synchronous(conn, needed, synchronous).and_then(|()| control(conn, "BEGIN IMMEDIATE"));
    if let Err(err) = begun {
        let failure = BatchFailure::of(err, dir);
        if let BatchFailure::Failed(message) = &failure {
            tracing::error!(error = %message, jobs = pending.len(), "store writer could not begin a transaction");
        }
        return (Err(failure), pending.drain(..).collect());
    }
    let changes_before = conn.total_changes();
    let mut watched = false;
    let mut ran = Vec::with_capacity(pending.len());
    let mut aborted = None;
    while let Some(mut job) = pending.pop_front() {
        let job_changes_before = conn.total_changes();
        let outcome = run_in_savepoint(conn, clock, dir, job.as_mut());
        watched |= job.watched() == Watched::Watched && conn.total_changes() != job_changes_before;
        ran.push(job);
        if conn.is_autocommit() || outcome == Ran::DiskFull {
            aborted = Some(outcome);
            break;
        }
    }
    let commit = match aborted {
        Some(outcome) => {
            if !conn.is_autocommit() {
                let _ = control(conn, "ROLLBACK");
            }
            Err(match outcome {
                Ran::DiskFull => BatchFailure::DiskFull(dir.to_path_buf()),
                _ => BatchFailure::Failed("SQLite rolled back the transaction (an I/O error)".to_string()),
            })
        }
        None => {
            debug_assert_synchronous(conn, needed);
            control(conn, "COMMIT")
        }
        .map_err(|err| {
            let _ = control(conn, "ROLLBACK");
            BatchFailure::of(err, dir)
        }),
    };
    if let Err(BatchFailure::Failed(message)) = &commit {
        tracing::error!(error = %message, jobs = ran.len(), "store write batch was not committed");
    }
    let rows = conn.total_changes() != changes_before;
    if commit.is_ok() && rows {
        data_version.fetch_add(1, Ordering::Release);
    }
    (commit.map(|()| Wrote { rows, watched }), ran)
}

/// `Disk` when any job of the batch needs the disk, else `Kernel`.
fn batch_durability(pending: &VecDeque<Box<dyn WriteJob>>) -> Durability {
    if pending.iter().any(|job| job.durability() == Durability::Disk) {
        Durability::Disk
    } else {
        Durability::Kernel
    }
}

/// Switch the connection's `synchronous` setting to what `needed` asks, outside any
/// transaction (SQLite refuses the change inside one). Not a cached statement: SQLite applies
/// this pragma when it prepares it, so a cached one would not apply again.
fn set_synchronous(conn: &Connection, needed: Durability, current: &mut i64) -> rusqlite::Result<()> {
    let level = needed.synchronous();
    if *current == level {
        return Ok(());
    }
    conn.pragma_update(None, "synchronous", level)?;
    *current = level;
    Ok(())
}

/// A batch with a `Disk` job never commits without its `fsync` (debug builds check it).
fn debug_assert_synchronous(conn: &Connection, needed: Durability) {
    if cfg!(debug_assertions) {
        let level: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap_or(-1);
        debug_assert_eq!(
            level,
            needed.synchronous(),
            "a batch commits with the durability it needs"
        );
    }
}

/// Transaction-control statements (`BEGIN`, `COMMIT`, savepoints), prepared once: parsing
/// them again for every transaction showed up in the server's profile.
pub(super) fn control(conn: &Connection, statement: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(statement)?.execute([])?;
    Ok(())
}

/// Run one job inside its own savepoint; a failed or panicking job rolls back alone.
fn run_in_savepoint(conn: &Connection, clock: &dyn Clock, dir: &Path, job: &mut dyn WriteJob) -> Ran {
    if let Err(err) = control(conn, "SAVEPOINT job") {
        tracing::error!(error = %err, "store job skipped: no savepoint");
        return Ran::RolledBack;
    }
    let tx = WriteTx::new(conn, clock.now_ms());
    let ran = catch_unwind(AssertUnwindSafe(|| job.run(&tx, dir))).unwrap_or(Ran::RolledBack);
    if ran == Ran::DiskFull || conn.is_autocommit() {
        // The whole transaction is rolled back next (or already was).
        return ran;
    }
    let closed = if ran == Ran::Kept {
        control(conn, "RELEASE job")
    } else {
        control(conn, "ROLLBACK TO job").and_then(|()| control(conn, "RELEASE job"))
    };
    if let Err(err) = closed {
        tracing::error!(error = %err, "store job savepoint could not be closed");
    }
    ran
}
