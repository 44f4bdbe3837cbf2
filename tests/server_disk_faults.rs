//! Disk faults on the real server, with its real SQLite file on a real small tmpfs: a disk
//! that fills while runs are active, a server started on a full disk, and a read-only state
//! directory. A full disk refuses writes (`diskFull`), loses nothing committed, keeps the
//! server up, and recovers by itself when space returns; a read-only directory is refused at
//! start with what to do.
//!
//! Mounting needs root (CI runs the tests as root); elsewhere each test says it skipped.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome, Response};
use serde_json::{Value, json};

/// Steps of every run: long enough that runs are mid-way when the disk fills.
const STEPS: u64 = 300;
/// How long the disk stays full: past one server-lease renewal (every 10 s).
const FULL_FOR: Duration = Duration::from_secs(12);
/// A bounded wait for something that follows at once.
const WAIT: Duration = Duration::from_secs(60);
/// Recovery after space returns includes the run claims' lease (30 s), which a runner
/// stopped on a full disk could not give up.
const RECOVERY_WAIT: Duration = Duration::from_secs(150);
/// The input of a run started during the test: unique bytes, so no two share a blob and each
/// start needs fresh pages (the disk fills for it).
const INPUT_BYTES: usize = 200 * 1024;

/// A tmpfs on a fresh short directory under /tmp (a Unix socket path is bounded). Dropping
/// it stops the server of the directory, then unmounts it.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (after saying why) when this process may not mount.
    fn mount(test: &str, size: &str) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED {test}: mounting a tmpfs needs root; run the disk-fault tests as root (CI does)");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("piwdf")
            .tempdir_in("/tmp")
            .expect("dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        if !out.status.success() {
            eprintln!(
                "SKIPPED {test}: could not mount a tmpfs ({}); the disk-fault tests need a root that may mount",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Take every free byte (what the server writes next fails with ENOSPC).
    fn fill(&self) {
        let mut file = std::fs::File::create(self.filler()).expect("filler");
        let chunk = vec![0x5a_u8; 64 * 1024];
        for size in [chunk.len(), 4096, 1] {
            while file.write_all(&chunk[..size]).is_ok() {}
        }
        let free = rustix::fs::statvfs(self.path()).expect("statvfs");
        assert_eq!(free.f_bavail, 0, "the tmpfs is not full");
    }

    /// Give the space back.
    fn free(&self) {
        std::fs::remove_file(self.filler()).expect("remove the filler");
    }

    fn remount(&self, mode: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(self.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "remount {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        stop_for_good(self.path());
        let unmounted = (0..50).any(|_| {
            let done = Command::new("umount")
                .arg(self.path())
                .status()
                .is_ok_and(|s| s.success());
            if !done {
                std::thread::sleep(Duration::from_millis(100));
            }
            done
        });
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        }
    }
}

/// `server stop`, and if this directory's server process still runs, SIGKILL (clean-up only;
/// the pid from its lock file, killed only while its command line names this directory).
fn stop_for_good(dir: &Path) {
    common::stop_server(dir);
    let pid = std::fs::read_to_string(dir.join("server/server.lock"))
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok());
    let ours = |pid: i32| {
        let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let command = String::from_utf8_lossy(&command);
        command.contains("pi-workflows") && command.contains(&*dir.to_string_lossy())
    };
    if let Some(pid) = pid.filter(|pid| alive(*pid) && ours(*pid)) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        let deadline = Instant::now() + WAIT;
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty()
        && !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with('Z')
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("logs/server.log")).unwrap_or_default()
}

