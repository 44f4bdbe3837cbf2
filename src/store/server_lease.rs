//! The server lease: one row in `leases` (`server`/`server`) whose generation is the server
//! epoch. Only the process holding the global lock file takes it, so taking it over never
//! waits for the old lease to expire: the kernel released the lock when the old server died.

use rusqlite::OptionalExtension;

use super::claims::{self, ClaimAuthority, OwnerType, ResourceType};
use super::error::{ClaimLostReason, StoreError, StoreResult};
use super::writer::WriteTx;

pub const SERVER_RESOURCE_ID: &str = "server";
/// How long the server lease lives without renewal.
pub const SERVER_LEASE_MS: i64 = 30_000;

/// The held server lease. `epoch` fences everything an older server started.
#[derive(Debug, Clone)]
pub struct ServerLease {
    pub epoch: i64,
    authority: ClaimAuthority,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lease had expired (e.g. the machine was suspended) but nobody took it over: this
    /// server re-armed it and keeps its epoch.
    Rearmed,
}

/// Take the server lease with epoch + 1. The caller must hold the global server lock.
pub fn take_server_lease(tx: &WriteTx<'_>, server_id: &str) -> StoreResult<ServerLease> {
    let authority = claims::take_over(
        tx,
        ResourceType::Server,
        SERVER_RESOURCE_ID,
        OwnerType::Server,
        server_id,
        SERVER_LEASE_MS,
    )?;
    Ok(ServerLease {
        epoch: authority.generation,
        authority,
    })
}

/// Renew the lease. A lease that expired while still naming this server (owner, epoch and
/// token) is re-armed instead of lost; any other holder is a claim loss.
pub fn renew_server_lease(tx: &WriteTx<'_>, lease: &ServerLease) -> StoreResult<Renewal> {
    match claims::renew(tx, &lease.authority, SERVER_LEASE_MS) {
        Ok(()) => Ok(Renewal::Renewed),
        Err(StoreError::ClaimLost(lost)) if lost.reason == ClaimLostReason::Expired => {
            claims::rearm_expired(tx, &lease.authority, SERVER_LEASE_MS)?;
            tracing::info!(
                epoch = lease.epoch,
                "server lease had expired (suspend?); re-armed under the same epoch"
            );
            Ok(Renewal::Rearmed)
        }
        Err(err) => Err(err),
    }
}

/// Release the lease at a graceful stop (the epoch stays recorded).
pub fn release_server_lease(tx: &WriteTx<'_>, lease: &ServerLease) -> StoreResult<()> {
    claims::renew(tx, &lease.authority, SERVER_LEASE_MS).or_else(|err| match err.claim_lost_reason() {
        Some(ClaimLostReason::Expired) => Ok(()),
        _ => Err(err),
    })?;
    claims::release(tx, &lease.authority)
}

/// The latest server epoch recorded, if any server ever ran.
pub fn current_epoch(conn: &rusqlite::Connection) -> StoreResult<Option<i64>> {
    let epoch = conn
        .prepare_cached("SELECT generation FROM leases WHERE resource_type = 'server' AND resource_id = ?1")?
        .query_row([SERVER_RESOURCE_ID], |row| row.get(0))
        .optional()?;
    Ok(epoch)
}
