//! Retention (spec "State retention"): which terminal root-run trees have expired, exact-tree
//! deletion, unreferenced-blob collection, and verified backups. `state.prune` and the
//! automatic sweep use the same selector and deletion.
//!
//! Architecture Invariant: a tree is deleted only when every run in it is terminal and older
//! than the cutoff and nothing protects it; the check runs again inside the deleting
//! transaction. Unknown ownership blocks deletion.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use super::error::{StoreError, StoreResult};
use super::schema;
use super::writer::WriteTx;

pub const RETENTION_DAYS_DEFAULT: i64 = 30;
/// `olderThanDays` accepted by `state.prune`.
pub const RETENTION_DAYS_MAX: i64 = 3650;
/// Trees one selection returns at most (a prune deletes in rounds of this many).
pub const TREES_PER_SELECTION_MAX: usize = 500;
pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// An expired root-run tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpiredTree {
    pub root_run_id: String,
    pub runs: i64,
}

/// Trees whose every run is terminal and finished before `cutoff_ms`, and that nothing
/// protects, oldest first.
pub fn expired_trees(conn: &Connection, cutoff_ms: i64, limit: usize) -> StoreResult<Vec<ExpiredTree>> {
    assert!(limit <= TREES_PER_SELECTION_MAX, "selections are bounded");
    let candidates = conn
        .prepare_cached(
            "SELECT root_run_id, count(*) FROM runs GROUP BY root_run_id
             HAVING count(*) = count(*) FILTER (WHERE status IN ('completed', 'failed', 'timed_out', 'cancelled')
                                                AND finished_at < ?1)
             ORDER BY max(finished_at), root_run_id",
        )?
        .query_map([cutoff_ms], |row| {
            Ok(ExpiredTree {
                root_run_id: row.get(0)?,
                runs: row.get(1)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut expired = Vec::new();
    for tree in candidates {
        if expired.len() == limit {
            break;
        }
        if !tree_protected(conn, &tree.root_run_id)? {
            expired.push(tree);
        }
    }
    Ok(expired)
}

/// What keeps a terminal tree: live queue rows, held claims, live runners, pending requests
/// or messages, unsettled effects, or a run outside the tree that names a run inside it.
const PROTECTIONS: &[(&str, &str)] = &[
    (
        "live queue row",
        "SELECT count(*) FROM run_queue q JOIN runs r ON r.run_id = q.run_id
         WHERE r.root_run_id = ?1 AND q.status NOT IN ('done', 'failed', 'cancelled')",
    ),
    (
        "held claim",
        "SELECT count(*) FROM leases l JOIN runs r ON l.resource_type = 'run' AND l.resource_id = r.run_id
         WHERE r.root_run_id = ?1 AND l.owner_type IS NOT NULL",
    ),
    (
        "live runner",
        "SELECT count(*) FROM run_workers w JOIN runs r ON r.run_id = w.run_id
         WHERE r.root_run_id = ?1 AND w.status IN ('starting', 'ready')",
    ),
    (
        "pending interaction",
        "SELECT count(*) FROM interactive_requests i JOIN runs r ON r.run_id = i.run_id
         WHERE r.root_run_id = ?1 AND i.status = 'pending'",
    ),
    (
        "pending workflow message",
        "SELECT count(*) FROM workflow_messages m JOIN runs r ON r.run_id = m.run_id
         WHERE r.root_run_id = ?1 AND m.status = 'pending'",
    ),
    (
        "open origin-session turn",
        "SELECT count(*) FROM workflow_turns t JOIN runs r ON r.run_id = t.run_id
         WHERE r.root_run_id = ?1 AND t.status = 'open'",
    ),
    (
        "unsettled effect",
        "SELECT count(*) FROM effects e JOIN runs r ON r.run_id = e.run_id
         WHERE r.root_run_id = ?1 AND e.status IN ('pending', 'applying', 'ambiguous')",
    ),
    (
        "open channel message",
        "SELECT count(*) FROM channel_messages c JOIN runs r ON r.run_id = c.run_id
         WHERE r.root_run_id = ?1 AND c.state IN ('pending', 'presented')",
    ),
    (
        "reference from another tree",
        "SELECT count(*) FROM runs outside JOIN runs inside ON outside.parent_run_id = inside.run_id
         WHERE inside.root_run_id = ?1 AND outside.root_run_id != ?1",
    ),
];

fn tree_protected(conn: &Connection, root_run_id: &str) -> StoreResult<bool> {
    for (_, sql) in PROTECTIONS {
        let count: i64 = conn.prepare_cached(sql)?.query_row([root_run_id], |row| row.get(0))?;
        if count > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Delete one expired tree (checked again here); false when it no longer qualifies.
pub fn delete_tree(tx: &WriteTx<'_>, root_run_id: &str, cutoff_ms: i64) -> StoreResult<bool> {
    let conn = tx.conn();
    let still_expired: Option<i64> = conn
        .prepare_cached(
            "SELECT count(*) FROM runs WHERE root_run_id = ?1
             HAVING count(*) > 0 AND count(*) = count(*) FILTER (WHERE status IN ('completed', 'failed', 'timed_out', 'cancelled')
                                                                AND finished_at < ?2)",
        )?
        .query_row(params![root_run_id, cutoff_ms], |row| row.get(0))
        .optional()?;
    if still_expired.is_none() || tree_protected(conn, root_run_id)? {
        return Ok(false);
    }
    conn.prepare_cached(
        "DELETE FROM leases WHERE resource_type = 'run'
         AND resource_id IN (SELECT run_id FROM runs WHERE root_run_id = ?1)",
    )?
    .execute([root_run_id])?;
    // Command receipts about the tree's runs go with them (their request rows cascade).
    conn.prepare_cached("DELETE FROM host_commands WHERE run_id IN (SELECT run_id FROM runs WHERE root_run_id = ?1)")?
        .execute([root_run_id])?;
    // Every other row of the tree goes by ON DELETE CASCADE; links inside the tree are
    // checked when the statement ends, when both ends are gone.
    conn.prepare_cached("DELETE FROM runs WHERE root_run_id = ?1")?
        .execute([root_run_id])?;
    Ok(true)
}

/// Blobs younger than this are never collected: a runner's advertised run state is a blob
/// only that runner names, read right after it was stored.
pub const BLOB_GRACE_MS: i64 = 10 * 60 * 1000;

/// Delete blobs no row names any more and older than [`BLOB_GRACE_MS`]. Every `*_hash` /
/// `*_digest` column of every table is a possible reference (bare hex or `sha256:`
/// prefixed), so a new column is covered without a change here. Callers also skip this
/// while a runner is live. Returns the number of blobs deleted.
pub fn collect_unreferenced_blobs(tx: &WriteTx<'_>) -> StoreResult<usize> {
    let references = reference_columns(tx.conn())?;
    assert!(!references.is_empty(), "tables name blobs");
    let union: Vec<String> = references
        .iter()
        .map(|(table, column)| {
            format!(
                "SELECT CASE WHEN \"{column}\" LIKE 'sha256:%' THEN substr(\"{column}\", 8) ELSE \"{column}\" END
                 FROM \"{table}\" WHERE \"{column}\" IS NOT NULL"
            )
        })
        .collect();
    let sql = format!(
        "DELETE FROM blobs WHERE created_at < ?1 AND blob_hash NOT IN ({})",
        union.join(" UNION ")
    );
    Ok(tx.conn().execute(&sql, [tx.now_ms() - BLOB_GRACE_MS])?)
}

/// `(table, column)` of every column that may name a blob.
fn reference_columns(conn: &Connection) -> StoreResult<Vec<(String, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT t.name, c.name FROM pragma_table_list t, pragma_table_info(t.name) c
             WHERE t.schema = 'main' AND t.type = 'table' AND t.name NOT LIKE 'sqlite_%'
               AND t.name NOT IN ('blobs', 'schema_meta')
               AND (c.name LIKE '%\\_hash' ESCAPE '\\' OR c.name LIKE '%\\_digest' ESCAPE '\\')
             ORDER BY t.name, c.name",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?)
}

/// A verified backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupReport {
    pub bytes: u64,
    pub sha256: String,
    pub runs: i64,
}

/// Copy the database at `live` into the new file `dest` (created 0600; it must not exist),
/// as one consistent snapshot (`VACUUM INTO`), then verify the copy: SQLite's integrity
/// check and this program's schema digest. A copy that fails verification is removed.
pub fn backup_to(live: &Path, dest: &Path) -> StoreResult<BackupReport> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(|err| StoreError::InvalidInput {
            what: "backup path",
            detail: format!("{}: {err}; name a new file", dest.display()),
        })?;
    let result = copy_and_verify(live, dest);
    if result.is_err() {
        let _ = std::fs::remove_file(dest);
    }
    result
}

fn copy_and_verify(live: &Path, dest: &Path) -> StoreResult<BackupReport> {
    let source = Connection::open_with_flags(
        live,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.busy_timeout(std::time::Duration::from_millis(schema::BUSY_TIMEOUT_MS))?;
    let dest_text = dest.to_str().ok_or_else(|| StoreError::InvalidInput {
        what: "backup path",
        detail: "the path is not UTF-8".to_string(),
    })?;
    source.execute("VACUUM INTO ?1", [dest_text])?;
    drop(source);
    let copy = Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    let integrity: String = copy.query_row("PRAGMA integrity_check(1)", [], |row| row.get(0))?;
    let digest: String = copy.query_row("SELECT schema_digest FROM schema_meta WHERE id = 1", [], |row| {
        row.get(0)
    })?;
    if integrity != "ok" || digest != schema::schema_digest() {
        return Err(StoreError::CommitFailed(format!(
            "the backup did not verify (integrity: {integrity}); nothing was pruned"
        )));
    }
    let runs: i64 = copy.query_row("SELECT count(*) FROM runs", [], |row| row.get(0))?;
    drop(copy);
    let (bytes, sha256) =
        file_digest(dest).map_err(|err| StoreError::CommitFailed(format!("backup unreadable: {err}")))?;
    Ok(BackupReport { bytes, sha256, runs })
}

/// Size and SHA-256 of a file, read in bounded chunks (a backup can be large).
fn file_digest(path: &Path) -> std::io::Result<(u64, String)> {
    use sha2::Digest as _;
    use std::io::Read as _;
    const CHUNK_BYTES: usize = 1024 * 1024;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut total = 0u64;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        total += read as u64;
    }
    Ok((total, crate::digest::hex_lower(&hasher.finalize())))
}

/// Free pages worth compacting: at least this many bytes...
pub const COMPACT_BYTES_MIN: u64 = 64 * 1024 * 1024;
/// ...and at least this share of all pages (percent).
pub const COMPACT_FREE_PERCENT_MIN: u64 = 20;
/// Pages one incremental-vacuum step returns to the file system (one short write job).
pub const VACUUM_PAGES_PER_STEP: u64 = 1024;

/// Whether the free pages are worth compacting (both thresholds).
pub fn compaction_due(conn: &Connection) -> StoreResult<bool> {
    let number = |pragma: &str| {
        conn.query_row(pragma, [], |row| row.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
    };
    let (page_size, pages, free) = (
        number("PRAGMA page_size")?,
        number("PRAGMA page_count")?,
        number("PRAGMA freelist_count")?,
    );
    Ok(free * page_size >= COMPACT_BYTES_MIN && free * 100 >= pages * COMPACT_FREE_PERCENT_MIN)
}

/// Return up to [`VACUUM_PAGES_PER_STEP`] free pages to the file system (the database is in
/// `auto_vacuum = INCREMENTAL` mode, so this is a short write, never a whole-file rewrite).
/// Returns the free pages left.
pub fn vacuum_step(tx: &WriteTx<'_>) -> StoreResult<u64> {
    // The pragma frees pages while it is stepped, so step it to the end.
    let mut statement = tx
        .conn()
        .prepare_cached(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES_PER_STEP})"))?;
    let mut rows = statement.query([])?;
    while rows.next()?.is_some() {}
    drop(rows);
    let free: i64 = tx.conn().query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
    Ok(free.max(0) as u64)
}

/// Checkpoint the WAL into the database and truncate it (while idle; a busy reader only
/// leaves it longer, which is harmless).
pub fn truncate_wal(live: &Path) -> StoreResult<()> {
    let conn = Connection::open_with_flags(
        live,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_millis(schema::BUSY_TIMEOUT_MS))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}
