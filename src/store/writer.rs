//! The store writer: the one connection that writes, on its own thread.
//!
//! Every job runs inside `BEGIN IMMEDIATE`. Jobs that queue up while a commit is in flight
//! share the next transaction (group commit), each inside its own savepoint, so a failing
//! job rolls back alone; every caller gets its answer only after the shared COMMIT. This is
//! how protected writes keep pace with raw commits under `synchronous = FULL`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::clock::Clock;
use super::error::{StoreError, StoreResult};

/// Jobs waiting for the writer; callers block (backpressure) beyond this.
pub const WRITER_QUEUE_LEN_MAX: usize = 1_024;
/// Jobs committed together at most; bounds one transaction's duration.
pub const GROUP_COMMIT_JOBS_MAX: usize = 64;

/// One write transaction as seen by domain code: a connection inside `BEGIN IMMEDIATE` (and
/// a savepoint of its own), with the clock read once for the whole job.
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
    reply: SyncSender<StoreResult<T>>,
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
                "the change panicked and was rolled back".to_string(),
            )),
        };
        // The caller may have given up waiting; nothing else to do then.
        let _ = self.reply.send(answer);
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
}

impl Writer {
    pub fn spawn(conn: Connection, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let (sender, receiver) = sync_channel(WRITER_QUEUE_LEN_MAX);
        let thread = std::thread::Builder::new()
            .name("store-writer".to_string())
            .spawn(move || run_writer(conn, clock, receiver))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
        })
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
            reply,
        };
        let sender = self.sender.as_ref().ok_or(StoreError::WriterStopped)?;
        sender
            .send(WriterMessage::Write(Box::new(job)))
            .map_err(|_| StoreError::WriterStopped)?;
        reply_receiver.recv().map_err(|_| StoreError::WriterStopped)?
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

fn run_writer(conn: Connection, clock: Arc<dyn Clock>, receiver: Receiver<WriterMessage>) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < GROUP_COMMIT_JOBS_MAX {
            match receiver.try_recv() {
                Ok(message) => batch.push(message),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        commit_batch(&conn, clock.as_ref(), batch);
    }
}

fn commit_batch(conn: &Connection, clock: &dyn Clock, batch: Vec<WriterMessage>) {
    let mut jobs: Vec<Box<dyn WriteJob>> = batch.into_iter().map(|WriterMessage::Write(job)| job).collect();
    let commit = match conn.execute_batch("BEGIN IMMEDIATE") {
        Ok(()) => {
            for job in &mut jobs {
                run_in_savepoint(conn, clock, job.as_mut());
            }
            conn.execute_batch("COMMIT").map_err(|err| {
                let _ = conn.execute_batch("ROLLBACK");
                err.to_string()
            })
        }
        Err(err) => Err(err.to_string()),
    };
    if let Err(message) = &commit {
        tracing::error!(error = %message, jobs = jobs.len(), "store write batch was not committed");
    }
    for job in jobs {
        job.deliver(commit.clone());
    }
}

/// Run one job inside its own savepoint; a failed or panicking job rolls back alone.
fn run_in_savepoint(conn: &Connection, clock: &dyn Clock, job: &mut dyn WriteJob) {
    if let Err(err) = conn.execute_batch("SAVEPOINT job") {
        tracing::error!(error = %err, "store job skipped: no savepoint");
        return;
    }
    let tx = WriteTx::new(conn, clock.now_ms());
    let succeeded = catch_unwind(AssertUnwindSafe(|| job.run(&tx))).unwrap_or(false);
    let end = if succeeded {
        "RELEASE job"
    } else {
        "ROLLBACK TO job; RELEASE job"
    };
    if let Err(err) = conn.execute_batch(end) {
        tracing::error!(error = %err, "store job savepoint could not be closed");
    }
}
