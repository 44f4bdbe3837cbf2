//! Managed effects: reserved before execution, settled after, never executed twice unless
//! the workflow's contract or an operator's review says a repeat is safe.
//!
//! The engine (runner) derives the idempotency key from run ID, effect type, full compiled
//! node path and node visit; workflow code never supplies it. A request fingerprint stops a
//! key from being reused with another payload. Reserving marks the effect `applying` with a
//! numbered attempt. If the runner or server dies before `settle`, the contract decides
//! (spec "Effects and retry safety"): an `idempotent` effect is applied again with the same
//! key (the external system deduplicates), a `readBack` effect is observed first and applied
//! again only when that proves it did not apply, and a `manual` effect becomes `ambiguous`
//! (terminal for automatic retry) until an operator reviews it.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::claims::{self, ClaimAuthority, Committed};
use super::error::{StoreError, StoreResult};
use super::events::{Actor, RunEvent};
use super::writer::WriteTx;
use crate::wire_enum::wire_enum;

/// Attempts of one effect, at most: a contract that repeats forever (every attempt
/// interrupted) becomes ambiguous instead of trying again.
pub const EFFECT_ATTEMPTS_MAX: i64 = 16;
/// A request summary's length bound (bytes), as the schema checks it.
pub const REQUEST_SUMMARY_BYTES_MAX: usize = 200;
/// Effects one review listing shows, at most (newest attempts first within a run).
pub const REVIEW_EFFECTS_MAX: usize = 100;

wire_enum! {
    /// What the workflow promised about repeating the effect.
    pub enum EffectRecovery {
        /// The external system deduplicates by the engine's key: applying again is safe.
        Idempotent = "idempotent",
        /// The workflow can observe whether it applied: observe, then apply only if not.
        ReadBack = "readBack",
        /// Neither: an interrupted attempt becomes ambiguous and waits for review.
        Manual = "manual",
    }
}

wire_enum! {
    /// An operator's verdict on an ambiguous effect after inspecting the external system.
    pub enum ReviewResolution {
        /// It applied: record success; the node continues with the supplied result.
        Applied = "applied",
        /// It did not apply (or a duplicate is acceptable): a new numbered attempt.
        Retry = "retry",
        /// Treat it as failed: the node fails and routes through `$result.outcome`.
        Failed = "failed",
    }
}

/// What the runner asks to reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRequest {
    pub effect_type: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub recovery: EffectRecovery,
    /// The node attempt reserving it (names the node and visit for review).
    pub attempt_id: Option<String>,
    /// A short, non-secret description (≤ [`REQUEST_SUMMARY_BYTES_MAX`] bytes).
    pub request_summary: Option<String>,
}

/// The effect's state after `reserve`: execute only when `execute` is true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub effect_id: String,
    pub status: String,
    /// True only when the runner may perform the effect now (a fresh reservation, or a new
    /// attempt of an interrupted idempotent or read-back effect, or a reviewed retry).
    pub execute: bool,
    /// The attempt number the runner holds (0 when it does not execute).
    pub attempt: i64,
    /// A read-back effect whose previous attempt was interrupted: observe before applying.
    pub observe_first: bool,
    pub result_hash: Option<String>,
}

/// How the runner settles an effect it executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Applied,
    Rejected,
    /// The runner could not prove the outcome (a read-back check failed): review decides.
    Ambiguous,
}

/// `effect.reserve` (protected write). A new key is recorded `applying` with attempt 1; a
/// known key with the same fingerprint returns its state, and a `pending` one (interrupted
/// under a repeatable contract, or reviewed for retry) gets a new attempt; another
/// fingerprint under the same key is refused.
pub fn reserve(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    request: &EffectRequest,
) -> StoreResult<Committed<Reservation>> {
    if let Some(summary) = &request.request_summary {
        assert!(summary.len() <= REQUEST_SUMMARY_BYTES_MAX, "callers bound the summary");
    }
    let run_id = authority.resource_id.clone();
    claims::protected_write(tx, authority, expected, |tx| match find(tx, &run_id, request)? {
        Some(existing) if existing.status == "pending" => {
            let reservation = new_attempt(tx, authority, existing)?;
            Ok((reservation, RunEvent::new("effect.reserved", Actor::Host)))
        }
        Some(existing) => Ok((existing.reservation(), RunEvent::new("effect.adopted", Actor::Host))),
        None => {
            let reservation = insert(tx, authority, &run_id, request)?;
            Ok((reservation, RunEvent::new("effect.reserved", Actor::Host)))
        }
    })
}

