//! Crash injection on the real binary: SIGKILL the server at seeded random points of a
//! workload of scripted runs, restart it, and check after every crash, after every restart
//! and at the end (reading the database read-only, as only the server may write it):
//!
//! - the lifecycle invariants of `state verify` (`store::verify::lifecycle_violations`);
//! - no acknowledged runner message is lost: every receipt (`runner_messages`) that existed
//!   before a crash still exists after it, and every response a runner received as
//!   `accepted` (its `ack-file=` log) has its accepted receipt;
//! - no rejected receipt and no `run.failed` event (the scripted runs never fail);
//! - at most one active runner epoch per run, and none left from an older server once the
//!   new one is ready;
//! - at the end: every run `completed` (or parked `effectAmbiguous`, see below), every node attempt `completed` or `interrupted`, no
//!   active runner epoch, and no live process in any recorded runner process group (nor any
//!   process of this test's runners at all).
//!
//! The kill points are deterministic (xorshift from a constant seed); their number defaults
//! to `CRASH_POINTS_DEFAULT` and `PI_WORKFLOWS_CRASH_POINTS` raises it. Most points kill a
//! ready server after a random delay (before admission, during a runner's start-up, or
//! mid-step); some kill a `server run` a few milliseconds after its start, while it opens
//! the store or recovers.
//!
//! Every run performs one managed effect in its first node (an append to a file that plays
//! the external system). After every crash and restart: no effect key appears twice in the
//! external file (never applied twice), every `applied` effect appears exactly once, and a
//! run parked `effectAmbiguous` has an ambiguous effect (a crash while applying is uncertain
//! and is never retried automatically). At the end every run is `completed` or parked
//! `effectAmbiguous` with its ambiguous effect.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pi_workflows::store::verify::lifecycle_violations;
use rusqlite::{Connection, OpenFlags};

const SEED: u64 = 0x5EED_C0DE_2026_0001;
const CRASH_POINTS_DEFAULT: usize = 12;
const CRASH_POINTS_ENV: &str = "PI_WORKFLOWS_CRASH_POINTS";
const INITIAL_RUNS: usize = 6;
const CAPACITY: usize = 2;
const STEPS: u64 = 8;
/// Bound of the random pacing of the scripted steps (before and inside each node), in ms.
const STEP_DELAY_MS_MAX: u64 = 30;
/// A ready server is killed this long after `server start` returned: before the first
/// admission tick (500 ms), during a runner's start-up, or mid-step.
const KILL_DELAY_MS: std::ops::Range<u64> = 300..1_500;
/// An early kill hits `server run` this soon after its spawn.
const EARLY_KILL_MS_MAX: u64 = 60;
/// Generous: nothing here asserts speed.
const WAIT: Duration = Duration::from_secs(90);

/// xorshift64*: deterministic, no crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

type Receipt = (String, String);

