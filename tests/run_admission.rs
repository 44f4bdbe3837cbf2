//! Admission of a new run with its creation (`runners::admission`): `run.start` admits its
//! own run in its creation commit when a runner slot is free and no older run is admissible;
//! otherwise the run waits in the queue for the scheduler, in order, and capacity holds
//! across both ways in.

mod common;

use std::time::{Duration, Instant};

use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome};
use pi_workflows::server::runners::admission::LaunchRecord;
use pi_workflows::store::runs::{self, RunStatus};
use pi_workflows::store::{Store, WriteTx};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn record(runner_epoch: &str) -> LaunchRecord {
    LaunchRecord::new(
        runner_epoch.to_string(),
        ("server-test", 1),
        None,
        Duration::from_secs(5),
    )
}

fn status(store: &Store, run_id: &str) -> RunStatus {
    store
        .read(|conn| Ok(runs::read_run_on(conn, run_id)?.status))
        .expect("run")
}

fn workers_of(store: &Store, run_id: &str) -> i64 {
    store
        .read(|conn| {
            Ok(
                conn.query_row("SELECT count(*) FROM run_workers WHERE run_id = ?1", [run_id], |row| {
                    row.get(0)
                })?,
            )
        })
        .expect("workers")
}

/// How many live claims name `run_id` (0 or 1).
fn claims_held(store: &Store, run_id: &str) -> i64 {
    store
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM leases WHERE resource_type = 'run' AND resource_id = ?1 AND owner_type IS NOT NULL",
                [run_id],
                |row| row.get(0),
            )?)
        })
        .expect("leases")
}

fn queue(tx: &WriteTx<'_>, run_id: &str) -> pi_workflows::store::StoreResult<i64> {
    runs::queue_run(tx, &common::new_run(run_id))
}

#[test]
fn a_new_run_is_admitted_in_its_creation_commit_when_it_is_first_in_line() {
    let t = common::open_store();
    let admitted = t
        .store
        .write(|tx| {
            queue(tx, "run-new")?;
            Ok(record("e1-first")
                .record_if_first(tx, "run-new")
                .map(|admitted| (admitted.run.run_id, admitted.authority.generation, admitted.envelope)))
        })
        .expect("one commit");
    let (run_id, generation, envelope) = admitted.expect("the only queued run is admitted");
    assert_eq!(run_id, "run-new");
    assert_eq!(status(&t.store, "run-new"), RunStatus::Running);
    assert_eq!(
        common::run_lease(&t.store, "run-new"),
        (generation, Some("host".to_string()))
    );
    // The launch is recorded with the hash of the very envelope the runner will be sent.
    let hash: String = t
        .store
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT launch_envelope_hash FROM run_workers WHERE runner_epoch = 'e1-first' AND run_id = 'run-new'",
                [],
                |row| row.get(0),
            )?)
        })
        .expect("launch row");
    assert_eq!(hash, pi_workflows::digest::sha256_hex(&envelope));
}

#[test]
fn a_new_run_behind_an_older_admissible_run_stays_queued_and_nothing_is_recorded() {
    let t = common::open_store();
    t.store.write(|tx| queue(tx, "run-older")).expect("older run");
    t.clock.advance_ms(10);
    let admitted = t
        .store
        .write(|tx| {
            queue(tx, "run-newer")?;
            Ok(record("e1-newer").record_if_first(tx, "run-newer").is_some())
        })
        .expect("the creation commits");
    assert!(!admitted, "a new run must not overtake an older queued one");
    for run_id in ["run-older", "run-newer"] {
        assert_eq!(status(&t.store, run_id), RunStatus::Queued);
        assert_eq!(workers_of(&t.store, run_id), 0, "{run_id} has a launch recorded");
    }
    assert_eq!(claims_held(&t.store, "run-newer"), 0);
}

#[test]
fn a_failed_admission_leaves_the_creation_committed_and_the_run_queued() {
    let t = common::open_store();
    // A runner epoch already used: recording the launch fails after the claim was taken.
    t.store.write(|tx| queue(tx, "run-first")).expect("first run");
    t.store
        .write(|tx| Ok(record("e1-taken").record_if_first(tx, "run-first").is_some()))
        .expect("first admission");
    let admitted = t
        .store
        .write(|tx| {
            queue(tx, "run-second")?;
            Ok(record("e1-taken").record_if_first(tx, "run-second").is_some())
        })
        .expect("the creation commits even though its admission failed");
    assert!(!admitted);
    assert_eq!(status(&t.store, "run-second"), RunStatus::Queued);
    assert_eq!(workers_of(&t.store, "run-second"), 0);
    assert_eq!(
        claims_held(&t.store, "run-second"),
        0,
        "the failed admission's claim survived"
    );
}

