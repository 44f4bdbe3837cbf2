//! The process registry: children a runner attached to server supervision (a headless Pi
//! child in its own process group).
//!
//! Architecture Invariant: a registration names a start identity, so a reused PID never
//! matches; the server signals a registered group only after checking that identity.

use rusqlite::params;

use super::error::StoreResult;
use super::writer::WriteTx;

/// A registered process still attached (not unregistered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub runner_epoch: String,
    pub pid: i32,
    pub start_identity: String,
}

/// The most processes one runner may register at once (a runner runs one node at a time).
pub const REGISTERED_PER_RUNNER_MAX: i64 = 8;

pub fn register(tx: &WriteTx<'_>, runner_epoch: &str, pid: i32, start_identity: &str) -> StoreResult<()> {
    let attached: i64 = tx
        .conn()
        .prepare_cached("SELECT count(*) FROM runner_processes WHERE runner_epoch = ?1 AND unregistered_at IS NULL")?
        .query_row([runner_epoch], |row| row.get(0))?;
    if attached >= REGISTERED_PER_RUNNER_MAX {
        return Err(super::StoreError::InvalidInput {
            what: "process.register",
            detail: format!(
                "a runner may register at most {REGISTERED_PER_RUNNER_MAX} processes; unregister one first"
            ),
        });
    }
    tx.conn()
        .prepare_cached(
            "INSERT INTO runner_processes (runner_epoch, pid, process_start_identity, registered_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (runner_epoch, pid) DO UPDATE SET
               process_start_identity = excluded.process_start_identity,
               registered_at = excluded.registered_at, unregistered_at = NULL",
        )?
        .execute(params![runner_epoch, pid, start_identity, tx.now_ms()])?;
    Ok(())
}

/// Returns whether a registration was attached.
pub fn unregister(tx: &WriteTx<'_>, runner_epoch: &str, pid: i32) -> StoreResult<bool> {
    let updated = tx
        .conn()
        .prepare_cached(
            "UPDATE runner_processes SET unregistered_at = ?1
             WHERE runner_epoch = ?2 AND pid = ?3 AND unregistered_at IS NULL",
        )?
        .execute(params![tx.now_ms(), runner_epoch, pid])?;
    Ok(updated == 1)
}

/// Attached processes of one runner epoch, or of every epoch when `runner_epoch` is None.
pub fn attached(conn: &rusqlite::Connection, runner_epoch: Option<&str>) -> StoreResult<Vec<Registered>> {
    let mut statement = conn.prepare_cached(
        "SELECT runner_epoch, pid, process_start_identity FROM runner_processes
         WHERE unregistered_at IS NULL AND (?1 IS NULL OR runner_epoch = ?1)",
    )?;
    let rows = statement.query_map([runner_epoch], |row| {
        Ok(Registered {
            runner_epoch: row.get(0)?,
            pid: row.get(1)?,
            start_identity: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The server stopped these processes (runner died first); they are no longer attached.
pub fn mark_reaped(tx: &WriteTx<'_>, reaped: &[Registered]) -> StoreResult<()> {
    for process in reaped {
        unregister(tx, &process.runner_epoch, process.pid)?;
    }
    Ok(())
}
