//! Shared helpers for store integration tests: a real SQLite file in a temporary
//! directory, a manual clock, and whole-database snapshots to prove "nothing changed".
#![allow(dead_code)]

pub mod e2e;
pub mod sessions;
pub mod tree;

use std::sync::Arc;

use pi_workflows::store::runs::{ExecutionMode, NewRun};
use pi_workflows::store::{ManualClock, Store, StoreResult};
use rusqlite::types::ValueRef;

/// 2026-01-01T00:00:00Z: a fixed start so test timestamps are reproducible.
pub const START_MS: i64 = 1_767_225_600_000;

pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub clock: ManualClock,
    pub store: Store,
}

pub fn open_store() -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(&dir.path().join("state.sqlite"), Arc::new(clock.clone())).expect("open store");
    TestStore { dir, clock, store }
}

pub fn new_run(run_id: &str) -> NewRun {
    NewRun {
        run_id: run_id.to_string(),
        workflow_name: "example".to_string(),
        project_path: "/project".to_string(),
        parent_run_id: None,
        root_run_id: None,
        definition_digest: format!("sha256:{}", "d".repeat(64)),
        origin: Default::default(),
        workflow_source_json: "{}".to_string(),
        input_hash: "e".repeat(64),
        execution: ExecutionMode::Headless,
    }
}

/// Every row of every table, rendered as text, in a stable order.
pub fn snapshot(store: &Store) -> Vec<String> {
    store
        .read(|conn| {
            let tables: Vec<String> = conn
                .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            let mut rows = Vec::new();
            for table in tables {
                rows.extend(table_rows(conn, &table)?);
            }
            Ok(rows)
        })
        .expect("snapshot")
}

fn table_rows(conn: &rusqlite::Connection, table: &str) -> StoreResult<Vec<String>> {
    let columns = conn.prepare(&format!("SELECT * FROM \"{table}\""))?.column_count();
    // Order by every column: WITHOUT ROWID tables have no rowid.
    let order: Vec<String> = (1..=columns).map(|index| index.to_string()).collect();
    let mut statement = conn.prepare(&format!("SELECT * FROM \"{table}\" ORDER BY {}", order.join(", ")))?;
    let rows = statement
        .query_map([], |row| {
            let mut cells = Vec::with_capacity(columns);
            for index in 0..columns {
                cells.push(render(row.get_ref(index)?));
            }
            Ok(format!("{table}: {}", cells.join(" | ")))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

fn render(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".to_string(),
        ValueRef::Integer(number) => number.to_string(),
        ValueRef::Real(number) => number.to_string(),
        ValueRef::Text(text) => String::from_utf8_lossy(text).into_owned(),
        ValueRef::Blob(bytes) => format!("blob[{}]", pi_workflows::digest::sha256_hex(bytes)),
    }
}

/// Queue headless runs with the given IDs in the database of `state_dir`, before a server
/// starts (only the server opens the live database while it runs).
pub fn queue_runs_in(state_dir: &std::path::Path, run_ids: impl IntoIterator<Item = String>) {
    std::fs::create_dir_all(state_dir).expect("state dir");
    let store = Store::open(
        &state_dir.join("state.sqlite"),
        Arc::new(pi_workflows::store::SystemClock),
    )
    .expect("store");
    for run_id in run_ids {
        let new_run = NewRun {
            project_path: String::new(),
            ..new_run(&run_id)
        };
        store
            .write(move |tx| pi_workflows::store::runs::queue_run(tx, &new_run))
            .expect("queue");
    }
}

/// A definition snapshot of `nodes` compute nodes (`root/step1`, …), as a resolver makes one.
pub fn definition(nodes: usize) -> serde_json::Value {
    let items: Vec<serde_json::Value> = (1..=nodes)
        .map(|i| serde_json::json!({"path": format!("root/step{i}"), "type": "compute", "title": format!("Step {i}")}))
        .collect();
    serde_json::json!({"schema": "pi-workflows.definition-snapshot.v1", "name": "example", "startAt": "n1",
           "maxSteps": 1000, "nodes": items, "includes": [], "edges": []})
}

/// Queue `runs` headless runs (`run-0`, …) whose definition of `nodes` steps is stored, so
/// their views have a graph, before a server starts.
pub fn queue_with_definition(dir: &std::path::Path, runs: usize, nodes: usize) {
    let headless: Vec<(String, Option<String>)> = (0..runs).map(|index| (format!("run-{index}"), None)).collect();
    queue_runs_with_definition(dir, &headless, nodes);
}

/// Queue runs `(run ID, origin session)` — interactive when a session is given — whose
/// definition of `nodes` steps is stored, before a server starts.
pub fn queue_runs_with_definition(dir: &std::path::Path, runs: &[(String, Option<String>)], nodes: usize) {
    std::fs::create_dir_all(dir).expect("state dir");
    let store = Store::open(&dir.join("state.sqlite"), Arc::new(pi_workflows::store::SystemClock)).expect("store");
    let bytes = serde_json_canonicalizer::to_vec(&definition(nodes)).expect("canonical");
    for (run_id, session) in runs {
        let bytes = bytes.clone();
        let execution = match session {
            Some(session) => ExecutionMode::Interactive {
                origin_session_id: session.clone(),
            },
            None => ExecutionMode::Headless,
        };
        let run = NewRun {
            project_path: String::new(),
            definition_digest: format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes)),
            execution,
            ..new_run(run_id)
        };
        store
            .write(move |tx| {
                pi_workflows::store::blobs::put_blob(tx, &bytes, pi_workflows::view::document::DEFINITION_MEDIA_TYPE)?;
                pi_workflows::store::runs::queue_run(tx, &run)
            })
            .expect("queue");
    }
}

