//! Managed effects: reserved before execution, settled after, never executed twice.
//!
//! The engine (runner) derives the idempotency key from run ID, effect type, full compiled
//! node path and node visit; workflow code never supplies it. A request fingerprint stops a
//! key from being reused with another payload. Reserving marks the effect `applying` with a
//! numbered attempt: if the runner or server dies before `settle`, the outcome cannot be
//! proved and the effect becomes `ambiguous` (terminal for automatic retry).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::claims::{self, ClaimAuthority, Committed};
use super::error::{StoreError, StoreResult};
use super::events::{Actor, RunEvent};
use super::writer::WriteTx;

/// What the runner asks to reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRequest {
    pub effect_type: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
}

/// The effect's state after `reserve`: execute only when `execute` is true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub effect_id: String,
    pub status: String,
    /// True only for a fresh reservation: the runner may perform the effect now.
    pub execute: bool,
    pub result_hash: Option<String>,
}

/// How the runner settles an effect it executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Applied,
    Rejected,
}

/// `effect.reserve` (protected write). A new key is recorded `applying` with attempt 1; a
/// known key with the same fingerprint returns its state without executing again; another
/// fingerprint under the same key is refused.
pub fn reserve(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    request: &EffectRequest,
) -> StoreResult<Committed<Reservation>> {
    let run_id = authority.resource_id.clone();
    claims::protected_write(tx, authority, expected, |tx| {
        if let Some(existing) = find(tx, &run_id, request)? {
            return Ok((existing, RunEvent::new("effect.adopted", Actor::Host)));
        }
        let effect_id = format!("{run_id}/{}/{}", request.effect_type, request.idempotency_key);
        let conn = tx.conn();
        conn.prepare_cached(
            "INSERT INTO effects (effect_id, run_id, effect_type, idempotency_key, request_fingerprint, status,
                                  attempt_count, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'applying', 1, ?6, ?6)",
        )?
        .execute(params![
            effect_id,
            run_id,
            request.effect_type,
            request.idempotency_key,
            request.request_fingerprint,
            tx.now_ms()
        ])?;
        conn.prepare_cached(
            "INSERT INTO effect_attempts (effect_id, attempt_number, runner_epoch, lease_generation, started_at)
             VALUES (?1, 1, NULL, ?2, ?3)",
        )?
        .execute(params![effect_id, authority.generation, tx.now_ms()])?;
        let reservation = Reservation {
            effect_id,
            status: "applying".to_string(),
            execute: true,
            result_hash: None,
        };
        Ok((reservation, RunEvent::new("effect.reserved", Actor::Host)))
    })
}

fn find(tx: &WriteTx<'_>, run_id: &str, request: &EffectRequest) -> StoreResult<Option<Reservation>> {
    let row: Option<(String, String, String, Option<String>)> = tx
        .conn()
        .prepare_cached(
            "SELECT effect_id, request_fingerprint, status, result_hash FROM effects
             WHERE run_id = ?1 AND effect_type = ?2 AND idempotency_key = ?3",
        )?
        .query_row(params![run_id, request.effect_type, request.idempotency_key], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    let Some((effect_id, fingerprint, status, result_hash)) = row else {
        return Ok(None);
    };
    if fingerprint != request.request_fingerprint {
        return Err(StoreError::InvalidInput {
            what: "effect request",
            detail: format!("key {} already names another request", request.idempotency_key),
        });
    }
    Ok(Some(Reservation {
        effect_id,
        status,
        execute: false,
        result_hash,
    }))
}

/// `effect.settle` (protected write): an applying effect becomes applied or rejected.
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

/// Effects of `run_id` still applying: after a runner death their outcome cannot be proved.
pub fn mark_applying_ambiguous(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<usize> {
    let conn = tx.conn();
    conn.prepare_cached(
        "UPDATE effect_attempts SET outcome = 'ambiguous', finished_at = ?1
         WHERE outcome IS NULL AND effect_id IN (SELECT effect_id FROM effects WHERE run_id = ?2 AND status = 'applying')",
    )?
    .execute(params![tx.now_ms(), run_id])?;
    let changed = conn
        .prepare_cached(
            "UPDATE effects SET status = 'ambiguous', updated_at = ?1 WHERE run_id = ?2 AND status = 'applying'",
        )?
        .execute(params![tx.now_ms(), run_id])?;
    Ok(changed)
}

/// How many effects of `run_id` are applying.
pub fn applying_count(tx: &WriteTx<'_>, run_id: &str) -> StoreResult<i64> {
    let count = tx
        .conn()
        .prepare_cached("SELECT count(*) FROM effects WHERE run_id = ?1 AND status = 'applying'")?
        .query_row([run_id], |row| row.get(0))?;
    Ok(count)
}
