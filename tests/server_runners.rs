//! Supervised runners on the real server with the scripted test runner: the runner channel,
//! the ready handshake, fencing, and the documented outcome of each fault, with no process
//! left behind.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rusqlite::OpenFlags;

const WAIT: Duration = Duration::from_secs(30);

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    /// Queue `runs` runs, then start a server whose runners follow `script`.
    fn start(runs: usize, script: &str, extra_env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new().prefix("piwr").tempdir_in("/tmp").expect("dir");
        common::queue_runs_in(dir.path(), (0..runs).map(|index| format!("run-{index}")));
        let mut command = common::pi_workflows_command(dir.path(), &["server", "start"], script);
        command.env("PI_WORKFLOWS_RUNNER_READY_MS", "1500");
        for (name, value) in extra_env {
            command.env(name, value);
        }
        let out = command.output().expect("server start");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    fn db(&self) -> rusqlite::Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY;
        rusqlite::Connection::open_with_flags(self.dir.path().join("state.sqlite"), flags).expect("read db")
    }

    fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> T {
        common::query_db(self.dir.path(), sql)
    }

    fn wait_for(&self, what: &str, sql: &str) {
        let deadline = Instant::now() + WAIT;
        while self.query::<i64>(sql) == 0 {
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/server.log")).unwrap_or_default()
    }

    fn runner_pids(&self) -> Vec<i32> {
        let db = self.db();
        let mut statement = db
            .prepare("SELECT pid FROM run_workers WHERE pid IS NOT NULL")
            .expect("pids");
        statement
            .query_map([], |row| row.get(0))
            .expect("query")
            .map(Result::unwrap)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

/// No live (non-zombie) process remains in any runner's process group.
fn assert_no_survivors(pids: &[i32]) {
    let deadline = Instant::now() + WAIT;
    for pid in pids {
        while !supervisors::process::group_members(*pid).is_empty() {
            assert!(Instant::now() < deadline, "runner group {pid} still has live members");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn runner_program() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pi-workflows-test-runner"))
}

#[test]
fn a_scripted_run_completes_through_fenced_messages() {
    assert!(runner_program().exists());
    let server = Server::start(1, "steps=3", &[]);
    server.wait_for(
        "the run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
    server.wait_for(
        "the runner exits",
        "SELECT count(*) FROM run_workers WHERE status = 'exited'",
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
        3
    );
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "done");
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL"),
        0
    );
    // 3 pure compute nodes (one `node.finished` each: start and finish in one commit),
    // run.finished: every accepted proposal has a receipt. The ready has none (the first
    // proposal records it: the worker ready, the run running); the goodbye
    // (`runner.exiting`) changes nothing and has none either.
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM runner_messages WHERE outcome = 'accepted'"),
        4
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_workers WHERE ready_at IS NOT NULL"),
        1
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM events WHERE event_type = 'run.running'"),
        1
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM events WHERE event_type = 'node.started'"),
        0
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM events WHERE event_type = 'node.finished'"),
        3
    );
    // The run's output is stored, digest-bound, with the run.
    assert_eq!(
        server.query::<i64>(
            "SELECT count(*) FROM runs r JOIN blobs b ON b.blob_hash = r.output_hash AND b.media_type = 'application/json'"
        ),
        1
    );
    assert_no_survivors(&server.runner_pids());
}

#[test]
fn a_runner_crash_after_progress_parks_the_run_as_worker_crashed() {
    // work-ms makes each node two-phase (node.started first): ready, started, finished,
    // started → crash with an attempt running.
    let server = Server::start(1, "steps=3,work-ms=1,crash-after=4,grandchildren", &[]);
    server.wait_for(
        "the runner is recorded as crashed",
        "SELECT count(*) FROM run_workers WHERE status = 'crashed'",
    );
    assert_eq!(
        server.query::<String>("SELECT status_detail FROM runs"),
        "workerCrashed"
    );
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "parked");
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM node_attempts WHERE status = 'interrupted'"),
        1
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM events WHERE event_type = 'run.failed'"),
        0
    );
    assert_no_survivors(&server.runner_pids());
}