/// Stop the server of `state_dir`, if one runs (tests' clean-up; errors are irrelevant).
pub fn stop_server(state_dir: &std::path::Path) {
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(["server", "stop"])
        .output();
}

/// How long server tests wait for an outcome before failing.
pub const SERVER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Run the `pi-workflows` binary on `state_dir` with the scripted test runner configured.
pub fn pi_workflows(state_dir: &std::path::Path, args: &[&str], script: &str) -> std::process::Output {
    pi_workflows_command(state_dir, args, script)
        .output()
        .expect("run pi-workflows")
}

/// The `pi-workflows` command of `pi_workflows`, for a caller that adds its own environment.
pub fn pi_workflows_command(state_dir: &std::path::Path, args: &[&str], script: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
    command
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env("PI_WORKFLOWS_RUNNER", env!("CARGO_BIN_EXE_pi-workflows-test-runner"))
        .env("PI_WORKFLOWS_TEST_SCRIPT", script)
        // Never the user's own channels (a real bot).
        .env("PI_WORKFLOWS_CONFIG_DIR", state_dir.join("no-config"));
    command
}

/// One value from the state database, read-only (the server may be running).
pub fn query_db<T: rusqlite::types::FromSql>(state_dir: &std::path::Path, sql: &str) -> T {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(state_dir.join("state.sqlite"), flags).expect("db");
    db.query_row(sql, [], |row| row.get(0)).expect(sql)
}

/// Wait until `sql` (a count) is non-zero.
pub fn wait_for_db(state_dir: &std::path::Path, what: &str, sql: &str) {
    let deadline = std::time::Instant::now() + SERVER_WAIT;
    while query_db::<i64>(state_dir, sql) == 0 {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A run's lease: its generation and its holder's owner type (none when released).
pub fn run_lease(store: &Store, run_id: &str) -> (i64, Option<String>) {
    store
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT generation, owner_type FROM leases WHERE resource_type = 'run' AND resource_id = ?1",
                [run_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .expect("lease")
}