/// One state directory, its workload, and the violations found so far. Dropping it stops
/// any server still running for the directory (also when a check panics).
struct Harness {
    dir: tempfile::TempDir,
    acks: PathBuf,
    effects: PathBuf,
    runs: usize,
    violations: Vec<String>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.command(&["server", "stop"], (0, 0)).output();
    }
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("piwk").tempdir_in("/tmp").expect("dir");
        let acks = dir.path().join("acks");
        let effects = dir.path().join("external-effects");
        let mut harness = Self {
            dir,
            acks,
            effects,
            runs: 0,
            violations: Vec::new(),
        };
        harness.queue_runs(INITIAL_RUNS);
        harness
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Queue runs directly in the database; only while no server runs.
    fn queue_runs(&mut self, count: usize) {
        let first = self.runs;
        common::queue_runs_in(
            self.path(),
            (first..first + count).map(|index| format!("run-{index:03}")),
        );
        self.runs += count;
    }

    /// `pace` is (delay before each node, work inside each node) in ms.
    fn command(&self, args: &[&str], pace: (u64, u64)) -> Command {
        let (step_delay_ms, work_ms) = pace;
        let script = format!(
            "steps={STEPS},step-delay-ms={step_delay_ms},work-ms={work_ms},pipeline=4,ack-file={},effect-file={},effect-ms={work_ms}",
            self.acks.display(),
            self.effects.display()
        );
        let mut command = common::pi_workflows_command(self.path(), args, &script);
        command.env("PI_WORKFLOWS_MAX_WORKERS", CAPACITY.to_string());
        command
    }

    fn start(&self, pace: (u64, u64)) {
        let out = self.command(&["server", "start"], pace).output().expect("server start");
        assert!(
            out.status.success(),
            "server start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    fn stop(&self) {
        let out = self.command(&["server", "stop"], (0, 0)).output().expect("server stop");
        assert!(
            out.status.success(),
            "server stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.path().join("logs/server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn db(&self) -> Connection {
        Connection::open_with_flags(self.path().join("state.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("read-only db")
    }

    fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |row| row.get(0)).expect(sql)
    }

    fn server_pid(&self) -> i32 {
        std::fs::read_to_string(self.path().join("server/server.lock"))
            .expect("server.lock")
            .trim()
            .parse()
            .expect("pid in server.lock")
    }

    fn receipts(conn: &Connection, accepted_only: bool) -> BTreeSet<Receipt> {
        let sql = if accepted_only {
            "SELECT runner_epoch, message_id FROM runner_messages WHERE outcome = 'accepted'"
        } else {
            "SELECT runner_epoch, message_id FROM runner_messages"
        };
        conn.prepare(sql)
            .expect("receipts")
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("receipts")
            .map(|row| row.expect("receipt"))
            .collect()
    }

    fn snapshot(&self) -> BTreeSet<Receipt> {
        Self::receipts(&self.db(), false)
    }

    /// What the runners were told was accepted (complete lines only).
    fn acknowledged(&self) -> BTreeSet<Receipt> {
        let text = std::fs::read_to_string(&self.acks).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                match fields.as_slice() {
                    // An accepted goodbye changes nothing and has no receipt; an accepted
                    // ready has none either: it is recorded with the epoch's first proposal
                    // (checked in `check`).
                    [_, _, "runner.exiting" | "runner.ready", "accepted"] => None,
                    [epoch, id, _kind, "accepted"] => Some((epoch.to_string(), id.to_string())),
                    _ => None,
                }
            })
            .collect()
    }

    /// Check every invariant on one consistent read snapshot; record what fails.
    fn check(&mut self, when: &str, before: &BTreeSet<Receipt>, server_ready: bool) {
        let acknowledged = self.acknowledged();
        let conn = self.db();
        conn.execute_batch("BEGIN").expect("read transaction");
        let mut found = Vec::new();
        for violation in lifecycle_violations(&conn).expect("lifecycle invariants") {
            found.push(format!("{}: {} rows", violation.invariant, violation.rows));
        }
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).expect(sql) };
        let mut expect_zero = |what: &str, sql: &str| {
            let rows = count(sql);
            if rows != 0 {
                found.push(format!("{what}: {rows}"));
            }
        };
        expect_zero(
            "runs with more than one active runner epoch",
            "SELECT count(*) FROM (SELECT run_id FROM run_workers WHERE status IN ('starting', 'ready')
             GROUP BY run_id HAVING count(*) > 1)",
        );
        expect_zero(
            "rejected runner messages",
            "SELECT count(*) FROM runner_messages WHERE outcome = 'rejected'",
        );
        expect_zero(
            "run.failed events",
            "SELECT count(*) FROM events WHERE event_type = 'run.failed'",
        );
        expect_zero(
            "runs parked for review (workerCrashed, runnerNoProgress, effectAmbiguous without one)",
            "SELECT count(*) FROM runs r JOIN run_queue q ON q.run_id = r.run_id
             WHERE q.status = 'parked' AND r.status_detail != 'boundary'
               AND NOT (r.status_detail = 'effectAmbiguous'
                        AND EXISTS (SELECT 1 FROM effects e WHERE e.run_id = r.run_id AND e.status = 'ambiguous'))",
        );
        expect_zero(
            "ambiguous effects of runs that are neither parked effectAmbiguous nor terminal",
            "SELECT count(*) FROM effects e JOIN runs r ON r.run_id = e.run_id
             WHERE e.status = 'ambiguous' AND r.finished_at IS NULL
               AND ifnull(r.status_detail, '') != 'effectAmbiguous'",
        );
        if server_ready {
            expect_zero(
                "active runner epochs of an older server after recovery",
                "SELECT count(*) FROM run_workers WHERE status IN ('starting', 'ready')
                 AND server_epoch < (SELECT generation FROM leases WHERE resource_type = 'server')",
            );
        }
        found.extend(self.effect_violations(&conn));
        let receipts = Self::receipts(&conn, false);
        let lost: Vec<&Receipt> = before.difference(&receipts).collect();
        if !lost.is_empty() {
            found.push(format!("receipts lost across the crash: {lost:?}"));
        }
        let accepted = Self::receipts(&conn, true);
        let unrecorded: Vec<&Receipt> = acknowledged.difference(&accepted).collect();
        if !unrecorded.is_empty() {
            found.push(format!(
                "accepted responses without an accepted receipt: {unrecorded:?}"
            ));
        }
        // A proposal was answered only after its commit, which recorded its epoch's ready.
        let proposing: BTreeSet<&String> = acknowledged.iter().map(|(epoch, _)| epoch).collect();
        let unready: Vec<&String> = proposing
            .into_iter()
            .filter(|epoch| {
                let ready: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM run_workers WHERE runner_epoch = ?1 AND ready_at IS NOT NULL",
                        [epoch.as_str()],
                        |row| row.get(0),
                    )
                    .expect("ready of an epoch");
                ready == 0
            })
            .collect();
        if !unready.is_empty() {
            found.push(format!(
                "runner epochs with an acknowledged proposal but no recorded ready: {unready:?}"
            ));
        }
        conn.execute_batch("COMMIT").expect("end read transaction");
        for problem in found {
            eprintln!("VIOLATION {when}: {problem}");
            self.violations.push(format!("{when}: {problem}"));
        }
    }

    /// The external system's view: how often each effect key was applied.
    fn applied_externally(&self) -> std::collections::BTreeMap<String, usize> {
        let text = std::fs::read_to_string(&self.effects).unwrap_or_default();
        let mut counts = std::collections::BTreeMap::new();
        for key in text.lines().filter_map(|line| line.strip_prefix("applied ")) {
            *counts.entry(key.to_string()).or_insert(0) += 1;
        }
        counts
    }

    /// No effect applied twice; every `applied` effect applied exactly once externally.
    fn effect_violations(&self, conn: &Connection) -> Vec<String> {
        let external = self.applied_externally();
        let mut found: Vec<String> = external
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(key, count)| format!("effect {key} applied {count} times"))
            .collect();
        let applied: Vec<String> = conn
            .prepare("SELECT idempotency_key FROM effects WHERE status = 'applied'")
            .expect("effects")
            .query_map([], |row| row.get(0))
            .expect("effects")
            .map(|row| row.expect("effect"))
            .collect();
        for key in applied.iter().filter(|key| external.get(*key) != Some(&1)) {
            found.push(format!(
                "effect {key} is applied in the store but not exactly once externally"
            ));
        }
        found
    }

    /// Statuses of every run, for a timeout message.
    fn run_statuses(&self) -> String {
        let conn = self.db();
        let mut statement = conn
            .prepare(
                "SELECT r.run_id || ' ' || r.status || '/' || q.status || ' ' || ifnull(r.status_detail, '-')
                 FROM runs r JOIN run_queue q ON q.run_id = r.run_id ORDER BY r.run_id",
            )
            .expect("statuses");
        let rows: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .expect("statuses")
            .map(|row| row.expect("status"))
            .collect();
        rows.join("\n")
    }

    fn runner_pids(&self) -> Vec<i32> {
        let conn = self.db();
        let mut statement = conn
            .prepare("SELECT pid FROM run_workers WHERE pid IS NOT NULL")
            .expect("pids");
        statement
            .query_map([], |row| row.get(0))
            .expect("pids")
            .map(|row| row.expect("pid"))
            .collect()
    }
}