#[test]
fn a_runner_that_never_becomes_ready_is_killed_and_parked_without_relaunch() {
    let server = Server::start(1, "hang-before-ready,grandchildren,ignore-sigterm", &[]);
    server.wait_for(
        "the runner times out",
        "SELECT count(*) FROM run_workers WHERE status = 'timedOut'",
    );
    assert_eq!(
        server.query::<String>("SELECT status_detail FROM runs"),
        "runnerNoProgress"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_workers"),
        1,
        "runnerNoProgress must not relaunch"
    );
    assert_no_survivors(&server.runner_pids());
}

/// A runner program that cannot be started: the run was admitted and its launch recorded
/// before the spawn, and the failed launch parks it (`runnerNoProgress`, never relaunched)
/// instead of leaving it claimed or retrying it forever.
#[test]
fn a_runner_program_that_cannot_start_parks_its_admitted_run_once() {
    let missing = "/nonexistent/pi-workflows-runner";
    let server = Server::start(1, "complete", &[("PI_WORKFLOWS_RUNNER", missing)]);
    server.wait_for(
        "the failed launch is parked",
        "SELECT count(*) FROM runs WHERE status_detail = 'runnerNoProgress'",
    );
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "parked");
    assert_eq!(
        server.query::<String>("SELECT status FROM run_workers"),
        "crashed",
        "the launch was recorded before the spawn, and its end after the failed start"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_workers"),
        1,
        "a parked launch is not retried"
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_id IS NOT NULL"),
        0,
        "the parked run's claim is released"
    );
}

#[test]
fn a_stale_generation_gets_claim_lost_and_the_runner_is_stopped() {
    let server = Server::start(1, "steps=2,stale-generation", &[]);
    server.wait_for(
        "the stale runner is recorded",
        "SELECT count(*) FROM run_workers WHERE status = 'claimLost'",
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM node_attempts"),
        0,
        "a stale message changed state"
    );
    // Nothing advanced after ready, so the run needs an explicit resume.
    assert_eq!(
        server.query::<String>("SELECT status_detail FROM runs"),
        "runnerNoProgress"
    );
    assert_no_survivors(&server.runner_pids());
}

#[test]
fn garbage_and_oversized_frames_stop_only_that_runner() {
    for script in ["steps=1,garbage", "steps=1,oversized"] {
        let server = Server::start(1, script, &[]);
        server.wait_for(
            "the runner is stopped",
            "SELECT count(*) FROM run_workers WHERE finished_at IS NOT NULL",
        );
        assert_eq!(
            server.query::<String>("SELECT status FROM run_queue"),
            "parked",
            "{script}"
        );
        assert_eq!(
            server.query::<String>("SELECT status FROM runs"),
            "running",
            "{script}: a runner fault is not a run failure"
        );
        assert_no_survivors(&server.runner_pids());
    }
}

#[test]
fn capacity_bounds_concurrent_runners_and_queued_runs_wait() {
    let server = Server::start(3, "steps=2,step-delay-ms=100", &[("PI_WORKFLOWS_MAX_WORKERS", "1")]);
    server.wait_for(
        "all runs complete",
        "SELECT count(*) = 3 FROM runs WHERE status = 'completed'",
    );
    // With capacity 1, runner lifetimes never overlap.
    let overlaps: i64 = server.query(
        "SELECT count(*) FROM run_workers a JOIN run_workers b ON a.runner_epoch < b.runner_epoch
         WHERE a.started_at < b.finished_at AND b.started_at < a.finished_at",
    );
    assert_eq!(overlaps, 0);
}

