//! The orphan reaper (a transient task under `runners`): the server is a child subreaper, so
//! whatever a runner leaves behind (a detached child, a double fork) is reparented to it
//! when its parent dies; nobody else waits for those, so the reaper reaps each one that
//! exits, on every SIGCHLD (and on a slow fallback tick in case a signal was coalesced).
//! Leaders a `ProcessChild` owns are never touched (`supervisors::process::reap_orphans`).

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::server::shared::Shared;

/// How often the reaper looks even without a SIGCHLD.
const REAP_FALLBACK_MS: u64 = 30_000;

/// Reap orphans until the server stops.
pub async fn reap_orphans(shared: Arc<Shared>) -> Result<(), String> {
    let mut exits = signal(SignalKind::child()).map_err(|err| format!("cannot watch SIGCHLD: {err}"))?;
    loop {
        tokio::select! {
            _ = exits.recv() => {}
            () = tokio::time::sleep(Duration::from_millis(REAP_FALLBACK_MS)) => {}
            _ = shared.stopped() => return Ok(()),
        }
        // Most SIGCHLDs are owned children's (a runner's end): the look in place finds no
        // orphan, and the search is not sent to the blocking pool (two thread switches).
        if !supervisors::process::has_orphans() {
            continue;
        }
        match tokio::task::spawn_blocking(supervisors::process::reap_orphans).await {
            Ok(0) => {}
            Ok(reaped) => tracing::debug!(reaped, "reaped orphaned processes"),
            Err(err) => return Err(format!("the reaper failed: {err}")),
        }
    }
}
