//! The writer thread: group commit keeps each job atomic, and every answer matches what is
//! durable, even when SQLite aborts the shared transaction in the middle of a batch.

mod common;

use std::sync::Arc;
use std::time::Duration;

use pi_workflows::store::{Durability, Store, StoreError};
use pi_workflows::store::{run_view, runs};

/// Occupy the writer so the next jobs queue up and share one transaction.
fn hold_writer(store: &Arc<Store>, hold: Duration) -> std::thread::JoinHandle<()> {
    let store = Arc::clone(store);
    let handle = std::thread::spawn(move || {
        store
            .write(move |_| {
                std::thread::sleep(hold);
                Ok(())
            })
            .expect("holding job");
    });
    std::thread::sleep(Duration::from_millis(50));
    handle
}

/// Whether the run is stored, read both ways: on a reader connection, and as a small read
/// (on the writer's connection when it is between batches). Both must always agree.
fn run_exists(store: &Store, run_id: &str) -> bool {
    let found = |conn: &rusqlite::Connection| Ok(runs::read_run_on(conn, run_id).is_ok());
    let read = store.read(found).expect("read");
    let small = store.read_small(found).expect("small read");
    assert_eq!(read, small, "a small read and a reader disagree about {run_id}");
    read
}

#[test]
fn a_failing_job_rolls_back_alone_within_a_shared_commit() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let holder = hold_writer(&store, Duration::from_millis(300));
    let failing = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|tx| {
                runs::queue_run(tx, &common::new_run("run-failing"))?;
                Err::<(), _>(StoreError::RunNotFound {
                    run_id: "forced".to_string(),
                })
            })
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let succeeding = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.write(|tx| runs::queue_run(tx, &common::new_run("run-kept"))))
    };
    holder.join().expect("holder");
    assert!(failing.join().expect("thread").is_err());
    assert_eq!(succeeding.join().expect("thread").expect("committed"), 1);
    assert!(!run_exists(&store, "run-failing"), "a failed job's writes survived");
    assert!(run_exists(&store, "run-kept"));
}

/// A job alone in its transaction: its failure or panic leaves nothing behind, the caller gets
/// the job's own error, and the writer goes on.
#[test]
fn a_failing_or_panicking_job_alone_leaves_nothing_and_the_writer_goes_on() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let failed = store.write(|tx| {
        runs::queue_run(tx, &common::new_run("run-failing-alone"))?;
        Err::<(), _>(StoreError::RunNotFound {
            run_id: "forced".to_string(),
        })
    });
    assert!(
        matches!(failed, Err(StoreError::RunNotFound { .. })),
        "the job's own error: {failed:?}"
    );
    assert!(
        !run_exists(&store, "run-failing-alone"),
        "a failed job's writes survived"
    );
    let panicked = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|tx| -> Result<(), StoreError> {
                runs::queue_run(tx, &common::new_run("run-panicking-alone"))?;
                panic!("a job that panics after its write");
            })
        })
        .join()
        .expect("the caller gets an answer, not the panic")
    };
    assert!(panicked.is_err(), "a panicking job must not report success");
    assert!(
        !run_exists(&store, "run-panicking-alone"),
        "a panicked job's writes survived"
    );
    assert_eq!(
        store
            .write(|tx| runs::queue_run(tx, &common::new_run("run-after-alone")))
            .expect("the writer keeps working"),
        1
    );
    assert!(run_exists(&store, "run-after-alone"));
}

#[test]
fn answers_match_durable_state_when_sqlite_aborts_the_transaction() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let holder = hold_writer(&store, Duration::from_millis(300));
    // Job A fills the database limit: SQLite rolls back the whole shared transaction.
    let aborting = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|tx| {
                let conn = tx.conn();
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                conn.query_row(&format!("PRAGMA max_page_count = {}", pages + 1), [], |_| Ok(()))?;
                let result = pi_workflows::store::blobs::put_blob(tx, &vec![7u8; 1 << 20], "application/octet-stream");
                conn.query_row("PRAGMA max_page_count = 4294967294", [], |_| Ok(()))?;
                result.map(|_| ())
            })
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    // Job B queues behind A in the same batch.
    let later = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.write(|tx| runs::queue_run(tx, &common::new_run("run-after-abort"))))
    };
    holder.join().expect("holder");
    let aborted = aborting.join().expect("thread");
    assert!(aborted.is_err(), "the oversized write must fail");
    let later = later.join().expect("thread");
    assert_eq!(
        later.is_ok(),
        run_exists(&store, "run-after-abort"),
        "job B was answered {later:?} but its durable state disagrees"
    );
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-next")))
        .expect("the writer keeps working");
}

