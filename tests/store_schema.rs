//! Opening the state database: creation, pragmas, permissions, and refusal of a database
//! with another schema digest before any mutation (alpha state policy).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use pi_workflows::store::schema::{self, SCHEMA_DDL};
use pi_workflows::store::{ManualClock, Store, StoreError};
use rusqlite::Connection;

fn open(path: &Path) -> Result<Store, StoreError> {
    Store::open(path, Arc::new(ManualClock::new(common::START_MS)))
}

/// Bytes of the database and its WAL/SHM companions (absent files read as empty).
fn file_bytes(path: &Path) -> Vec<Vec<u8>> {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| std::fs::read(format!("{}{suffix}", path.display())).unwrap_or_default())
        .collect()
}

/// A database created by an older DDL text: same tables, one column more, other digest.
fn create_outdated_database(path: &Path) {
    let conn = Connection::open(path).expect("create");
    conn.execute_batch("PRAGMA journal_mode = WAL;").expect("wal");
    let older_ddl = SCHEMA_DDL.replace(
        "  finished_at INTEGER,\n  CHECK ((finished_at",
        "  finished_at INTEGER,\n  title TEXT,\n  CHECK ((finished_at",
    );
    assert_ne!(older_ddl, SCHEMA_DDL, "the test must really change the DDL");
    conn.execute_batch(&older_ddl).expect("older ddl");
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = 1;",
        schema::APPLICATION_ID
    ))
    .expect("header");
    conn.execute(
        "INSERT INTO schema_meta VALUES (1, 'pi-workflows-state', 1, ?1, 0)",
        [format!(
            "sha256:{}",
            pi_workflows::digest::sha256_hex(older_ddl.as_bytes())
        )],
    )
    .expect("meta");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoint");
}

#[test]
fn creates_a_user_only_wal_database_with_the_stored_digest() {
    let t = common::open_store();
    let path = t.store.path().to_path_buf();
    let mode = std::fs::metadata(&path).expect("db file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the database holds private content");
    let (digest, journal, auto_vacuum, app_id): (String, String, i64, i64) = t
        .store
        .read(|conn| {
            Ok((
                conn.query_row("SELECT schema_digest FROM schema_meta", [], |r| r.get(0))?,
                conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?,
                conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?,
                conn.query_row("PRAGMA application_id", [], |r| r.get(0))?,
            ))
        })
        .expect("read pragmas");
    assert_eq!(digest, schema::schema_digest());
    assert_eq!(journal, "wal");
    assert_eq!(auto_vacuum, 2, "auto_vacuum = INCREMENTAL");
    assert_eq!(app_id, schema::APPLICATION_ID);
}

#[test]
fn every_table_is_strict() {
    let t = common::open_store();
    let non_strict: Vec<String> = t
        .store
        .read(|conn| {
            let names = conn
                .prepare("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND strict = 0 AND name NOT LIKE 'sqlite_%'")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(names)
        })
        .expect("table list");
    assert!(non_strict.is_empty(), "non-STRICT tables: {non_strict:?}");
}

/// A check or partial-index predicate with `IN (…)` over three or more values makes SQLite
/// build a temporary b-tree on every statement that evaluates it (each insert of an attempt,
/// event or queue change); the schema spells such sets as `OR` chains instead.
#[test]
fn no_check_builds_a_temporary_list() {
    let lists: Vec<&str> = SCHEMA_DDL
        .split(" IN")
        .skip(1)
        .filter_map(|after| after.trim_start().strip_prefix('('))
        .map(|list| list.split(')').next().unwrap_or(list))
        .filter(|list| list.matches(',').count() >= 2)
        .collect();
    assert!(lists.is_empty(), "IN lists of three or more values: {lists:?}");
    assert!(
        SCHEMA_DDL.contains("status = 'queued' OR status = 'running'"),
        "the run status set is still checked"
    );
}