/// The process is gone; a zombie counts as gone (its descriptors, lock and socket are).
fn wait_until_dead(pid: i32) {
    let deadline = Instant::now() + WAIT;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
            });
        if matches!(state, None | Some('Z' | 'X')) {
            return;
        }
        assert!(Instant::now() < deadline, "killed process {pid} did not go away");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
}

/// Live processes whose environment names this test's directory (its servers and runners).
fn live_processes_of(dir: &Path) -> Vec<i32> {
    let marker = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.windows(marker.len()).any(|window| window == marker.as_bytes()))
        })
        .collect()
}

fn crash_points() -> usize {
    std::env::var(CRASH_POINTS_ENV)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .map_or(CRASH_POINTS_DEFAULT, |points: usize| points.max(CRASH_POINTS_DEFAULT))
}

#[test]
fn server_crashes_at_random_points_lose_no_acknowledged_work() {
    let points = crash_points();
    let mut rng = Rng(SEED);
    let mut harness = Harness::new();
    let mut before = BTreeSet::new();
    let mut early_kills = 0;
    for point in 1..=points {
        let pace = (rng.below(STEP_DELAY_MS_MAX + 1), rng.below(STEP_DELAY_MS_MAX + 1));
        if rng.below(4) == 0 {
            // Early kill: `server run` a few ms after its spawn (store open, lease, recovery).
            early_kills += 1;
            let mut child = harness
                .command(&["server", "run"], pace)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("server run");
            std::thread::sleep(Duration::from_millis(rng.below(EARLY_KILL_MS_MAX + 1)));
            harness.check(&format!("point {point}, live early"), &before, false);
            before = harness.snapshot();
            sigkill(child.id() as i32);
            child.wait().expect("reap the killed server");
        } else {
            harness.start(pace);
            harness.check(&format!("point {point}, after restart"), &before, true);
            std::thread::sleep(Duration::from_millis(
                KILL_DELAY_MS.start + rng.below(KILL_DELAY_MS.end - KILL_DELAY_MS.start),
            ));
            before = harness.snapshot();
            let pid = harness.server_pid();
            sigkill(pid);
            wait_until_dead(pid);
        }
        harness.check(&format!("point {point}, after crash"), &before, false);
        before = harness.snapshot();
        // Keep work in flight for the next crash point (runs parked for review do not move).
        let unfinished = harness.count(
            "SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'failed', 'cancelled', 'timed_out')
                    AND ifnull(status_detail, '') != 'effectAmbiguous'",
        );
        if point < points && (unfinished as usize) < CAPACITY {
            harness.queue_runs(CAPACITY);
        }
    }

    harness.start((rng.below(STEP_DELAY_MS_MAX + 1), rng.below(STEP_DELAY_MS_MAX + 1)));
    harness.check("final restart", &before, true);
    let deadline = Instant::now() + WAIT;
    // Completed, or parked for review because its effect was applying at a crash.
    let all_completed = format!(
        "SELECT count(*) = {} FROM runs r JOIN run_queue q ON q.run_id = r.run_id
         WHERE r.status = 'completed' OR (q.status = 'parked' AND r.status_detail = 'effectAmbiguous')",
        harness.runs
    );
    while harness.count(&all_completed) == 0 {
        assert!(
            Instant::now() < deadline,
            "not every run completed:\n{}\n{}",
            harness.run_statuses(),
            harness.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    harness.stop();
    before = harness.snapshot();
    harness.check("after the final stop", &before, false);
    let unsettled =
        harness.count("SELECT count(*) FROM node_attempts WHERE status NOT IN ('completed', 'interrupted')");
    let ambiguous = harness.count("SELECT count(*) FROM effects WHERE status = 'ambiguous'");
    let applied = harness.count("SELECT count(*) FROM effects WHERE status = 'applied'");
    if unsettled != 0 {
        harness
            .violations
            .push(format!("{unsettled} node attempts neither completed nor interrupted"));
    }
    let active = harness.count("SELECT count(*) FROM run_workers WHERE status IN ('starting', 'ready')");
    if active != 0 {
        harness
            .violations
            .push(format!("{active} runner epochs still active after the stop"));
    }
    let survivors_deadline = Instant::now() + WAIT;
    for pid in harness.runner_pids() {
        while !supervisors::process::group_members(pid).is_empty() {
            if Instant::now() > survivors_deadline {
                harness
                    .violations
                    .push(format!("runner group {pid} still has live members"));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let strays = live_processes_of(harness.path());
    if !strays.is_empty() {
        harness
            .violations
            .push(format!("live processes of this test left behind: {strays:?}"));
    }

    let acknowledged = harness.acknowledged().len();
    assert!(
        acknowledged > 0,
        "the runners acknowledged nothing: the harness is broken"
    );
    let epochs = harness.count("SELECT count(*) FROM run_workers");
    let orphaned = harness.count("SELECT count(*) FROM run_workers WHERE status = 'orphaned'");
    let interrupted = harness.count("SELECT count(*) FROM node_attempts WHERE status = 'interrupted'");
    eprintln!(
        "crash injection: {points} crash points tried ({early_kills} early), {} runs, {epochs} runner epochs \
         ({orphaned} orphaned by a crash), {interrupted} interrupted attempts, {} receipts, {acknowledged} \
         acknowledged, effects {applied} applied once + {ambiguous} ambiguous (parked); {} violations found",
        harness.runs,
        before.len(),
        harness.violations.len()
    );
    assert!(
        harness.violations.is_empty(),
        "violations:\n{}",
        harness.violations.join("\n")
    );
}
