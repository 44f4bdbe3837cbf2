//! Running rows whose runner stopped working while the server lives, on the real server with
//! the scripted test runner: a runner that is SIGSTOPped or hangs (busy, never answering a
//! ping) is stopped past the stall bound, gives its claim up, and the reclaimer recovers its
//! run as startup recovery would (new generation, effects read first, requeued at a boundary
//! or parked for review), with nothing committed twice and no process left; a runner that
//! hangs every time parks for review instead of looping; a healthy runner's claim is never
//! taken, however long it runs; a claim that expired while its runner still lives (the
//! whole server was stopped) is taken only after that runner stopped itself. And a `resume`
//! of a run parked `runnerNoProgress` makes exactly one new attempt.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use pi_workflows::store::claims::RUN_CLAIM_LEASE_MS;

/// Longer than a claim lease: a reclaim after a stall waits for no lease, but some tests
/// outlive one on purpose.
const WAIT: Duration = Duration::from_secs(90);
/// How long a parked run is watched for a relaunch that must not come.
const QUIET: Duration = Duration::from_millis(1_500);
/// Short liveness bounds and a fast reclaimer, so a stall is found in about a second.
const FAST_LIVENESS: [(&str, &str); 4] = [
    ("PI_WORKFLOWS_RUNNER_PING_MS", "100"),
    ("PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS", "300"),
    ("PI_WORKFLOWS_RUNNER_STALLED_MS", "1000"),
    ("PI_WORKFLOWS_RECLAIM_INTERVAL_MS", "100"),
];

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    /// Queue `run-0`, then start a server whose runners follow `script`.
    fn start(script: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new().prefix("piwq").tempdir_in("/tmp").expect("dir");
        common::queue_runs_in(dir.path(), ["run-0".to_string()]);
        let mut command = common::pi_workflows_command(dir.path(), &["server", "start"], script);
        command.env("PI_WORKFLOWS_RUNNER_READY_MS", "5000");
        for (name, value) in env {
            command.env(name, value);
        }
        let out = command.output().expect("server start");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> T {
        common::query_db(self.dir.path(), sql)
    }

    fn count(&self, sql: &str) -> i64 {
        self.query(sql)
    }

    fn wait_for(&self, what: &str, sql: &str) {
        let deadline = Instant::now() + WAIT;
        while self.count(sql) == 0 {
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}\n{}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
            .arg("--state-dir")
            .arg(self.dir.path())
            .args(args)
            .output()
            .expect("cli")
    }

    fn rows(&self, sql: &str) -> Vec<String> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let db = rusqlite::Connection::open_with_flags(self.dir.path().join("state.sqlite"), flags).expect("db");
        let mut statement = db.prepare(sql).expect(sql);
        statement
            .query_map([], |row| row.get::<_, String>(0))
            .expect(sql)
            .collect::<Result<_, _>>()
            .expect(sql)
    }

    /// Runner epochs (`generation status ready?`), oldest first.
    fn workers(&self) -> Vec<String> {
        self.rows(
            "SELECT generation || ' ' || status || ' ' || (ready_at IS NOT NULL) FROM run_workers \
             ORDER BY started_at, rowid",
        )
    }

    fn report(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("logs/server.log")).unwrap_or_default();
        let tail: String = log
            .chars()
            .rev()
            .take(4000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let runs = self.rows(
            "SELECT r.status || ' ' || q.status || ' ' || coalesce(r.status_detail, '-') || ' rev ' || r.revision \
             FROM runs r JOIN run_queue q USING (run_id)",
        );
        let attempts = self.rows("SELECT node_id || ' ' || status FROM node_attempts ORDER BY started_at, rowid");
        format!(
            "--- runs ---\n{runs:?}\n--- attempts ---\n{attempts:?}\n--- workers ---\n{:?}\n--- log tail ---\n{tail}",
            self.workers()
        )
    }

    /// The pid of the run's live runner, once it is ready and `completed` attempts exist.
    fn live_runner_after(&self, completed: i64) -> i32 {
        self.wait_for(
            "the runner made progress",
            &format!(
                "SELECT count(*) >= {completed} FROM node_attempts WHERE status = 'completed' \
                 AND EXISTS (SELECT 1 FROM run_workers WHERE status = 'ready')"
            ),
        );
        self.query("SELECT pid FROM run_workers WHERE status = 'ready'")
    }

    /// The run completed; every node committed exactly once.
    fn assert_completed_once(&self, steps: i64) {
        self.wait_for(
            "the run completes and its runner exits",
            "SELECT count(*) FROM runs WHERE status = 'completed' \
             AND NOT EXISTS (SELECT 1 FROM run_workers WHERE status IN ('starting', 'ready'))",
        );
        assert_eq!(
            self.count("SELECT count(*) FROM node_attempts WHERE status = 'completed'"),
            steps,
            "{}",
            self.report()
        );
        assert_eq!(
            self.count("SELECT count(DISTINCT node_id) FROM node_attempts WHERE status = 'completed'"),
            steps,
            "{}",
            self.report()
        );
        assert_eq!(
            self.count("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL"),
            0
        );
    }

    /// Exactly one `run.reclaimed`, under the generation after the stalled runner's.
    fn assert_reclaimed_once_after(&self, stalled_generation: i64) {
        assert_eq!(
            self.count("SELECT count(*) FROM events WHERE event_type = 'run.reclaimed'"),
            1,
            "{}",
            self.report()
        );
        assert_eq!(
            self.count("SELECT lease_generation FROM events WHERE event_type = 'run.reclaimed'"),
            stalled_generation + 1
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

fn signal(pid: i32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// The process is gone: neither running nor a zombie (it was reaped).
fn gone(pid: i32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_gone(server: &Server, pid: i32) {
    let deadline = Instant::now() + WAIT;
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} survived\n{}", server.report());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sigstopped_runner_is_stopped_and_its_run_reclaimed_and_completed() {
    let server = Server::start("steps=8,work-ms=250", &FAST_LIVENESS);
    let pid = server.live_runner_after(2);
    signal(pid, "STOP");
    server.assert_completed_once(8);
    wait_gone(&server, pid);
    // The stopped runner is recorded as timed out after ready; the requeued run was started
    // under the generation after the reclaim's, and finished.
    assert_eq!(server.workers(), ["1 timedOut 1", "3 exited 1"], "{}", server.report());
    server.assert_reclaimed_once_after(1);
    assert!(
        server.count("SELECT count(*) FROM node_attempts WHERE status = 'interrupted'") <= 1,
        "{}",
        server.report()
    );
    assert!(server.log().contains("runner stalled"), "{}", server.report());
}

#[test]
fn a_hung_runner_is_stopped_and_its_run_reclaimed_and_completed() {
    // Generation 1 spins forever in step 2, after `node.started`; later ones run it.
    let server = Server::start("steps=3,hang-at=2,crash-first-only", &FAST_LIVENESS);
    server.wait_for(
        "the runner hangs in step 2",
        "SELECT count(*) FROM node_attempts WHERE node_id = 'step2' AND status = 'running'",
    );
    let pid: i32 = server.query("SELECT pid FROM run_workers WHERE generation = 1");
    server.assert_completed_once(3);
    wait_gone(&server, pid);
    assert_eq!(server.workers(), ["1 timedOut 1", "3 exited 1"], "{}", server.report());
    server.assert_reclaimed_once_after(1);
    // The hung attempt was interrupted by the reclaim; its node ran again, once.
    assert_eq!(
        server.rows("SELECT node_id || ' ' || status FROM node_attempts WHERE node_id = 'step2' ORDER BY started_at"),
        ["step2 interrupted", "step2 completed"]
    );
}

#[test]
fn a_runner_hung_while_applying_an_effect_parks_its_run_as_effect_ambiguous() {
    let effects = tempfile::NamedTempFile::new().expect("effect file");
    let path = effects.path().display().to_string();
    // Applies the effect, then sleeps a minute before settling it: silent past the bound.
    let script = format!("steps=2,effect-file={path},effect-ms=60000");
    let server = Server::start(&script, &FAST_LIVENESS);
    server.wait_for(
        "the run parks for its effect",
        "SELECT count(*) FROM runs WHERE status_detail = 'effectAmbiguous'",
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        server.workers(),
        ["1 timedOut 1"],
        "an ambiguous effect is never retried"
    );
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "parked");
    assert_eq!(server.query::<String>("SELECT status FROM effects"), "ambiguous");
    server.assert_reclaimed_once_after(1);
    let applied = std::fs::read_to_string(effects.path()).expect("effect file");
    assert_eq!(applied.lines().count(), 1, "applied once: {applied}");
    assert_eq!(
        server.count("SELECT count(*) FROM leases WHERE resource_type = 'run' AND owner_type IS NOT NULL"),
        0
    );
}

#[test]
fn a_runner_that_hangs_every_time_parks_for_review_instead_of_looping() {
    let server = Server::start("steps=2,hang-at=1", &FAST_LIVENESS);
    server.wait_for(
        "the run parks after its second stall",
        "SELECT count(*) FROM runs WHERE status_detail = 'runnerNoProgress'",
    );
    std::thread::sleep(QUIET);
    // The first stall was requeued (it may have been transient), the second was not.
    assert_eq!(
        server.workers(),
        ["1 timedOut 1", "3 timedOut 1"],
        "{}",
        server.report()
    );
    assert_eq!(server.query::<String>("SELECT status FROM run_queue"), "parked");
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE event_type = 'run.reclaimed'"),
        2
    );

    // A resume makes exactly one new attempt, which stalls and parks again. While the run
    // was parked the reclaimer found no running run and waits for a commit: the resume's
    // wakes it, or the new stall would never be reclaimed.
    let resume = server.cli(&["run", "resume", "run-0"]);
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    server.wait_for(
        "the resumed run parks again",
        "SELECT count(*) FROM run_workers w JOIN run_queue q USING (run_id) \
         WHERE w.generation = 5 AND w.status = 'timedOut' AND q.status = 'parked'",
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        server.workers(),
        ["1 timedOut 1", "3 timedOut 1", "5 timedOut 1"],
        "{}",
        server.report()
    );
    assert_eq!(
        server.query::<String>("SELECT status_detail FROM runs"),
        "runnerNoProgress"
    );
}

#[test]
fn a_healthy_runner_keeps_its_claim_for_longer_than_a_lease() {
    // Steps of 200 ms, answering pings between them, for longer than a claim lives without
    // renewal; the reclaimer looks every 100 ms the whole time.
    let steps = (RUN_CLAIM_LEASE_MS + 5_000) / 200;
    let script = format!("steps={steps},work-ms=200");
    let env = [
        ("PI_WORKFLOWS_RUNNER_PING_MS", "100"),
        ("PI_WORKFLOWS_RUNNER_UNRESPONSIVE_MS", "1000"),
        ("PI_WORKFLOWS_RUNNER_STALLED_MS", "1500"),
        ("PI_WORKFLOWS_RECLAIM_INTERVAL_MS", "100"),
    ];
    let server = Server::start(&script, &env);
    let started = Instant::now();
    server.assert_completed_once(steps);
    assert!(started.elapsed() > Duration::from_millis(RUN_CLAIM_LEASE_MS as u64));
    assert_eq!(server.workers(), ["1 exited 1"], "{}", server.report());
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE event_type IN ('run.reclaimed', 'run.parked')"),
        0,
        "{}",
        server.report()
    );
    assert_eq!(
        server.count("SELECT generation FROM leases WHERE resource_type = 'run'"),
        1
    );
}