#[test]
fn stopping_the_server_parks_a_live_run_at_a_boundary() {
    let server = Server::start(1, "steps=50,step-delay-ms=200", &[]);
    server.wait_for("the runner is live", "SELECT count(*) FROM node_attempts");
    let pids = server.runner_pids();
    let stop = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(server.dir.path())
        .args(["server", "stop"])
        .output()
        .expect("stop");
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    assert_eq!(server.query::<String>("SELECT status_detail FROM runs"), "boundary");
    assert_eq!(server.query::<String>("SELECT status FROM run_workers"), "cancelled");
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM leases WHERE owner_type IS NOT NULL"),
        0
    );
    assert_no_survivors(&pids);
}

fn cli(server: &Server, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(server.dir.path())
        .args(args)
        .output()
        .expect("cli")
}

#[test]
fn pausing_a_live_run_stops_its_runner_and_resume_finishes_it() {
    let server = Server::start(1, "steps=30,step-delay-ms=50,grandchildren", &[]);
    server.wait_for(
        "the runner is live",
        "SELECT count(*) FROM node_attempts WHERE status = 'completed'",
    );
    let pids = server.runner_pids();
    let pause = cli(&server, &["run", "pause", "run-0"]);
    assert!(pause.status.success(), "{}", String::from_utf8_lossy(&pause.stderr));
    assert_eq!(server.query::<i64>("SELECT paused FROM runs"), 1);
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "parked");
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL"),
        0
    );
    assert_no_survivors(&pids);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_workers"),
        1,
        "a paused run must not be relaunched"
    );

    let resume = cli(&server, &["run", "resume", "run-0"]);
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    server.wait_for(
        "the resumed run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
    assert_eq!(
        server.query::<i64>("SELECT count(DISTINCT generation) FROM run_workers"),
        2
    );
}

#[test]
fn cancelling_live_and_queued_runs_is_terminal_and_leaves_no_process() {
    let server = Server::start(
        2,
        "steps=40,step-delay-ms=50,grandchildren",
        &[("PI_WORKFLOWS_MAX_WORKERS", "1")],
    );
    server.wait_for("the first runner is live", "SELECT count(*) FROM node_attempts");
    let live: String = server.query("SELECT run_id FROM run_workers");
    let queued = if live == "run-0" { "run-1" } else { "run-0" };
    let pids = server.runner_pids();
    // The queued run first: while the live runner holds the only slot it cannot be admitted.
    for run_id in [queued, live.as_str()] {
        let out = cli(&server, &["run", "cancel", run_id]);
        assert!(
            out.status.success(),
            "cancel {run_id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM runs WHERE status = 'cancelled'"),
        2
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_queue WHERE status = 'cancelled'"),
        2
    );
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM node_attempts WHERE status IN ('running', 'waiting')"),
        0
    );
    assert_no_survivors(&pids);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM run_workers"),
        1,
        "the cancelled queued run never starts"
    );
    let again = cli(&server, &["run", "cancel", &live]);
    assert!(!again.status.success(), "cancelling a cancelled run is refused");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("cancel"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn cancelling_a_run_while_it_is_being_admitted_succeeds() {
    let server = Server::start(2, "steps=40,step-delay-ms=50", &[("PI_WORKFLOWS_MAX_WORKERS", "1")]);
    server.wait_for("the first runner is live", "SELECT count(*) FROM node_attempts");
    let live: String = server.query("SELECT run_id FROM run_workers");
    let next = if live == "run-0" { "run-1" } else { "run-0" };
    // Cancelling the live run frees the slot; the next run is admitted at once, so the second
    // cancel meets it queued, launching (claim held, runner not yet registered) or live.
    for run_id in [live.as_str(), next] {
        let out = cli(&server, &["run", "cancel", run_id]);
        assert!(
            out.status.success(),
            "cancel {run_id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        server.query::<i64>("SELECT count(*) FROM runs WHERE status = 'cancelled'"),
        2
    );
    server.wait_for(
        "every runner epoch ended",
        "SELECT count(*) = 0 FROM run_workers WHERE finished_at IS NULL",
    );
    assert_no_survivors(&server.runner_pids());
}