fn insert(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    run_id: &str,
    request: &EffectRequest,
) -> StoreResult<Reservation> {
    let effect_id = format!("{run_id}/{}/{}", request.effect_type, request.idempotency_key);
    tx.conn()
        .prepare_cached(
            "INSERT INTO effects (effect_id, run_id, effect_type, idempotency_key, request_fingerprint, recovery,
                                  attempt_id, request_summary, status, attempt_count, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'applying', 1, ?9, ?9)",
        )?
        .execute(params![
            effect_id,
            run_id,
            request.effect_type,
            request.idempotency_key,
            request.request_fingerprint,
            request.recovery.as_str(),
            request.attempt_id,
            request.request_summary,
            tx.now_ms()
        ])?;
    insert_attempt(tx, &effect_id, 1, authority.generation)?;
    Ok(Reservation {
        effect_id,
        status: "applying".to_string(),
        execute: true,
        attempt: 1,
        observe_first: false,
        result_hash: None,
    })
}

/// A `pending` effect applies again under a new attempt number; past the attempt bound it
/// becomes ambiguous instead (an operator decides).
fn new_attempt(tx: &WriteTx<'_>, authority: &ClaimAuthority, existing: Found) -> StoreResult<Reservation> {
    let conn = tx.conn();
    if existing.attempt_count >= EFFECT_ATTEMPTS_MAX {
        conn.prepare_cached("UPDATE effects SET status = 'ambiguous', updated_at = ?1 WHERE effect_id = ?2")?
            .execute(params![tx.now_ms(), existing.effect_id])?;
        return Ok(Reservation {
            status: "ambiguous".to_string(),
            ..existing.reservation()
        });
    }
    let attempt = existing.attempt_count + 1;
    let last_outcome: Option<String> = conn
        .prepare_cached("SELECT outcome FROM effect_attempts WHERE effect_id = ?1 AND attempt_number = ?2")?
        .query_row(params![existing.effect_id, existing.attempt_count], |row| row.get(0))
        .optional()?
        .flatten();
    conn.prepare_cached(
        "UPDATE effects SET status = 'applying', attempt_count = ?1, updated_at = ?2 WHERE effect_id = ?3",
    )?
    .execute(params![attempt, tx.now_ms(), existing.effect_id])?;
    insert_attempt(tx, &existing.effect_id, attempt, authority.generation)?;
    // A reviewed retry applies without observing: the operator already inspected it.
    let observe_first = existing.recovery == EffectRecovery::ReadBack && last_outcome.as_deref() == Some("interrupted");
    Ok(Reservation {
        status: "applying".to_string(),
        execute: true,
        attempt,
        observe_first,
        ..existing.reservation()
    })
}

fn insert_attempt(tx: &WriteTx<'_>, effect_id: &str, attempt: i64, generation: i64) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO effect_attempts (effect_id, attempt_number, runner_epoch, lease_generation, started_at)
             VALUES (?1, ?2, NULL, ?3, ?4)",
        )?
        .execute(params![effect_id, attempt, generation, tx.now_ms()])?;
    Ok(())
}

/// A stored effect as `reserve` needs it.
struct Found {
    effect_id: String,
    status: String,
    recovery: EffectRecovery,
    attempt_count: i64,
    result_hash: Option<String>,
}

impl Found {
    fn reservation(&self) -> Reservation {
        Reservation {
            effect_id: self.effect_id.clone(),
            status: self.status.clone(),
            execute: false,
            attempt: 0,
            observe_first: false,
            result_hash: self.result_hash.clone(),
        }
    }
}