fn wait_until(dir: &Path, what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}\nlog:\n{}",
            log_of(dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn count(dir: &Path, sql: &str) -> i64 {
    common::query_db(dir, sql)
}

fn status(dir: &Path) -> Value {
    let out = common::pi_workflows(dir, &["server", "status", "--json"], "");
    assert!(out.status.success(), "server status: {}", text(&out));
    serde_json::from_slice(&out.stdout).expect("status is JSON")
}

fn assert_state_verifies(dir: &Path, when: &str) {
    let out = common::pi_workflows(dir, &["state", "verify"], "");
    assert!(out.status.success(), "state verify {when}: {}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("integrity: ok") && report.contains("all hold"),
        "state verify {when}: {report}"
    );
}

/// The runner script: `STEPS` compute steps, each acknowledgement logged to `acks`.
fn script(acks: &Path) -> String {
    format!("steps={STEPS},step-delay-ms=10,ack-file={}", acks.display())
}

fn start_server(dir: &Path, script: &str) {
    let out = common::pi_workflows_command(dir, &["server", "start"], script)
        // A run whose runner stopped on the full disk is reclaimed soon after its claim ends.
        .env("PI_WORKFLOWS_RECLAIM_INTERVAL_MS", "500")
        .output()
        .expect("server start");
    assert!(out.status.success(), "server start: {}", text(&out));
}

/// A resolved `run.start` (no resolver needed) whose input is `INPUT_BYTES` bytes unique
/// to `seed`.
fn run_start_payload(seed: u64) -> JsonObject {
    let snapshot = common::definition(1);
    let bytes = serde_json_canonicalizer::to_vec(&snapshot).expect("canonical");
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let pad: String = (0..INPUT_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b"0123456789abcdef"[(state % 16) as usize])
        })
        .collect();
    let payload = json!({
        "workflowName": "disk-faults",
        "definitionSnapshot": snapshot,
        "definitionDigest": format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes)),
        "workflowSource": {},
        "input": {"pad": pad},
    });
    serde_json::from_value(payload).expect("object")
}

fn start_run(client: &mut Client, run_id: &str, key: &str, seed: u64) -> Response {
    client
        .request_keyed(
            Operation::RunStart,
            Some(run_id),
            run_start_payload(seed),
            Some(key.to_string()),
        )
        .expect("run.start is answered")
}

/// What the runners were told was accepted: (runner epoch, message ID).
fn acknowledged(acks: &Path) -> BTreeSet<(String, String)> {
    acks_with(acks, "accepted")
}

fn acks_with(acks: &Path, outcome: &str) -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(acks).unwrap_or_default();
    text.lines()
        .filter_map(|line| match line.split(' ').collect::<Vec<_>>().as_slice() {
            // An accepted goodbye (`runner.exiting`) changes nothing and has no receipt; an
            // accepted ready has none either (the epoch's first proposal records it).
            [_, _, "runner.exiting" | "runner.ready", "accepted"] => None,
            [epoch, id, _kind, seen] if *seen == outcome => Some((epoch.to_string(), id.to_string())),
            _ => None,
        })
        .collect()
}

/// The accepted runner-message receipts in the database.
fn accepted_receipts(dir: &Path) -> BTreeSet<(String, String)> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(dir.join("state.sqlite"), flags).expect("db");
    let mut statement = db
        .prepare("SELECT runner_epoch, message_id FROM runner_messages WHERE outcome = 'accepted'")
        .expect("receipts");
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .map(Result::unwrap)
        .collect()
}

fn assert_no_acknowledged_message_lost(dir: &Path, acks: &Path, when: &str) {
    let acknowledged = acknowledged(acks);
    let stored = accepted_receipts(dir);
    let lost: Vec<_> = acknowledged.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{when}: acknowledged runner messages without a receipt: {lost:?}"
    );
}

fn completed_steps(dir: &Path, run_id: &str) -> i64 {
    count(
        dir,
        &format!("SELECT count(*) FROM node_attempts WHERE run_id = '{run_id}' AND status = 'completed'"),
    )
}

fn run_exists(dir: &Path, run_id: &str) -> bool {
    count(dir, &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}'")) == 1
}

/// The writer alone, on any machine: SQLite's page limit (`max_page_count`) fails a write with
/// `SQLITE_FULL` as a full disk does. The batch is rolled back whole, each caller gets
/// `DiskFull` (not a refusal: a retry may pass), and the next write commits.
#[test]
fn a_write_refused_for_space_rolls_back_its_batch_and_the_next_write_commits() {
    use pi_workflows::store::runs;
    use std::sync::Arc;
    let t = common::open_store();
    let dir = t.dir.path().to_path_buf();
    let store = Arc::new(t.store);
    let exists = |run_id: &str| {
        store
            .read(|conn| Ok(runs::read_run_on(conn, run_id).is_ok()))
            .expect("read")
    };
    store
        .write(|tx| {
            let pages: i64 = tx.conn().query_row("PRAGMA page_count", [], |row| row.get(0))?;
            tx.conn()
                .query_row(&format!("PRAGMA max_page_count = {}", pages + 2), [], |_| Ok(()))?;
            Ok(())
        })
        .expect("limit");
    // Hold the writer so a small write and a large one share the next transaction.
    let holder = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|_| {
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let small = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.write(|tx| runs::queue_run(tx, &common::new_run("run-small"))))
    };
    std::thread::sleep(Duration::from_millis(20));
    let large = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.write(|tx| pi_workflows::store::blobs::put_blob(tx, &vec![7u8; 1 << 20], "application/octet-stream"))
        })
    };
    holder.join().expect("holder").expect("holding job");
    let small = small.join().expect("thread");
    let large = large.join().expect("thread").expect_err("the large write cannot fit");
    assert!(large.is_disk_full(), "{large}");
    assert_eq!(large.failure_code(), "diskFull");
    assert_eq!(large.refusal_code(), None, "a full disk is not a refusal");
    assert!(large.to_string().contains(&dir.display().to_string()), "{large}");
    match small {
        // It shared the refused transaction: rolled back with it, and told so.
        Err(err) => {
            assert!(err.is_disk_full(), "{err}");
            assert!(!exists("run-small"), "answered {err} but its run is durable");
        }
        // It committed before the large write joined the queue.
        Ok(_) => assert!(exists("run-small")),
    }
    // Space returns: the next write commits, on the same writer.
    store
        .write(|tx| {
            tx.conn()
                .query_row("PRAGMA max_page_count = 4294967294", [], |_| Ok(()))?;
            runs::queue_run(tx, &common::new_run("run-after"))
        })
        .expect("the writer keeps working after a full disk");
    assert!(exists("run-after"));
    assert!(store.writer_running());
}