// ---- the real server: `run.start` over the socket, with the scripted test runner ----

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    fn start(script: &str, max_workers: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("piwa").tempdir_in("/tmp").expect("dir");
        let out = common::pi_workflows_command(dir.path(), &["server", "start"], script)
            .env("PI_WORKFLOWS_MAX_WORKERS", max_workers)
            .output()
            .expect("server start");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    fn client(&self) -> Client {
        Client::connect(&self.dir.path().join("server/server.sock")).expect("connect")
    }

    fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> T {
        common::query_db(self.dir.path(), sql)
    }

    fn wait_for(&self, what: &str, sql: &str) {
        let deadline = Instant::now() + WAIT;
        while self.query::<i64>(sql) == 0 {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

/// A resolved `run.start` (no resolver needed) of a one-node workflow.
fn run_start_payload() -> JsonObject {
    let snapshot = common::definition(1);
    let bytes = serde_json_canonicalizer::to_vec(&snapshot).expect("canonical");
    let payload = json!({
        "workflowName": "admission",
        "definitionSnapshot": snapshot,
        "definitionDigest": format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes)),
        "workflowSource": {},
        "input": {},
    });
    serde_json::from_value(payload).expect("object")
}

fn start_run(client: &mut Client, run_id: &str) {
    let response = client
        .request_keyed(
            Operation::RunStart,
            Some(run_id),
            run_start_payload(),
            Some(format!("key-{run_id}")),
        )
        .expect("run.start is answered");
    assert_eq!(response.outcome, Outcome::Accepted, "{response:?}");
}

fn run_status(server: &Server, run_id: &str) -> String {
    server.query(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'"))
}

/// Runner lifetimes that overlap, by pairs.
fn overlapping_runners(server: &Server) -> i64 {
    server.query(
        "SELECT count(*) FROM run_workers a JOIN run_workers b ON a.runner_epoch < b.runner_epoch
         WHERE a.started_at < b.finished_at AND b.started_at < a.finished_at",
    )
}

#[test]
fn run_start_with_a_free_slot_answers_after_the_admission_and_a_full_server_queues_in_order() {
    let server = Server::start("steps=3,step-delay-ms=200", "1");
    let mut client = server.client();
    start_run(&mut client, "run-a");
    // Answered after the commit that created the run and admitted it: no scheduler round
    // between, so it is running, with its launch recorded at its creation's clock reading.
    assert_eq!(run_status(&server, "run-a"), "running");
    let same_commit: i64 = server.query(
        "SELECT count(*) FROM runs r JOIN run_workers w ON w.run_id = r.run_id
         WHERE r.run_id = 'run-a' AND w.started_at = r.created_at",
    );
    assert_eq!(same_commit, 1, "run-a's launch was not recorded with its creation");
    // The only slot is taken: later runs wait, and are admitted in the order they came.
    start_run(&mut client, "run-b");
    start_run(&mut client, "run-c");
    assert_eq!(run_status(&server, "run-b"), "queued");
    assert_eq!(run_status(&server, "run-c"), "queued");
    server.wait_for(
        "every run completes",
        "SELECT count(*) = 3 FROM runs WHERE status = 'completed'",
    );
    assert_eq!(overlapping_runners(&server), 0, "capacity 1 was exceeded");
    let order: String = server
        .query("SELECT group_concat(run_id, ',') FROM (SELECT run_id FROM run_workers ORDER BY started_at, rowid)");
    assert_eq!(order, "run-a,run-b,run-c");
}

#[test]
fn concurrent_run_starts_never_exceed_capacity() {
    let server = Server::start("steps=2,step-delay-ms=50", "2");
    let starters: Vec<_> = (0..4)
        .map(|client_number| {
            let socket = server.dir.path().join("server/server.sock");
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket).expect("connect");
                for index in 0..4 {
                    start_run(&mut client, &format!("run-{client_number}-{index}"));
                }
            })
        })
        .collect();
    for starter in starters {
        starter.join().expect("client");
    }
    server.wait_for(
        "every run completes",
        "SELECT count(*) = 16 FROM runs WHERE status = 'completed'",
    );
    // At any runner's start, at most one other runner may be live beside it.
    let crowded: i64 = server.query(
        "SELECT count(*) FROM run_workers a WHERE
           (SELECT count(*) FROM run_workers b WHERE b.runner_epoch <> a.runner_epoch
              AND b.started_at <= a.started_at AND b.finished_at > a.started_at) > 1",
    );
    assert_eq!(crowded, 0, "more than 2 runners were live at once");
}
