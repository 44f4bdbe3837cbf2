//! Opening the state database: refuse foreign or outdated files before any mutation, create
//! a new one from the single DDL file, and configure connections.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::error::{StoreError, StoreResult};
use crate::digest::sha256_hex;

/// The one DDL file of `pi-workflows-state` version 1.
pub const SCHEMA_DDL: &str = include_str!("schema.sql");
pub const SCHEMA_NAME: &str = "pi-workflows-state";
pub const SCHEMA_VERSION: i64 = 1;
/// "PIWF": marks the file as ours in the SQLite header.
pub const APPLICATION_ID: i64 = 0x5049_5746;
/// How long a connection waits for another connection's lock before failing.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Private content lives in the database: user-only.
const DATABASE_FILE_MODE: u32 = 0o600;

/// `sha256:<hex>` of the DDL text, stored in `schema_meta`.
pub fn schema_digest() -> String {
    format!("sha256:{}", sha256_hex(SCHEMA_DDL.as_bytes()))
}

/// What a read-only look at an existing file found.
enum Existing {
    /// No file, an empty file, or a file with no schema objects (an interrupted create).
    Fresh,
    /// A state database of this exact schema.
    Current,
}

/// Verify (read-only) or create the database at `path`. Returns only when the file holds
/// this build's schema; refuses everything else without writing a byte.
pub fn prepare_database(path: &Path, now_ms: i64) -> StoreResult<()> {
    configure_library();
    match inspect_read_only(path)? {
        Existing::Current => Ok(()),
        // A disk too full for the new file says so; the empty or partial file it leaves is
        // created fresh by the next start (it has no schema objects).
        Existing::Fresh => {
            create_database(path, now_ms).map_err(|err| err.with_disk_full_in(path.parent().unwrap_or(Path::new("."))))
        }
    }
}

fn inspect_read_only(path: &Path) -> StoreResult<Existing> {
    let is_empty_file = match std::fs::metadata(path) {
        Ok(meta) => meta.len() == 0,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Fresh),
        Err(err) => return Err(err.into()),
    };
    if is_empty_file {
        return Ok(Existing::Fresh);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|err| not_ours(path, err))?;
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    check_existing(path, &conn)
}

fn check_existing(path: &Path, conn: &Connection) -> StoreResult<Existing> {
    let object_count: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(|err| not_ours(path, err))?;
    let application_id: i64 = conn.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    if object_count == 0 && application_id == 0 {
        return Ok(Existing::Fresh);
    }
    if application_id != APPLICATION_ID {
        return Err(StoreError::NotStateDatabase {
            path: path.to_path_buf(),
            detail: format!("application id {application_id:#x}"),
        });
    }
    let found = read_stored_digest(conn).map_err(|err| not_ours(path, err))?;
    let expected = schema_digest();
    match found {
        Some(found) if found == expected => Ok(Existing::Current),
        Some(found) => Err(StoreError::SchemaMismatch {
            path: path.to_path_buf(),
            found,
            expected,
        }),
        None => Err(StoreError::SchemaMismatch {
            path: path.to_path_buf(),
            found: "none".to_string(),
            expected,
        }),
    }
}

fn read_stored_digest(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let has_meta: bool = conn.query_row(
        "SELECT count(*) = 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_meta'",
        [],
        |row| row.get(0),
    )?;
    if !has_meta {
        return Ok(None);
    }
    let row = conn
        .query_row(
            "SELECT schema_name, schema_version, schema_digest FROM schema_meta WHERE id = 1",
            [],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                ))
            },
        )
        .optional()?;
    Ok(row.map(|(name, version, digest)| {
        if name == SCHEMA_NAME && version == SCHEMA_VERSION {
            digest
        } else {
            format!("{name} v{version} {digest}")
        }
    }))
}

/// A file SQLite could not read as ours. An I/O error says nothing about the file (a full
/// disk fails the read-only look too, when the shared-memory file must be made): it stays
/// an I/O error, or `DiskFull`, never "move the file aside".
fn not_ours(path: &Path, err: rusqlite::Error) -> StoreError {
    if err.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure) || super::error::sqlite_disk_full(&err) {
        return StoreError::Sqlite(err).with_disk_full_in(path.parent().unwrap_or(Path::new(".")));
    }
    StoreError::NotStateDatabase {
        path: path.to_path_buf(),
        detail: bounded_detail(&err.to_string()),
    }
}

fn bounded_detail(text: &str) -> String {
    const DETAIL_CHARS_MAX: usize = 160;
    text.chars().take(DETAIL_CHARS_MAX).collect()
}