/// The `synchronous` setting in force in the job's own transaction.
fn synchronous_in(tx: &pi_workflows::store::WriteTx<'_>) -> Result<i64, StoreError> {
    Ok(tx.conn().query_row("PRAGMA synchronous", [], |row| row.get(0))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_commits_with_an_fsync_whenever_one_of_its_jobs_needs_the_disk() {
    const NORMAL: i64 = 1;
    const FULL: i64 = 2;
    let t = common::open_store();
    let store = Arc::new(t.store);
    let kernel_alone = store
        .write_async(Durability::Kernel, synchronous_in)
        .await
        .expect("kernel job");
    assert_eq!(kernel_alone, NORMAL, "a batch of kernel jobs alone skips the fsync");
    let disk_after_kernel = store
        .write_async(Durability::Disk, synchronous_in)
        .await
        .expect("disk job");
    assert_eq!(
        disk_after_kernel, FULL,
        "a disk job after a kernel batch gets its fsync back"
    );
    // Both queued behind a held writer share one transaction: the disk job wins.
    let holder = hold_writer(&store, Duration::from_millis(300));
    let kernel = store.submit_write(Durability::Kernel, synchronous_in).expect("queued");
    let disk = store.submit_write(Durability::Disk, |tx| {
        runs::queue_run(tx, &common::new_run("run-shared"))?;
        synchronous_in(tx)
    });
    let (kernel, disk) = (kernel.wait().await, disk.expect("queued").wait().await);
    holder.join().expect("holder");
    assert_eq!(
        kernel.expect("kernel job"),
        FULL,
        "a kernel job sharing a disk job's batch is synced with it"
    );
    assert_eq!(disk.expect("disk job"), FULL);
    assert!(run_exists(&store, "run-shared"));
    // The synchronous blocking `write` is always a disk write.
    let blocking = tokio::task::block_in_place(|| store.write(synchronous_in)).expect("blocking write");
    assert_eq!(blocking, FULL);
}

#[test]
fn only_a_commit_that_changed_rows_wakes_the_watchers_of_commits() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let commits = store.commits();
    let before = *commits.borrow();
    // A write that finds nothing to change commits, but is no news to a live view; two that
    // change rows follow. The writer moves the counter after a batch's answers and before it
    // takes the next job, so once the closing empty write is answered, every earlier write
    // has moved it or not.
    store.write(|_| Ok(())).expect("an empty write");
    for run_id in ["run-news-1", "run-news-2"] {
        store
            .write(|tx| runs::queue_run(tx, &common::new_run(run_id)))
            .expect("a run queued");
    }
    store.write(|_| Ok(())).expect("the closing empty write");
    assert_eq!(
        *commits.borrow(),
        before + 2,
        "the commit counter moves once per write that changed rows, never for one that changed nothing"
    );
}

/// A result read under one data version stays exact while the version is unchanged (the
/// `run.status` cache relies on it): a write that changed rows has moved the version by the
/// time its caller hears of the commit, and one that changed nothing never moves it.
#[test]
fn the_data_version_moves_before_a_changing_write_is_answered() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let before = store.data_version();
    store.write(|_| Ok(())).expect("an empty write");
    assert_eq!(store.data_version(), before, "a write that changed nothing");
    for (n, run_id) in ["run-version-1", "run-version-2"].into_iter().enumerate() {
        store
            .write(|tx| runs::queue_run(tx, &common::new_run(run_id)))
            .expect("a run queued");
        assert_eq!(
            store.data_version(),
            before + n as u64 + 1,
            "answered after the version moved"
        );
    }
}

/// Queue `run_id` with an awaited `Disk` write (a watched change).
async fn queue_run_async(store: &Store, run_id: &'static str) {
    store
        .write_async(Durability::Disk, move |tx| {
            runs::queue_run(tx, &common::new_run(run_id))
        })
        .await
        .expect("a run queued");
}

