//! A run's presentation changes (`runs.presentation_changes`): what its view shows besides
//! the run's own revision, counted in its row by every write that changes it, so a feed's
//! look after each commit reads one row however long the run's history is.
//!
//! The count is a sum over the rows themselves: each runner epoch started, ready, finished
//! and every liveness change; each request's newest step-update number; the settings change
//! number; each origin-session turn started and ended. Every write that moves a part adds
//! its change here, in its own transaction; `state verify` sums the parts and compares
//! (`verify::LIFECYCLE_INVARIANTS`). Summing the parts at each look cost ~0.5 ms for a run
//! with 1,000 answered agent steps (docs/PERFORMANCE.md, thirtieth round).

use rusqlite::params;

use super::error::{StoreError, StoreResult};
use super::writer::WriteTx;

/// Add `added` changes to the run's presentation (a write moved one of its parts).
pub(crate) fn changed(tx: &WriteTx<'_>, run_id: &str, added: i64) -> StoreResult<()> {
    assert!(added > 0, "a presentation change only adds");
    let counted = tx
        .conn()
        .prepare_cached("UPDATE runs SET presentation_changes = presentation_changes + ?1 WHERE run_id = ?2")?
        .execute(params![added, run_id])?;
    if counted != 1 {
        return Err(StoreError::RunNotFound {
            run_id: run_id.to_string(),
        });
    }
    Ok(())
}

/// One change to the presentation of the run whose runner epoch this is (its start, ready,
/// end or a liveness change).
pub(crate) fn changed_by_epoch(tx: &WriteTx<'_>, runner_epoch: &str) -> StoreResult<()> {
    let counted = tx
        .conn()
        .prepare_cached(
            "UPDATE runs SET presentation_changes = presentation_changes + 1
             WHERE run_id = (SELECT w.run_id FROM run_workers w WHERE w.runner_epoch = ?1)",
        )?
        .execute([runner_epoch])?;
    if counted != 1 {
        return Err(StoreError::InvalidInput {
            what: "runner epoch",
            detail: "no run has this runner epoch".to_string(),
        });
    }
    Ok(())
}
