//! Startup recovery on the real binary: SIGKILL the server while a runner works, start a new
//! server, and the run resumes under a new generation and completes; the old runner epoch
//! is closed as orphaned and no process survives.

mod common;

use common::{SERVER_WAIT as WAIT, pi_workflows, wait_for_db as wait_for};

use std::path::Path;
use std::time::{Duration, Instant};

fn server_pid(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("server/server.lock"))
        .expect("lock")
        .trim()
        .parse()
        .expect("pid")
}

#[test]
fn a_run_interrupted_by_a_server_crash_resumes_under_a_new_generation() {
    let root = tempfile::Builder::new().prefix("piwc").tempdir_in("/tmp").expect("dir");
    let dir = root.path();
    common::queue_runs_in(dir, ["run-crash".to_string()]);
    let script = "steps=20,step-delay-ms=100,grandchildren";
    assert!(pi_workflows(dir, &["server", "start"], script).status.success());
    wait_for(
        dir,
        "the first runner made progress",
        "SELECT count(*) FROM node_attempts WHERE status = 'completed'",
    );
    let old_runner: i64 = common::query_db::<i64>(dir, "SELECT pid FROM run_workers");
    let pid = server_pid(dir);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");

    let out = pi_workflows(dir, &["server", "start"], script);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(
        dir,
        "the run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(dir.join("state.sqlite"), flags).expect("db");
    let workers: Vec<String> = db
        .prepare("SELECT generation || ' ' || status FROM run_workers ORDER BY started_at")
        .expect("sql")
        .query_map([], |row| row.get(0))
        .expect("rows")
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        common::query_db::<i64>(dir, "SELECT count(*) FROM run_workers WHERE status = 'orphaned'"),
        1,
        "{workers:?}"
    );
    wait_for(
        dir,
        "the new runner exits",
        "SELECT count(*) FROM run_workers WHERE status = 'exited'",
    );
    assert!(
        common::query_db::<i64>(dir, "SELECT max(generation) FROM run_workers") >= 3,
        "recovery and restart take new generations"
    );
    assert_eq!(
        common::query_db::<i64>(dir, "SELECT count(*) FROM events WHERE event_type = 'run.failed'"),
        0
    );
    let deadline = Instant::now() + WAIT;
    while !supervisors::process::group_members(old_runner as i32).is_empty() {
        assert!(Instant::now() < deadline, "the old runner's group survived the crash");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(pi_workflows(dir, &["server", "stop"], script).status.success());
}