/// The counter moves after a batch's answers and before the writer takes the next job: once
/// this empty write is answered, every earlier commit has moved it or not.
async fn close_earlier_commits(store: &Store) {
    store
        .write_async(Durability::Disk, |_| Ok(()))
        .await
        .expect("the closing empty write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_unwatched_rows_alone_wakes_no_watcher() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    queue_run_async(&store, "run-content").await;
    // The queued run's commit moves the counter after its answer: close it before reading.
    close_earlier_commits(&store).await;
    let commits = store.commits();
    let before = *commits.borrow();
    // Content a view derived: its rows commit, and no watcher reads them.
    let stored = store
        .write_unwatched_async(|tx| run_view::put_view_content(tx, "run-content", "text/plain", b"derived"))
        .await
        .expect("content stored");
    close_earlier_commits(&store).await;
    let found = store
        .read(|conn| run_view::view_content_ref(conn, "run-content", &stored.digest, "text/plain"))
        .expect("read");
    assert_eq!(found, Some(stored), "unwatched rows are committed like any others");
    assert_eq!(*commits.borrow(), before, "a commit of unwatched rows alone is no news");
    queue_run_async(&store, "run-news").await;
    close_earlier_commits(&store).await;
    assert_eq!(
        *commits.borrow(),
        before + 1,
        "a watched write that changed rows is news"
    );
}

#[tokio::test]
async fn releasing_cache_memory_keeps_every_read_and_write_working() {
    let t = common::open_store();
    let store = t.store;
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-before")))
        .unwrap();
    assert!(run_exists(&store, "run-before"));

    store.release_memory().await.unwrap();
    assert!(
        run_exists(&store, "run-before"),
        "a read after the release opens a reader again and sees the data"
    );
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-after")))
        .unwrap();
    assert!(
        run_exists(&store, "run-after"),
        "the writer works after its caches were released"
    );
    store.release_memory().await.unwrap();
    assert!(run_exists(&store, "run-before") && run_exists(&store, "run-after"));
}

#[test]
fn a_nested_change_that_fails_rolls_back_alone_and_the_job_commits_the_rest() {
    let t = common::open_store();
    let committed = t
        .store
        .write(|tx| {
            runs::queue_run(tx, &common::new_run("run-before"))?;
            let failed = tx.nested(|tx| {
                runs::queue_run(tx, &common::new_run("run-nested-failing"))?;
                Err::<(), _>(StoreError::RunNotFound {
                    run_id: "forced".to_string(),
                })
            });
            let kept = tx.nested(|tx| runs::queue_run(tx, &common::new_run("run-nested-kept")))?;
            runs::queue_run(tx, &common::new_run("run-after"))?;
            Ok((failed.is_err(), kept))
        })
        .expect("the job commits");
    assert_eq!(committed, (true, 1), "the failed nested change reports its error");
    assert!(
        !run_exists(&t.store, "run-nested-failing"),
        "a failed nested change's writes survived"
    );
    for kept in ["run-before", "run-nested-kept", "run-after"] {
        assert!(run_exists(&t.store, kept), "{kept} was lost with a nested failure");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_write_commits_with_the_next_job_or_alone_after_its_wait() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    let before = store.data_version();
    let deferred = store
        .submit_write(Durability::Deferred, |tx| {
            runs::queue_run(tx, &common::new_run("run-deferred-1"))
        })
        .expect("queued");
    // Well inside the deferred job's wait: a job the writer took alone would be committed
    // by now.
    tokio::time::sleep(Duration::from_millis(2)).await;
    queue_run_async(&store, "run-deferred-2").await;
    deferred.wait().await.expect("the deferred write");
    assert_eq!(store.data_version(), before + 1, "one commit took both");
    assert!(run_exists(&store, "run-deferred-1") && run_exists(&store, "run-deferred-2"));
    // With nothing to ride on, it commits alone once its wait is over.
    let alone = store
        .submit_write(Durability::Deferred, |tx| {
            runs::queue_run(tx, &common::new_run("run-deferred-3"))
        })
        .expect("queued");
    alone.wait().await.expect("the deferred write alone");
    assert!(run_exists(&store, "run-deferred-3"));
    assert_eq!(store.data_version(), before + 2);
}

/// Deleted files this process has open, bar databases: SQLite's temp files (a spilled
/// journal) have no name from the start. (Another test's database shows as deleted while its
/// temp directory is removed before its store is dropped.)
fn sqlite_temp_files_open() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .expect("fd list")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|target| target.ends_with(" (deleted)") && !target.contains(".sqlite"))
        .collect()
}