/// Per-run reads (status, run state) and the cascade of a pruned run must not scan other
/// runs' rows: every column that references another table leads some index (or the key).
#[test]
fn every_reference_leads_an_index() {
    let t = common::open_store();
    let unindexed: Vec<String> = t
        .store
        .read(|conn| {
            let references = conn
                .prepare(
                    "SELECT t.name, f.\"from\" FROM pragma_table_list t, pragma_foreign_key_list(t.name) f
                     WHERE t.schema = 'main' AND t.type = 'table' AND t.name NOT LIKE 'sqlite_%'",
                )?
                .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut unindexed = Vec::new();
            for (table, column) in references {
                // An index (a key's automatic index included) whose first column it is. A
                // partial index counts only when it leaves out just the column's NULLs: the
                // cascade looks up `column = key`, which no NULL matches, and SQLite uses such
                // an index for it.
                let led: bool = conn.query_row(
                    "SELECT count(*) > 0 FROM pragma_index_list(?1) l, pragma_index_info(l.name) i
                     LEFT JOIN sqlite_schema s ON s.type = 'index' AND s.name = l.name
                     WHERE i.seqno = 0 AND i.name = ?2
                       AND (l.partial = 0 OR s.sql LIKE '% WHERE ' || ?2 || ' IS NOT NULL')",
                    [&table, &column],
                    |row| row.get(0),
                )?;
                let rowid_key: bool = conn.query_row(
                    "SELECT count(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2 AND pk = 1",
                    [&table, &column],
                    |row| row.get(0),
                )?;
                if !led && !rowid_key {
                    unindexed.push(format!("{table}.{column}"));
                }
            }
            Ok(unindexed)
        })
        .expect("references");
    assert!(unindexed.is_empty(), "references without an index: {unindexed:?}");
}

#[test]
fn reopening_keeps_the_data() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.sqlite");
    {
        let store = open(&path).expect("create");
        let new_run = common::new_run("run-kept");
        store
            .write(move |tx| pi_workflows::store::runs::queue_run(tx, &new_run))
            .expect("queue");
    }
    let store = open(&path).expect("reopen");
    let run = store
        .read(|conn| pi_workflows::store::runs::read_run_on(conn, "run-kept"))
        .expect("run kept");
    assert_eq!(run.revision, 1);
}

#[test]
fn another_digest_is_refused_and_the_file_stays_byte_identical() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.sqlite");
    create_outdated_database(&path);
    let before = file_bytes(&path);
    assert!(!before[0].is_empty());

    let err = open(&path).err().expect("an outdated database is refused");
    let message = err.to_string();
    assert!(matches!(err, StoreError::SchemaMismatch { .. }), "{message}");
    assert!(
        message.contains("Back up") && message.contains(".bak"),
        "no backup-and-reset instruction: {message}"
    );
    assert!(message.contains("Nothing was changed"), "{message}");
    assert_eq!(file_bytes(&path)[0], before[0], "the refused database file changed");
    assert_eq!(file_bytes(&path)[1], before[1], "the refused database WAL changed");
}

#[test]
fn a_foreign_file_is_refused_unchanged() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.sqlite");
    std::fs::write(&path, b"this is not a database, but it is somebody's file").expect("write");
    let before = std::fs::read(&path).expect("read");
    let err = open(&path).err().expect("refused");
    assert!(matches!(err, StoreError::NotStateDatabase { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), before);

    let other_app = dir.path().join("other.sqlite");
    Connection::open(&other_app)
        .expect("open")
        .execute_batch("CREATE TABLE notes (body TEXT);")
        .expect("create");
    let before = std::fs::read(&other_app).expect("read");
    let err = open(&other_app).err().expect("refused");
    assert!(matches!(err, StoreError::NotStateDatabase { .. }), "{err}");
    assert_eq!(std::fs::read(&other_app).expect("read"), before);
}

#[test]
fn readers_cannot_write() {
    let t = common::open_store();
    let err = t
        .store
        .read(|conn| Ok(conn.execute("DELETE FROM schema_meta", [])?))
        .expect_err("a view connection must not write");
    assert!(
        err.to_string().contains("readonly") || err.to_string().contains("read"),
        "{err}"
    );
}
