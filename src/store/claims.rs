//! Claims: time-limited, generation-fenced rights to change one resource.
//!
//! Architecture Invariant: `protected_write` is the only way to change a claimed run. It
//! performs the spec's eight steps in the caller's transaction; nobody re-implements the
//! checks. Raw tokens exist only in memory inside `ClaimAuthority`; the database holds their
//! SHA-256, and neither ever reaches a log or an error message.

use rusqlite::{OptionalExtension, params};

use super::error::{ClaimLostError, ClaimLostReason, StoreError, StoreResult};
use super::events::{self, RunEvent};
use super::writer::WriteTx;
use crate::digest::{hex_lower, sha256_hex};

/// How long a run claim lives without renewal.
pub const RUN_CLAIM_LEASE_MS: i64 = 30_000;
/// Random bytes in a claim token.
const TOKEN_BYTES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Run,
    Server,
}

impl ResourceType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Server => "server",
        }
    }
}

/// Who holds a claim. `Host` is the retained v1 name for the server acting for a runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerType {
    Host,
    Control,
    Server,
}

impl OwnerType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Control => "control",
            Self::Server => "server",
        }
    }
}

/// A claim token. Never printed, serialized or stored; only its hash reaches the database.
#[derive(Clone, PartialEq, Eq)]
pub struct ClaimToken(String);

impl ClaimToken {
    fn generate() -> StoreResult<Self> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|err| StoreError::Io(std::io::Error::other(format!("no randomness for a claim token: {err}"))))?;
        Ok(Self(hex_lower(&bytes)))
    }

    fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }

    /// The raw token, for tests that prove it never leaks.
    #[doc(hidden)]
    pub fn expose_for_test(&self) -> &str {
        &self.0
    }

    /// The stored hash, for tests that prove it never leaks.
    #[doc(hidden)]
    pub fn hash_for_test(&self) -> String {
        self.hash()
    }
}

impl std::fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClaimToken(<redacted>)")
    }
}

/// Proof of a held claim: what a protected write must present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAuthority {
    pub resource_type: ResourceType,
    pub resource_id: String,
    pub owner_type: OwnerType,
    pub owner_id: String,
    pub generation: i64,
    token: ClaimToken,
}

impl ClaimAuthority {
    pub fn token(&self) -> &ClaimToken {
        &self.token
    }

    /// The same authority with another (forged) token, for claim-rejection tests.
    #[doc(hidden)]
    pub fn with_forged_token_for_test(&self) -> StoreResult<Self> {
        Ok(Self {
            token: ClaimToken::generate()?,
            ..self.clone()
        })
    }

    fn lost(&self, reason: ClaimLostReason) -> ClaimLostError {
        ClaimLostError {
            resource_id: self.resource_id.clone(),
            generation: self.generation,
            reason,
        }
    }
}

/// A lease row as stored.
struct LeaseRow {
    generation: i64,
    holder: Option<Holder>,
}

struct Holder {
    owner_type: String,
    owner_id: String,
    token_hash: String,
    heartbeat_at: i64,
    expires_at: i64,
}

impl Holder {
    /// Whether the row already holds what a renewal at `now_ms` for `lease_ms` would write:
    /// an earlier job of the same group commit renewed this claim in this millisecond.
    fn renewed_at(&self, now_ms: i64, lease_ms: i64) -> bool {
        self.heartbeat_at == now_ms && self.expires_at == now_ms.saturating_add(lease_ms)
    }
}

fn read_lease(tx: &WriteTx<'_>, resource_type: ResourceType, resource_id: &str) -> StoreResult<Option<LeaseRow>> {
    let row = tx
        .conn()
        .prepare_cached(
            "SELECT generation, owner_type, owner_id, token_hash, heartbeat_at, expires_at FROM leases
             WHERE resource_type = ?1 AND resource_id = ?2",
        )?
        .query_row(params![resource_type.as_str(), resource_id], |row| {
            Ok(LeaseRow {
                generation: row.get(0)?,
                holder: holder_at(row, 1)?,
            })
        })
        .optional()?;
    Ok(row)
}