#[test]
fn a_claim_that_expired_under_a_live_runner_is_taken_only_after_that_runner_stopped() {
    // The whole server stops for longer than a lease: every claim expires while its runner
    // lives. On SIGCONT the runner finds its claim lost and stops itself; only then is the
    // run reclaimed (not counted as a stall: the runner could not answer a stopped server).
    let server = Server::start("steps=40,work-ms=200", &FAST_LIVENESS);
    let runner = server.live_runner_after(2);
    let pid = std::fs::read_to_string(server.dir.path().join("server/server.lock"))
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<i32>().ok())
        .expect("server pid");
    signal(pid, "STOP");
    std::thread::sleep(Duration::from_millis(RUN_CLAIM_LEASE_MS as u64 + 1_000));
    signal(pid, "CONT");
    server.assert_completed_once(40);
    wait_gone(&server, runner);
    assert_eq!(server.workers(), ["1 claimLost 1", "3 exited 1"], "{}", server.report());
    server.assert_reclaimed_once_after(1);
}

#[test]
fn resuming_a_run_parked_runner_no_progress_makes_exactly_one_new_attempt() {
    // Exits right after `runner.ready`, every time.
    let server = Server::start("crash-after=1", &FAST_LIVENESS);
    server.wait_for(
        "the run parks",
        "SELECT count(*) FROM runs WHERE status_detail = 'runnerNoProgress'",
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        server.count("SELECT count(*) FROM run_workers"),
        1,
        "{}",
        server.report()
    );
    let resume = server.cli(&["run", "resume", "run-0"]);
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    server.wait_for(
        "the resumed run parks again",
        "SELECT count(*) FROM run_workers w JOIN run_queue q USING (run_id) \
         WHERE w.generation = 2 AND w.finished_at IS NOT NULL AND q.status = 'parked'",
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        server.count("SELECT count(*) FROM run_workers"),
        2,
        "{}",
        server.report()
    );
    assert_eq!(
        server.query::<String>("SELECT status_detail FROM runs"),
        "runnerNoProgress"
    );
    // Each runner answered ready and sent nothing more: no proposal recorded its ready, so
    // its end did (or the wait for a proposal ran out first).
    assert_eq!(server.workers(), ["1 crashed 1", "2 crashed 1"], "{}", server.report());
}

#[test]
fn resuming_a_run_parked_runner_no_progress_after_the_cause_is_fixed_completes_it() {
    // Exits right after `runner.ready` in generation 1 only: the resumed attempt finishes.
    let server = Server::start("steps=2,crash-after=1,crash-first-only", &FAST_LIVENESS);
    server.wait_for(
        "the run parks",
        "SELECT count(*) FROM runs WHERE status_detail = 'runnerNoProgress'",
    );
    let resume = server.cli(&["run", "resume", "run-0"]);
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    server.assert_completed_once(2);
    std::thread::sleep(QUIET);
    assert_eq!(
        server.rows("SELECT generation || ' ' || status FROM run_workers ORDER BY started_at, rowid"),
        ["1 crashed", "2 exited"],
        "{}",
        server.report()
    );
}