#[test]
fn a_big_jobs_savepoint_journal_stays_in_memory_and_still_rolls_back() {
    const ROWS: usize = 120;
    const ROW_BYTES: usize = 3_000;
    let t = common::open_store();
    // ~120 pages of rows (one a page), committed; a later job that rewrites them all makes
    // SQLite copy each page into the job's savepoint journal: ~480 KiB, past SQLite's 64 KiB
    // default spill and below the store's limit.
    t.store
        .write(|tx| {
            tx.conn()
                .execute_batch("CREATE TABLE scratch (id INTEGER PRIMARY KEY, body BLOB)")?;
            for id in 0..ROWS {
                tx.conn().execute(
                    "INSERT INTO scratch (id, body) VALUES (?1, randomblob(?2))",
                    rusqlite::params![id as i64, ROW_BYTES as i64],
                )?;
            }
            Ok(())
        })
        .expect("rows committed");
    let before: Vec<u8> = t
        .store
        .read(|conn| Ok(conn.query_row("SELECT body FROM scratch WHERE id = 7", [], |row| row.get(0))?))
        .expect("read");
    // The job fails after its rewrite (its savepoint is rolled back); a panic inside a job is
    // caught by the writer, so what it saw comes out through a channel.
    let (seen, files) = std::sync::mpsc::channel();
    let failed = t.store.write(move |tx| {
        tx.conn()
            .execute("UPDATE scratch SET body = zeroblob(?1)", [ROW_BYTES as i64])?;
        seen.send(sqlite_temp_files_open()).expect("send");
        Err::<(), _>(StoreError::RunNotFound {
            run_id: "forced".to_string(),
        })
    });
    assert!(
        matches!(failed, Err(StoreError::RunNotFound { .. })),
        "the job reports its own error: {failed:?}"
    );
    let files = files.recv().expect("the job ran");
    assert!(
        files.is_empty(),
        "a job's savepoint journal spilled to a file: {files:?}"
    );
    let after: Vec<u8> = t
        .store
        .read(|conn| Ok(conn.query_row("SELECT body FROM scratch WHERE id = 7", [], |row| row.get(0))?))
        .expect("read");
    assert_eq!(after, before, "the big job's changes were rolled back from its journal");
}

/// A small read borrows the writer's connection between batches; while a batch is open it
/// reads on a reader connection instead: it never waits for the batch, and never sees a
/// change before its commit.
#[test]
fn a_small_read_sees_every_answered_write_and_never_an_open_batch() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-committed")))
        .expect("write");
    assert!(run_exists(&store, "run-committed"), "an answered write is seen");

    let (inside, batch_open) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let writer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(move |tx| {
                runs::queue_run(tx, &common::new_run("run-open"))?;
                inside.send(()).expect("signal");
                // Held until the test's reads are done: a read that waited for this batch
                // would never let it go on.
                Ok(released.recv_timeout(Duration::from_secs(10)).is_ok())
            })
        })
    };
    batch_open.recv().expect("the batch began");
    assert!(run_exists(&store, "run-committed"));
    assert!(!run_exists(&store, "run-open"), "a change was seen before its commit");
    release.send(()).expect("release");
    assert!(
        writer.join().expect("writer").expect("committed"),
        "the batch waited for a read"
    );
    assert!(run_exists(&store, "run-open"));
}

/// The writer's connection could write, so a small read that tries is rolled back and
/// refused; the connection stays usable for both reads and writes.
#[test]
fn a_small_read_that_writes_is_refused_and_changes_nothing() {
    let t = common::open_store();
    let store = Arc::new(t.store);
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-kept")))
        .expect("write");
    let refused = store.read_small(|conn| {
        conn.execute("DELETE FROM runs WHERE run_id = 'run-kept'", [])?;
        Ok(())
    });
    assert!(refused.is_err(), "a read changed rows");
    assert!(run_exists(&store, "run-kept"));
    store
        .write(|tx| runs::queue_run(tx, &common::new_run("run-after")))
        .expect("write after");
    assert!(run_exists(&store, "run-after"));
}