/// Take the claim when it is absent or expired; the generation grows by one.
pub fn acquire(
    tx: &WriteTx<'_>,
    resource_type: ResourceType,
    resource_id: &str,
    owner_type: OwnerType,
    owner_id: &str,
    lease_ms: i64,
) -> StoreResult<ClaimAuthority> {
    assert!(lease_ms > 0, "a claim lease must be positive");
    let now = tx.now_ms();
    let current = read_lease(tx, resource_type, resource_id)?;
    let live = current
        .as_ref()
        .and_then(|row| row.holder.as_ref())
        .is_some_and(|holder| holder.expires_at > now);
    if live {
        return Err(StoreError::ClaimHeld {
            resource_id: resource_id.to_string(),
        });
    }
    let generation = current.map_or(1, |row| row.generation + 1);
    write_holder(
        tx,
        resource_type,
        resource_id,
        generation,
        (owner_type, owner_id),
        lease_ms,
    )
}

/// Record a new holder with a fresh token at `generation`.
fn write_holder(
    tx: &WriteTx<'_>,
    resource_type: ResourceType,
    resource_id: &str,
    generation: i64,
    (owner_type, owner_id): (OwnerType, &str),
    lease_ms: i64,
) -> StoreResult<ClaimAuthority> {
    let now = tx.now_ms();
    let token = ClaimToken::generate()?;
    tx.conn()
        .prepare_cached(
            "INSERT INTO leases (resource_type, resource_id, generation, owner_type, owner_id, token_hash,
                                 acquired_at, heartbeat_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
             ON CONFLICT (resource_type, resource_id) DO UPDATE SET
               generation = excluded.generation, owner_type = excluded.owner_type,
               owner_id = excluded.owner_id, token_hash = excluded.token_hash,
               acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at,
               expires_at = excluded.expires_at",
        )?
        .execute(params![
            resource_type.as_str(),
            resource_id,
            generation,
            owner_type.as_str(),
            owner_id,
            token.hash(),
            now,
            now.saturating_add(lease_ms)
        ])?;
    tracing::debug!(
        resource = resource_type.as_str(),
        resource_id,
        generation,
        "claim acquired"
    );
    Ok(ClaimAuthority {
        resource_type,
        resource_id: resource_id.to_string(),
        owner_type,
        owner_id: owner_id.to_string(),
        generation,
        token,
    })
}

/// Take the claim whatever its holder's expiry, growing the generation. Only for a caller
/// that has proved the previous holder is gone by other means: the server holds the global
/// lock file, which the kernel releases when the old server process dies.
pub fn take_over(
    tx: &WriteTx<'_>,
    resource_type: ResourceType,
    resource_id: &str,
    owner_type: OwnerType,
    owner_id: &str,
    lease_ms: i64,
) -> StoreResult<ClaimAuthority> {
    let current = read_lease(tx, resource_type, resource_id)?;
    let generation = current.map_or(1, |row| row.generation + 1);
    write_holder(
        tx,
        resource_type,
        resource_id,
        generation,
        (owner_type, owner_id),
        lease_ms,
    )
}

/// Steps 2–3 of a protected write: compare owner, generation and token, and require a
/// future expiry. Reads only.
fn verify(tx: &WriteTx<'_>, authority: &ClaimAuthority) -> StoreResult<()> {
    let row = read_lease(tx, authority.resource_type, &authority.resource_id)?;
    check_verified(row.as_ref(), authority, tx.now_ms())
}

fn check_verified(row: Option<&LeaseRow>, authority: &ClaimAuthority, now_ms: i64) -> StoreResult<()> {
    check_holder(row, authority, now_ms).map_err(|reason| {
        let lost = authority.lost(reason);
        tracing::info!(resource_id = %lost.resource_id, generation = lost.generation, reason = %reason, "claim rejected");
        lost.into()
    })
}

