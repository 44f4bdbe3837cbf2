//! The store writer: the one connection that writes, on its own thread.
//!
//! Every job runs inside `BEGIN IMMEDIATE`. Jobs that queue up while a commit is in flight
//! share the next transaction (group commit), each inside its own savepoint, so a failing
//! job rolls back alone; every caller gets its answer only after the shared COMMIT. This is
//! how protected writes keep pace with raw commits under `synchronous = FULL`.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::clock::Clock;
use super::error::{StoreError, StoreResult};

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
}

/// One queued write: runs once inside its savepoint, then learns the shared commit result.
trait WriteJob: Send {
    /// Run the change; true when its savepoint may be kept.
    fn run(&mut self, tx: &WriteTx<'_>) -> bool;
    /// Answer the caller. `commit` is the shared transaction's outcome.
    fn deliver(self: Box<Self>, commit: Result<(), String>);
}

struct PendingWrite<T, F> {
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
    fn run(&mut self, tx: &WriteTx<'_>) -> bool {
        let Some(change) = self.change.take() else { return false };
        let result = change(tx);
        let succeeded = result.is_ok();
        self.result = Some(result);
        succeeded
    }

    fn deliver(self: Box<Self>, commit: Result<(), String>) {
        let answer = match (commit, self.result) {
            (Ok(()), Some(result)) => result,
            (Err(message), Some(Ok(_))) | (Err(message), None) => Err(StoreError::CommitFailed(message)),
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
    thread: Option<JoinHandle<()>>,
    /// Counts committed transactions; live views wait on it instead of polling.
    commits: tokio::sync::watch::Receiver<u64>,
}

impl Writer {
    pub fn spawn(conn: Connection, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let (sender, receiver) = sync_channel(WRITER_QUEUE_LEN_MAX);
        let (committed, commits) = tokio::sync::watch::channel(0);
        let thread = std::thread::Builder::new()
            .name("store-writer".to_string())
            .spawn(move || run_writer(conn, clock, receiver, committed))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            commits,
        })
    }

    /// Whether the writer thread still runs (it ends only when its last handle is dropped,
    /// or if it died: then no write can ever commit again).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|thread| !thread.is_finished())
    }

    /// The commit counter: it changes after every committed transaction (answers first).
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.commits.clone()
    }

    /// Run `change` in a write transaction and return its result after the commit.
    /// An `Err` from `change` rolls back everything it wrote.
    pub fn write<T, F>(&self, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, reply_receiver) = sync_channel::<StoreResult<T>>(1);
        let job = PendingWrite {
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
    pub async fn write_async<T, F>(&self, change: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.submit(change)?.wait().await
    }

    /// Queue `change` now and return its pending answer. Changes submitted back to back run
    /// in submission order and usually share one commit (group commit): a runner's
    /// pipelined proposals cost one fsync together, each still atomic in its own savepoint.
    /// A full queue is waited for in place (must run on a multi-thread runtime).
    pub fn submit<T, F>(&self, change: F) -> StoreResult<PendingAnswer<T>>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, receiver) = tokio::sync::oneshot::channel::<StoreResult<T>>();
        let job = PendingWrite {
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

/// After a commit the writer polls this long for the next job before it sleeps: a caller
/// that writes again right after its answer then needs no thread wake-up, which on small
/// VMs costs as much as the statements of a write.
pub const WRITER_SPIN_MICROS_MAX: u64 = 100;

fn next_message(receiver: &Receiver<WriterMessage>) -> Option<WriterMessage> {
    let spin_until = Instant::now() + Duration::from_micros(WRITER_SPIN_MICROS_MAX);
    while Instant::now() < spin_until {
        match receiver.try_recv() {
            Ok(message) => return Some(message),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    receiver.recv().ok()
}

fn run_writer(
    conn: Connection,
    clock: Arc<dyn Clock>,
    receiver: Receiver<WriterMessage>,
    committed: tokio::sync::watch::Sender<u64>,
) {
    while let Some(WriterMessage::Write(first)) = next_message(&receiver) {
        let mut pending = VecDeque::from([first]);
        while pending.len() < GROUP_COMMIT_JOBS_MAX {
            match receiver.try_recv() {
                Ok(WriterMessage::Write(job)) => pending.push_back(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        while !pending.is_empty() {
            if commit_batch(&conn, clock.as_ref(), &mut pending) {
                committed.send_modify(|count| *count += 1);
            }
        }
    }
}

/// Run jobs from the front of `pending` in one transaction, then answer each of them.
///
/// SQLite may roll back a whole transaction on its own (disk full, I/O error). The writer
/// notices after each job; the jobs that ran are answered with the failure and the rest stay
/// in `pending` for a fresh transaction, so no job ever runs outside `BEGIN IMMEDIATE`.
/// True when the transaction committed.
fn commit_batch(conn: &Connection, clock: &dyn Clock, pending: &mut VecDeque<Box<dyn WriteJob>>) -> bool {
    if !conn.is_autocommit() {
        // Never expected: a transaction left open by an earlier failure.
        let _ = control(conn, "ROLLBACK");
    }
    if let Err(err) = control(conn, "BEGIN IMMEDIATE") {
        tracing::error!(error = %err, jobs = pending.len(), "store writer could not begin a transaction");
        for job in pending.drain(..) {
            job.deliver(Err(err.to_string()));
        }
        return false;
    }
    let mut ran = Vec::with_capacity(pending.len());
    let mut aborted = false;
    while let Some(mut job) = pending.pop_front() {
        run_in_savepoint(conn, clock, job.as_mut());
        ran.push(job);
        if conn.is_autocommit() {
            aborted = true;
            break;
        }
    }
    let commit = if aborted {
        Err("SQLite rolled back the transaction (disk full or I/O error)".to_string())
    } else {
        control(conn, "COMMIT").map_err(|err| {
            let _ = control(conn, "ROLLBACK");
            err.to_string()
        })
    };
    if let Err(message) = &commit {
        tracing::error!(error = %message, jobs = ran.len(), "store write batch was not committed");
    }
    let committed = commit.is_ok();
    for job in ran {
        job.deliver(commit.clone());
    }
    committed
}

/// Transaction-control statements, prepared once.
fn control(conn: &Connection, statement: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(statement)?.execute([])?;
    Ok(())
}

/// Run one job inside its own savepoint; a failed or panicking job rolls back alone.
fn run_in_savepoint(conn: &Connection, clock: &dyn Clock, job: &mut dyn WriteJob) {
    if let Err(err) = control(conn, "SAVEPOINT job") {
        tracing::error!(error = %err, "store job skipped: no savepoint");
        return;
    }
    let tx = WriteTx::new(conn, clock.now_ms());
    let succeeded = catch_unwind(AssertUnwindSafe(|| job.run(&tx))).unwrap_or(false);
    let closed = if succeeded {
        control(conn, "RELEASE job")
    } else {
        control(conn, "ROLLBACK TO job").and_then(|()| control(conn, "RELEASE job"))
    };
    if let Err(err) = closed {
        tracing::error!(error = %err, "store job savepoint could not be closed");
    }
}
