//! The automatic retention sweep (recovery step 12, spec "State retention"), a supervised
//! task under the root (transient: a panic restarts it, a stop ends it): after startup
//! recovery and whenever the last runner exits, at most once a day, while the server is idle,
//! delete expired run trees one transaction each with the same selector as `state prune`.
//! New work stops it between trees; it stays due and retries after five idle minutes.
//! Automatic cleanup makes no backup. A completed sweep compacts while still idle: free pages
//! go back to the file system in short incremental-vacuum steps (only when at least 64 MiB
//! and 20 % of pages are free), and the WAL is truncated.
//!
//! Architecture Invariant: the sweep never deletes while a runner is live or runs are
//! admissible, and a failure only logs one bounded diagnostic; it never fails a workflow or
//! stops the server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::blocking;
use super::runners::registry::Runners;
use super::shared::Shared;
use crate::store::{retention, workers};

/// How often a completed sweep runs again.
pub const SWEEP_INTERVAL_MS: u64 = 24 * 60 * 60 * 1000;
/// How soon an interrupted or failed sweep is tried again.
pub const SWEEP_RETRY_MS: u64 = 5 * 60 * 1000;
/// Trees selected per round (the sweep re-checks idleness before each one).
const TREES_PER_ROUND: usize = 16;
/// What the sweep needs: the store and stop signal, and whether runners live.
#[derive(Clone)]
pub struct SweepArgs {
    pub shared: Arc<Shared>,
    pub runners: Arc<Runners>,
    pub days: i64,
}

/// Sweep when due until the server stops. A restarted sweeper (after a panic) has forgotten
/// its last sweep and looks again at once; a sweep is idempotent.
pub async fn sweeper(args: SweepArgs) -> Result<(), String> {
    let (ctx, days) = (&args, args.days);
    let wakes = ctx.shared.sweep_wakes();
    let mut last_completed: Option<Instant> = None;
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wakes.notified() => {}
            _ = ctx.shared.stopped() => return Ok(()),
        }
        let interval = Duration::from_millis(SWEEP_INTERVAL_MS);
        if let Some(done) = last_completed
            && done.elapsed() < interval
        {
            wait = interval - done.elapsed();
            continue;
        }
        wait = match sweep_once(ctx, days).await {
            Sweep::Completed { trees, blobs } => {
                tracing::info!(trees, blobs, "retention sweep completed");
                last_completed = Some(Instant::now());
                interval
            }
            Sweep::Interrupted => Duration::from_millis(SWEEP_RETRY_MS),
            Sweep::Failed(error) => {
                tracing::warn!(error = %crate::protocol::bounded_text(&error, 512), "retention sweep failed; retrying in five minutes");
                Duration::from_millis(SWEEP_RETRY_MS)
            }
        };
    }
}

enum Sweep {
    Completed {
        trees: usize,
        blobs: usize,
    },
    /// New work appeared: the sweep stopped between trees and stays due.
    Interrupted,
    Failed(String),
}

async fn sweep_once(ctx: &SweepArgs, days: i64) -> Sweep {
    let cutoff_ms = ctx.shared.store.now_ms() - days * retention::DAY_MS;
    let mut trees = 0;
    loop {
        let round = match blocking::read(&ctx.shared.store, move |conn| {
            retention::expired_trees(conn, cutoff_ms, TREES_PER_ROUND)
        })
        .await
        {
            Ok(round) => round,
            Err(err) => return Sweep::Failed(err.to_string()),
        };
        if round.is_empty() {
            break;
        }
        let mut deleted_any = false;
        for tree in round {
            if busy(ctx).await {
                return Sweep::Interrupted;
            }
            let root = tree.root_run_id;
            match blocking::write(&ctx.shared.store, move |tx| {
                retention::delete_tree(tx, &root, cutoff_ms)
            })
            .await
            {
                Ok(deleted) => {
                    trees += usize::from(deleted);
                    deleted_any |= deleted;
                }
                Err(err) => return Sweep::Failed(err.to_string()),
            }
            // Let server work start between trees.
            tokio::task::yield_now().await;
        }
        if !deleted_any {
            break;
        }
    }
    if busy(ctx).await {
        return Sweep::Interrupted;
    }
    let blobs = match blocking::write(&ctx.shared.store, retention::collect_unreferenced_blobs).await {
        Ok(blobs) => blobs,
        Err(err) => return Sweep::Failed(err.to_string()),
    };
    compact(ctx).await;
    Sweep::Completed { trees, blobs }
}

/// While still idle: return free pages to the file system in short steps when enough are
/// free, then truncate the WAL. A skipped or failed compaction changes nothing committed.
async fn compact(ctx: &SweepArgs) {
    let due = blocking::read(&ctx.shared.store, retention::compaction_due).await;
    if due.unwrap_or(false) {
        while !busy(ctx).await {
            match blocking::write(&ctx.shared.store, retention::vacuum_step).await {
                Ok(0) => break,
                Ok(_) => tokio::task::yield_now().await,
                Err(err) => {
                    tracing::warn!(error = %err, "compaction step failed; free pages stay reusable");
                    break;
                }
            }
        }
    }
    if busy(ctx).await {
        return;
    }
    let live = ctx.shared.store.path().to_path_buf();
    let truncated = tokio::task::spawn_blocking(move || retention::truncate_wal(&live)).await;
    if !matches!(truncated, Ok(Ok(()))) {
        tracing::warn!("the WAL was not truncated after the sweep; it is checkpointed as usual");
    }
}

/// A live runner, admissible queued work, or a stop in progress.
async fn busy(ctx: &SweepArgs) -> bool {
    if ctx.shared.stop_requested().is_some() || ctx.runners.live() > 0 {
        return true;
    }
    let now = ctx.shared.store.now_ms();
    blocking::read(&ctx.shared.store, move |conn| workers::admissible_runs(conn, now, 1))
        .await
        .map_or(true, |queued| !queued.is_empty())
}