#[test]
fn a_full_disk_refuses_writes_keeps_committed_state_and_recovers_when_space_returns() {
    let Some(disk) = Tmpfs::mount("full disk", "16m") else {
        return;
    };
    let dir = disk.path().to_path_buf();
    let outside = tempfile::Builder::new()
        .prefix("piwdf-acks")
        .tempdir()
        .expect("acks dir");
    let acks = outside.path().join("acks");
    let script = script(&acks);
    let old: Vec<String> = (0..3).map(|i| format!("old-{i}")).collect();
    common::queue_runs_in(&dir, old.clone());
    start_server(&dir, &script);
    let mut client = Client::connect(&dir.join("server/server.sock")).expect("connect");

    // Acknowledged run starts: every one must survive, whatever happens next.
    let mut started: Vec<String> = Vec::new();
    for i in 0..2 {
        let run_id = format!("before-{i}");
        let answer = start_run(&mut client, &run_id, &format!("key-{run_id}"), i);
        assert_eq!(answer.outcome, Outcome::Accepted, "{:?}", answer.error);
        started.push(run_id);
    }
    wait_until(&dir, "every old run has committed progress", WAIT, || {
        old.iter().all(|run_id| completed_steps(&dir, run_id) >= 3)
    });

    let progress_at_fill: Vec<i64> = old.iter().map(|run_id| completed_steps(&dir, run_id)).collect();
    disk.fill();
    let filled = Instant::now();
    // Start runs until the disk refuses one: each needs fresh pages, so the WAL's slack is
    // soon used up. What was acknowledged before the refusal is recorded.
    let mut refused = None;
    let deadline = Instant::now() + WAIT;
    for i in 0.. {
        assert!(
            Instant::now() < deadline,
            "no run start was refused on the full disk\n{}",
            log_of(&dir)
        );
        let run_id = format!("full-{i}");
        let key = format!("key-{run_id}");
        let answer = start_run(&mut client, &run_id, &key, 100 + i);
        match answer.outcome {
            Outcome::Accepted => started.push(run_id),
            _ => {
                refused = Some((run_id, key, 100 + i, answer));
                break;
            }
        }
    }
    let (refused_id, refused_key, refused_seed, answer) = refused.expect("a refusal");
    let to_refusal = filled.elapsed();
    let error = answer.error.expect("a refusal carries an error");
    assert_eq!(answer.outcome, Outcome::Rejected);
    assert_eq!(error.code, "diskFull", "{}", error.message);
    assert!(
        error.message.contains(&dir.display().to_string())
            && error.message.contains("full")
            && error.message.contains("nothing was changed")
            && error.message.contains("Free space"),
        "the refusal says what happened and what to do: {}",
        error.message
    );
    assert!(
        !error.message.contains("SELECT") && !error.message.contains("INSERT"),
        "{}",
        error.message
    );

    // Every runner proposes, is refused, and is stopped; no run is failed for it.
    wait_until(&dir, "no runner is left on the full disk", WAIT, || {
        status(&dir)["activeRunners"] == 0
    });
    let again = start_run(&mut client, "full-again", "key-full-again", 7);
    assert_eq!(
        again.error.as_ref().map(|error| error.code.as_str()),
        Some("diskFull"),
        "writes stay refused while the disk is full"
    );
    let full = status(&dir);
    assert_eq!(full["state"], "running", "the server stays up on a full disk: {full}");
    assert_eq!(full["epoch"], 1);
    assert_state_verifies(&dir, "on the full disk");
    for run_id in &started {
        assert!(run_exists(&dir, run_id), "acknowledged run start {run_id} lost");
    }
    for run_id in [refused_id.as_str(), "full-again"] {
        assert!(!run_exists(&dir, run_id), "refused run start {run_id} left a row");
        assert_eq!(
            count(
                &dir,
                &format!("SELECT count(*) FROM host_commands WHERE idempotency_key = 'key-{run_id}'")
            ),
            0,
            "a refusal for a full disk is not stored: a retry may pass"
        );
    }
    for run_id in &old {
        assert!(completed_steps(&dir, run_id) >= 3, "{run_id} lost committed progress");
    }
    assert_no_acknowledged_message_lost(&dir, &acks, "on the full disk");
    // The runners were stopped by the refusals, not by an ending: their runs are unfinished.
    for run_id in &old {
        assert_eq!(
            common::query_db::<String>(&dir, &format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
            "running",
            "{run_id} is left as it was when its runner was refused"
        );
    }
    assert_eq!(
        count(
            &dir,
            "SELECT count(*) FROM runs WHERE status IN ('failed', 'timed_out')"
        ),
        0
    );

    // Keep it full past a lease renewal (every 10 s) and the runs' claim renewals: the
    // server keeps answering, and nothing it could not write is lost.
    while filled.elapsed() < FULL_FOR {
        assert_eq!(status(&dir)["state"], "running", "the server stays up on a full disk");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_state_verifies(&dir, "after the disk stayed full");
    assert_no_acknowledged_message_lost(&dir, &acks, "after the disk stayed full");

    // Space returns: the next write commits, with no restart.
    let full_for = filled.elapsed();
    let runner_refusals = acks_with(&acks, "rejected").len();
    disk.free();
    let freed = Instant::now();
    let after = start_run(&mut client, "after-0", "key-after-0", 1_000);
    assert_eq!(after.outcome, Outcome::Accepted, "{:?}", after.error);
    started.push("after-0".to_string());
    let retried = start_run(&mut client, &refused_id, &refused_key, refused_seed);
    assert_eq!(
        retried.outcome,
        Outcome::Accepted,
        "a start refused for the full disk passes on retry: {:?}",
        retried.error
    );
    started.push(refused_id);

    let all: Vec<String> = old.iter().chain(&started).cloned().collect();
    wait_until(&dir, "every run completes after space returned", RECOVERY_WAIT, || {
        count(&dir, "SELECT count(*) FROM runs WHERE status = 'completed'") == all.len() as i64
    });
    eprintln!(
        "figures: old runs at {progress_at_fill:?} of {STEPS} steps when the disk filled; first refused run start \
         after {to_refusal:?} ({} accepted on the full disk before it); {runner_refusals} runner proposals seen refused (a lower bound: a runner stopped \
         at once may not log it); \
         full for {full_for:?}; every run completed {:?} after space returned; generations of the old runs {:?}",
        started.len() - 4,
        freed.elapsed(),
        old.iter()
            .map(|run_id| count(
                &dir,
                &format!("SELECT max(generation) FROM run_workers WHERE run_id = '{run_id}'")
            ))
            .collect::<Vec<_>>()
    );
    for run_id in &all {
        let steps = completed_steps(&dir, run_id);
        let distinct = count(
            &dir,
            &format!(
                "SELECT count(DISTINCT node_id) FROM node_attempts WHERE run_id = '{run_id}' AND status = 'completed'"
            ),
        );
        assert_eq!(
            (steps, distinct),
            (STEPS as i64, STEPS as i64),
            "{run_id}: every step exactly once"
        );
    }
    assert_eq!(
        count(&dir, "SELECT count(*) FROM runs").max(0) as usize,
        all.len(),
        "only acknowledged runs exist"
    );
    assert_eq!(
        count(&dir, "SELECT count(*) FROM runner_messages WHERE outcome = 'rejected'"),
        0,
        "no runner message was refused as the workflow's fault"
    );
    assert_eq!(
        count(&dir, "SELECT count(*) FROM events WHERE event_type = 'run.failed'"),
        0
    );
    assert_no_acknowledged_message_lost(&dir, &acks, "after recovery");
    assert_state_verifies(&dir, "after recovery");
    let recovered = status(&dir);
    assert_eq!(recovered["epoch"], 1, "recovered without a restart: {recovered}");
    assert!(!log_of(&dir).contains("panicked"), "{}", log_of(&dir));
    drop(client);
    // Stopping needs no disk space either (checked here with space; see the next test).
    let stop = common::pi_workflows(&dir, &["server", "stop"], "");
    assert!(stop.status.success(), "{}", text(&stop));
}

#[test]
fn a_server_starting_on_a_full_disk_exits_with_what_to_do_and_starts_once_space_returns() {
    let Some(disk) = Tmpfs::mount("start on a full disk", "4m") else {
        return;
    };
    let dir = disk.path().to_path_buf();
    common::queue_runs_in(&dir, ["kept-0".to_string()]);
    start_server(&dir, "steps=3");
    wait_until(&dir, "the run completes", WAIT, || {
        count(
            &dir,
            "SELECT count(*) FROM runs WHERE run_id = 'kept-0' AND status = 'completed'",
        ) == 1
    });
    // Stopping needs no space: `server stop` is not refused for its receipt.
    disk.fill();
    let stop = common::pi_workflows(&dir, &["server", "stop"], "");
    assert!(
        stop.status.success(),
        "a server on a full disk still stops: {}",
        text(&stop)
    );
    disk.free();
    // Checkpoint the WAL away (no server runs), so a start must grow the files again.
    let db = rusqlite::Connection::open(dir.join("state.sqlite")).expect("db");
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(db);
    disk.fill();

    let start = common::pi_workflows(&dir, &["server", "start"], "");
    assert_eq!(start.status.code(), Some(1), "{}", text(&start));
    let message = String::from_utf8_lossy(&start.stderr);
    assert!(
        message.contains(&dir.display().to_string()) && message.contains("is full") && message.contains("free space"),
        "server start says the disk is full and what to do: {message}"
    );
    assert!(
        !message.contains("panicked") && !message.contains("Move it aside"),
        "{message}"
    );
    let run = common::pi_workflows(&dir, &["server", "run"], "");
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let message = String::from_utf8_lossy(&run.stderr);
    assert!(
        message.contains(&dir.display().to_string()) && message.contains("is full") && message.contains("Free space"),
        "server run says the disk is full and what to do: {message}"
    );
    assert!(
        !message.contains("panicked") && !message.contains("Move it aside"),
        "{message}"
    );
    let status = common::pi_workflows(&dir, &["server", "status"], "");
    assert_eq!(status.status.code(), Some(3), "no server runs: {}", text(&status));

    disk.free();
    start_server(&dir, "steps=3");
    assert_state_verifies(&dir, "after starting once space returned");
    assert_eq!(
        count(
            &dir,
            "SELECT count(*) FROM runs WHERE run_id = 'kept-0' AND status = 'completed'"
        ),
        1,
        "the committed run is still there"
    );
}

#[test]
fn a_read_only_state_directory_is_refused_at_start_with_what_to_do() {
    let Some(disk) = Tmpfs::mount("read-only state directory", "8m") else {
        return;
    };
    let dir = disk.path().to_path_buf();
    let out = common::pi_workflows(&dir, &["server", "start"], "");
    assert!(out.status.success(), "{}", text(&out));
    stop_for_good(&dir);
    let listing = || {
        let mut files: Vec<(String, u64)> = walk(&dir);
        files.sort();
        files
    };
    let before = listing();
    disk.remount("ro");
    for args in [&["server", "start"][..], &["server", "run"], &["state", "status"]] {
        let out = common::pi_workflows(&dir, args, "");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let message = String::from_utf8_lossy(&out.stderr);
        assert!(
            message.contains(&dir.display().to_string())
                && message.contains("read-only")
                && message.contains("nothing was started or changed")
                && message.contains("Remount it read-write"),
            "{args:?} names the directory and what to do: {message}"
        );
        assert!(!message.contains("panicked"), "{message}");
    }
    assert_eq!(listing(), before, "nothing was written");

    disk.remount("rw");
    let out = common::pi_workflows(&dir, &["server", "start"], "");
    assert!(out.status.success(), "{}", text(&out));
    assert_state_verifies(&dir, "after the remount");
}

/// Every file under `dir` with its size.
fn walk(dir: &Path) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").map(Result::unwrap) {
        let meta = entry.metadata().expect("metadata");
        if meta.is_dir() {
            found.extend(walk(&entry.path()));
        } else {
            found.push((entry.path().display().to_string(), meta.len()));
        }
    }
    found
}