fn create_database(path: &Path, now_ms: i64) -> StoreResult<()> {
    // Create the file ourselves so it is user-only from its first byte; SQLite gives the
    // -wal and -shm files the same mode.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(DATABASE_FILE_MODE)
        .open(path)?;
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    // auto_vacuum only takes effect before the first table exists.
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;")?;
    configure_writer(&conn)?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // A concurrent creator may have won the race; recheck inside the write lock.
    if let Existing::Current = check_existing(path, &tx)? {
        return Ok(());
    }
    tx.execute_batch(SCHEMA_DDL)?;
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
    ))?;
    tx.execute(
        "INSERT INTO schema_meta (id, schema_name, schema_version, schema_digest, created_at) VALUES (1, ?1, ?2, ?3, ?4)",
        rusqlite::params![SCHEMA_NAME, SCHEMA_VERSION, schema_digest(), now_ms],
    )?;
    tx.commit()?;
    Ok(())
}

/// Prepared statements kept per connection; the store uses a few dozen distinct statements
/// and rusqlite's default of 16 would re-parse them on every write.
pub const STATEMENT_CACHE_CAPACITY: usize = 128;

/// Settings every connection shares. The query planner stability guarantee keeps each cached
/// statement's plan: without it SQLite re-prepares a statement whenever a bound value could
/// change its plan (here the run ID of every `runs ⋈ run_queue` read, against the partial
/// index), which cost a quarter of the writer's CPU per runner message.
fn configure_common(conn: &Connection) -> StoreResult<()> {
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Bytes of a savepoint's journal SQLite keeps in memory before it spills the journal to a
/// temp file. Each job of a group commit runs in its own savepoint, so SQLite copies every page
/// a job touches into this journal and drops it when the job's savepoint is released. SQLite
/// keeps it in one allocation of this size (only the pages written are touched), so a job's
/// journal costs one `malloc`. SQLite's default (64 KiB) spilled a runner message's journal to
/// a file: 10 % more server CPU per run than 256 KiB; 1 MiB leaves room for big jobs.
pub const SAVEPOINT_JOURNAL_MEMORY_BYTES_MAX: i32 = 1024 * 1024;

/// Process-wide SQLite settings, set once before SQLite initializes (it refuses them after).
/// `false` when SQLite was already initialized by then (a test that opened a plain
/// connection first); the writer then keeps its journals in memory another way.
fn configure_library() -> bool {
    static CONFIGURED: OnceLock<bool> = OnceLock::new();
    *CONFIGURED.get_or_init(|| {
        // SAFETY: `sqlite3_config` takes an `int` for this option. SQLite requires it before
        // any connection initializes the library, on no other thread meanwhile: the server
        // opens its store (the first call here) before any other connection. Called after
        // SQLite initialized, it changes nothing and returns `SQLITE_MISUSE`.
        let code = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_STMTJRNL_SPILL,
                SAVEPOINT_JOURNAL_MEMORY_BYTES_MAX,
            )
        };
        code == rusqlite::ffi::SQLITE_OK
    })
}

/// Pragmas of the one writer connection (ARCHITECTURE §6): an acknowledged commit survives
/// power loss (`synchronous = FULL` in WAL mode). A job's savepoint journal stays in memory
/// (`SAVEPOINT_JOURNAL_MEMORY_BYTES_MAX`). Where the library setting could not be made,
/// `temp_store = MEMORY` keeps it in memory instead, in 1 KiB pieces (a `malloc` and `free`
/// each: 2–5 % more server CPU per run than one allocation), since a file is worse still.
pub fn configure_writer(conn: &Connection) -> StoreResult<()> {
    configure_common(conn)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA trusted_schema = OFF;",
    )?;
    if !configure_library() {
        conn.execute_batch("PRAGMA temp_store = MEMORY;")?;
    }
    Ok(())
}

/// Open the writer connection of an already prepared database. SQLite opens a file it may
/// not write read-only without a word; that is refused here (`ReadOnly`), before any write.
pub fn open_writer(path: &Path) -> StoreResult<Connection> {
    configure_library();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        return Err(StoreError::ReadOnly {
            path: path.to_path_buf(),
        });
    }
    configure_writer(&conn).map_err(|err| err.with_disk_full_in(path.parent().unwrap_or(Path::new("."))))?;
    Ok(conn)
}

/// Open a read-only connection for views; it can never write, even by mistake.
pub fn open_reader(path: &Path) -> StoreResult<Connection> {
    configure_library();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    configure_common(&conn)?;
    conn.execute_batch("PRAGMA query_only = ON; PRAGMA trusted_schema = OFF;")?;
    Ok(conn)
}