/// Step 1 of a protected write in one read: the run's revision and its claim row
/// (`RunNotFound` for an unknown run).
fn read_run_guard(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<(i64, Option<LeaseRow>)> {
    let row = tx
        .conn()
        .prepare_cached(
            "SELECT r.revision, l.generation, l.owner_type, l.owner_id, l.token_hash, l.heartbeat_at, l.expires_at
             FROM runs r LEFT JOIN leases l ON l.resource_type = ?1 AND l.resource_id = r.run_id
             WHERE r.run_id = ?2",
        )?
        .query_row(params![ResourceType::Run.as_str(), run_id], |row| {
            let generation: Option<i64> = row.get(1)?;
            let lease = match generation {
                None => None,
                Some(generation) => Some(LeaseRow {
                    generation,
                    holder: holder_at(row, 2)?,
                }),
            };
            Ok((row.get(0)?, lease))
        })
        .optional()?;
    row.ok_or_else(|| StoreError::RunNotFound {
        run_id: run_id.to_string(),
    })
}

/// The holder columns (`owner_type, owner_id, token_hash, heartbeat_at, expires_at`) from
/// `first` on.
fn holder_at(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Option<Holder>> {
    let owner_type: Option<String> = row.get(first)?;
    let Some(owner_type) = owner_type else {
        return Ok(None);
    };
    Ok(Some(Holder {
        owner_type,
        owner_id: row.get(first + 1)?,
        token_hash: row.get(first + 2)?,
        heartbeat_at: row.get(first + 3)?,
        expires_at: row.get(first + 4)?,
    }))
}

/// Step 4: renew heartbeat and expiry of the exact verified claim.
fn extend(tx: &WriteTx<'_>, authority: &ClaimAuthority, lease_ms: i64) -> StoreResult<()> {
    let now = tx.now_ms();
    let renewed = tx
        .conn()
        .prepare_cached(
            "UPDATE leases SET heartbeat_at = ?1, expires_at = ?2
             WHERE resource_type = ?3 AND resource_id = ?4 AND generation = ?5",
        )?
        .execute(params![
            now,
            now.saturating_add(lease_ms),
            authority.resource_type.as_str(),
            authority.resource_id,
            authority.generation
        ])?;
    assert_eq!(renewed, 1, "a verified claim row must exist");
    Ok(())
}

fn check_holder(row: Option<&LeaseRow>, authority: &ClaimAuthority, now_ms: i64) -> Result<(), ClaimLostReason> {
    let row = row.ok_or(ClaimLostReason::MissingAuthority)?;
    let holder = row.holder.as_ref().ok_or(ClaimLostReason::MissingAuthority)?;
    if holder.owner_type != authority.owner_type.as_str() || holder.owner_id != authority.owner_id {
        return Err(ClaimLostReason::OwnerChanged);
    }
    if row.generation != authority.generation {
        return Err(ClaimLostReason::GenerationChanged);
    }
    if holder.token_hash != authority.token.hash() {
        return Err(ClaimLostReason::TokenChanged);
    }
    if holder.expires_at <= now_ms {
        return Err(ClaimLostReason::Expired);
    }
    Ok(())
}

/// Renew a held claim without changing the resource: the server's backup timer for a run
/// that is not writing. An expired claim cannot renew itself.
pub fn renew(tx: &WriteTx<'_>, authority: &ClaimAuthority, lease_ms: i64) -> StoreResult<()> {
    verify(tx, authority)?;
    extend(tx, authority, lease_ms)
}

/// Let a held claim lapse now, changing nothing else: its holder gives the run up (a runner
/// the server stopped for not answering), so a reclaim can take it under a new generation at
/// once instead of after the rest of the lease. Verified like a renewal (only the exact live
/// holder can do this); the holder columns stay, since a running row always names a holder.
/// The schema keeps an expiry after the last heartbeat, so a claim renewed this very
/// millisecond lapses one millisecond later.
pub fn expire_now(tx: &WriteTx<'_>, authority: &ClaimAuthority) -> StoreResult<()> {
    verify(tx, authority)?;
    let expired = tx
        .conn()
        .prepare_cached(
            "UPDATE leases SET expires_at = max(?1, heartbeat_at + 1)
             WHERE resource_type = ?2 AND resource_id = ?3 AND generation = ?4",
        )?
        .execute(params![
            tx.now_ms(),
            authority.resource_type.as_str(),
            authority.resource_id,
            authority.generation
        ])?;
    assert_eq!(expired, 1, "a verified claim row must exist");
    tracing::debug!(resource_id = %authority.resource_id, generation = authority.generation, "claim given up");
    Ok(())
}

/// Re-arm a claim that expired but still names `authority` exactly (owner, generation and
/// token): nobody took it over. Only the server lease uses this (after a long suspend); a
/// run claim that expired must be re-acquired under a new generation.
pub(crate) fn rearm_expired(tx: &WriteTx<'_>, authority: &ClaimAuthority, lease_ms: i64) -> StoreResult<()> {
    let row = read_lease(tx, authority.resource_type, &authority.resource_id)?;
    match check_holder(row.as_ref(), authority, tx.now_ms()) {
        Ok(()) | Err(ClaimLostReason::Expired) => extend(tx, authority, lease_ms),
        Err(reason) => Err(authority.lost(reason).into()),
    }
}

/// Clear the holder, keeping the generation. Only lifecycle transitions call this, inside a
/// protected write that already verified `authority`.
pub(crate) fn release(tx: &WriteTx<'_>, authority: &ClaimAuthority) -> StoreResult<()> {
    let released = tx
        .conn()
        .prepare_cached(
            "UPDATE leases SET owner_type = NULL, owner_id = NULL, token_hash = NULL,
                    acquired_at = NULL, heartbeat_at = NULL, expires_at = NULL
             WHERE resource_type = ?1 AND resource_id = ?2 AND generation = ?3 AND owner_type IS NOT NULL",
        )?
        .execute(params![
            authority.resource_type.as_str(),
            authority.resource_id,
            authority.generation
        ])?;
    assert_eq!(released, 1, "release follows verification of the same claim");
    Ok(())
}

/// True when the run has a holder at all (live or expired).
pub(crate) fn has_holder(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<bool> {
    Ok(read_lease(tx, ResourceType::Run, run_id)?.is_some_and(|row| row.holder.is_some()))
}

/// What a protected write committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<T> {
    pub value: T,
    pub revision: i64,
}

/// The protected write (spec "Claim rules", steps 1–8) for a claimed run: (1) read the
/// expected resource revision and lease; (2–3) compare owner, generation and token, and
/// require a future expiry; (4) renew the exact claim; (5) apply `change`; (6) append the
/// immutable event and viewer delta; (7) increase the revision; (8) the writer commits.
/// Step 4 writes nothing when the row already holds what it would write (an earlier message
/// of the same group commit renewed the claim in this millisecond).
///
/// Any failure leaves no change (the writer rolls back the job's savepoint).
pub fn protected_write<T>(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected_revision: Option<i64>,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<(T, RunEvent)>,
) -> StoreResult<Committed<T>> {
    let revision = guard(tx, authority, expected_revision)?;
    let (value, event) = change(tx)?;
    let revision = events::advance(tx, &authority.resource_id, revision, &event, Some(authority.generation))?;
    Ok(Committed { value, revision })
}

/// `protected_write` for a change that appends several events (a runner's batch of pure
/// results): steps 1–4 once, then one event and viewer delta per revision, in order.
pub fn protected_write_each<T>(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected_revision: Option<i64>,
    change: impl FnOnce(&WriteTx<'_>) -> StoreResult<(T, Vec<RunEvent>)>,
) -> StoreResult<Committed<T>> {
    let revision = guard(tx, authority, expected_revision)?;
    let (value, events) = change(tx)?;
    let revision = events::advance_each(
        tx,
        &authority.resource_id,
        revision,
        &events,
        Some(authority.generation),
    )?;
    Ok(Committed { value, revision })
}

/// Steps 1–4 of a protected write: the run's current revision, once the claim is verified,
/// the expected revision matched and the claim renewed.
fn guard(tx: &WriteTx<'_>, authority: &ClaimAuthority, expected_revision: Option<i64>) -> StoreResult<i64> {
    assert_eq!(
        authority.resource_type,
        ResourceType::Run,
        "protected writes change runs"
    );
    let (revision, lease) = read_run_guard(tx, &authority.resource_id)?;
    check_verified(lease.as_ref(), authority, tx.now_ms())?;
    events::check_expected_revision(&authority.resource_id, expected_revision, revision)?;
    let holder = lease.as_ref().and_then(|row| row.holder.as_ref());
    let renewed = holder.is_some_and(|holder| holder.renewed_at(tx.now_ms(), RUN_CLAIM_LEASE_MS));
    if !renewed {
        extend(tx, authority, RUN_CLAIM_LEASE_MS)?;
    }
    Ok(revision)
}