fn find(tx: &WriteTx<'_>, run_id: &str, request: &EffectRequest) -> StoreResult<Option<Found>> {
    type Row = (String, String, String, String, i64, Option<String>);
    let row: Option<Row> = tx
        .conn()
        .prepare_cached(
            "SELECT effect_id, request_fingerprint, status, recovery, attempt_count, result_hash FROM effects
             WHERE run_id = ?1 AND effect_type = ?2 AND idempotency_key = ?3 AND owner = 'runner'",
        )?
        .query_row(params![run_id, request.effect_type, request.idempotency_key], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .optional()?;
    let Some((effect_id, fingerprint, status, recovery, attempt_count, result_hash)) = row else {
        return Ok(None);
    };
    if fingerprint != request.request_fingerprint {
        return Err(StoreError::EffectRequestChanged {
            run_id: run_id.to_string(),
            idempotency_key: request.idempotency_key.clone(),
        });
    }
    let recovery = EffectRecovery::from_wire(&recovery).unwrap_or(EffectRecovery::Manual);
    Ok(Some(Found {
        effect_id,
        status,
        recovery,
        attempt_count,
        result_hash,
    }))
}

/// `effect.settle` (protected write): an applying effect becomes applied, rejected or
/// (unprovable) ambiguous.
pub fn settle(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    effect_id: &str,
    settlement: Settlement,
    result_hash: Option<&str>,
) -> StoreResult<i64> {
    let run_id = authority.resource_id.clone();
    let (status, outcome) = match settlement {
        Settlement::Applied => ("applied", "applied"),
        Settlement::Rejected => ("rejected", "rejected"),
        Settlement::Ambiguous => ("ambiguous", "ambiguous"),
    };
    let committed = claims::protected_write(tx, authority, expected, |tx| {
        let conn = tx.conn();
        let changed = conn
            .prepare_cached(
                "UPDATE effects SET status = ?1, result_hash = ?2, updated_at = ?3
                 WHERE effect_id = ?4 AND run_id = ?5 AND status = 'applying'",
            )?
            .execute(params![status, result_hash, tx.now_ms(), effect_id, run_id])?;
        if changed != 1 {
            return Err(StoreError::InvalidInput {
                what: "effect settlement",
                detail: "the effect is not applying".to_string(),
            });
        }
        conn.prepare_cached(
            "UPDATE effect_attempts SET outcome = ?1, finished_at = ?2 WHERE effect_id = ?3 AND outcome IS NULL",
        )?
        .execute(params![outcome, tx.now_ms(), effect_id])?;
        Ok(((), RunEvent::new("effect.settled", Actor::Host)))
    })?;
    Ok(committed.revision)
}

/// The runner of `run_id` ended (crash, kill, server death) while effects were applying:
/// each follows its contract. Manual effects become ambiguous; idempotent and read-back
/// ones become `pending` (their attempt `interrupted`) so the next runner applies them
/// again with the same key (read-back: observes first). Returns how many became ambiguous.
pub fn interrupt_applying(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<usize> {
    let conn = tx.conn();
    conn.prepare_cached(
        "UPDATE effect_attempts
         SET outcome = CASE WHEN (SELECT recovery FROM effects e WHERE e.effect_id = effect_attempts.effect_id) = 'manual'
                            THEN 'ambiguous' ELSE 'interrupted' END,
             finished_at = ?1
         WHERE outcome IS NULL AND effect_id IN
           (SELECT effect_id FROM effects WHERE run_id = ?2 AND status = 'applying' AND owner = 'runner')",
    )?
    .execute(params![tx.now_ms(), run_id])?;
    let ambiguous = conn
        .prepare_cached(
            "UPDATE effects SET status = 'ambiguous', updated_at = ?1
             WHERE run_id = ?2 AND status = 'applying' AND recovery = 'manual' AND owner = 'runner'",
        )?
        .execute(params![tx.now_ms(), run_id])?;
    conn.prepare_cached(
        "UPDATE effects SET status = 'pending', updated_at = ?1
         WHERE run_id = ?2 AND status = 'applying' AND owner = 'runner'",
    )?
    .execute(params![tx.now_ms(), run_id])?;
    Ok(ambiguous)
}

/// A run ends (cancellation) while its runner's effects were applying: whatever the
/// contract, nothing will apply them again, so their outcome stays unknown — each becomes
/// ambiguous. A channel adapter's in-flight send is its own to settle.
pub fn mark_applying_ambiguous(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<usize> {
    let conn = tx.conn();
    conn.prepare_cached(
        "UPDATE effect_attempts SET outcome = 'ambiguous', finished_at = ?1
         WHERE outcome IS NULL AND effect_id IN
           (SELECT effect_id FROM effects WHERE run_id = ?2 AND status = 'applying' AND owner = 'runner')",
    )?
    .execute(params![tx.now_ms(), run_id])?;
    let changed = conn
        .prepare_cached(
            "UPDATE effects SET status = 'ambiguous', updated_at = ?1
             WHERE run_id = ?2 AND status = 'applying' AND owner = 'runner'",
        )?
        .execute(params![tx.now_ms(), run_id])?;
    Ok(changed)
}

/// How many effects of `run_id` an interruption now would make ambiguous (manual ones
/// applying): decides a park reason before the park commits.
pub fn ambiguous_if_interrupted(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<i64> {
    let count = tx
        .conn()
        .prepare_cached(
            "SELECT count(*) FROM effects
             WHERE run_id = ?1 AND status = 'applying' AND recovery = 'manual' AND owner = 'runner'",
        )?
        .query_row([run_id], |row| row.get(0))?;
    Ok(count)
}

/// How many effects of `run_id` are ambiguous.
pub fn ambiguous_count(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<i64> {
    let count = conn
        .prepare_cached("SELECT count(*) FROM effects WHERE run_id = ?1 AND status = 'ambiguous' AND owner = 'runner'")?
        .query_row([run_id], |row| row.get(0))?;
    Ok(count)
}

/// Settle one ambiguous effect by an operator's review. The caller holds the run's
/// lifecycle transition (no live claim, expected revision checked); this checks the
/// effect's own state, so of two concurrent reviews exactly one wins. `result_hash` is the
/// stored result an `applied` review records (the node's output), or the error a `failed`
/// one records.
pub fn review(
    tx: &WriteTx<'_>,
    run_id: &str,
    effect_id: &str,
    resolution: ReviewResolution,
    result_hash: Option<&str>,
) -> StoreResult<()> {
    let conn = tx.conn();
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM effects WHERE effect_id = ?1 AND run_id = ?2 AND owner = 'runner'")?
        .query_row(params![effect_id, run_id], |row| row.get(0))
        .optional()?;
    let Some(status) = status else {
        return Err(StoreError::EffectNotFound {
            run_id: run_id.to_string(),
            effect_id: effect_id.to_string(),
        });
    };
    if status != "ambiguous" {
        return Err(StoreError::EffectNotAmbiguous {
            effect_id: effect_id.to_string(),
            status,
        });
    }
    let (new_status, result_hash) = match resolution {
        ReviewResolution::Applied => ("applied", result_hash),
        ReviewResolution::Retry => ("pending", None),
        ReviewResolution::Failed => ("rejected", result_hash),
    };
    let changed = conn
        .prepare_cached(
            "UPDATE effects SET status = ?1, result_hash = ?2, updated_at = ?3
             WHERE effect_id = ?4 AND status = 'ambiguous'",
        )?
        .execute(params![new_status, result_hash, tx.now_ms(), effect_id])?;
    assert_eq!(changed, 1, "the status was read as ambiguous in this transaction");
    conn.prepare_cached(
        "UPDATE effect_attempts SET review = ?1
         WHERE effect_id = ?2 AND attempt_number = (SELECT attempt_count FROM effects WHERE effect_id = ?2)
           AND outcome = 'ambiguous'",
    )?
    .execute(params![resolution.as_str(), effect_id])?;
    Ok(())
}

/// One effect as a review lists it: what, where, when, how many attempts — never the
/// request itself (only its workflow-given summary and its fingerprint's prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewedEffect {
    pub effect_id: String,
    pub effect_type: String,
    pub status: String,
    pub recovery: String,
    pub node_path: Option<String>,
    pub visit: Option<i64>,
    pub attempt_count: i64,
    pub updated_at_ms: i64,
    pub request_summary: Option<String>,
    pub request_fingerprint_prefix: String,
}

/// The effects of `run_id` an operator may need to review: ambiguous ones first, then the
/// rest, at most [`REVIEW_EFFECTS_MAX`].
pub fn list_for_review(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<Vec<ReviewedEffect>> {
    let effects = conn
        .prepare_cached(
            "SELECT e.effect_id, e.effect_type, e.status, e.recovery, a.node_path, a.visit, e.attempt_count,
                    e.updated_at, e.request_summary, substr(e.request_fingerprint, 1, 12)
             FROM effects e LEFT JOIN node_attempts a ON a.attempt_id = e.attempt_id
             WHERE e.run_id = ?1 AND e.owner = 'runner'
             ORDER BY e.status <> 'ambiguous', e.created_at, e.effect_id
             LIMIT ?2",
        )?
        .query_map(params![run_id, REVIEW_EFFECTS_MAX as i64], |row| {
            Ok(ReviewedEffect {
                effect_id: row.get(0)?,
                effect_type: row.get(1)?,
                status: row.get(2)?,
                recovery: row.get(3)?,
                node_path: row.get(4)?,
                visit: row.get(5)?,
                attempt_count: row.get(6)?,
                updated_at_ms: row.get(7)?,
                request_summary: row.get(8)?,
                request_fingerprint_prefix: row.get(9)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(effects)
}
