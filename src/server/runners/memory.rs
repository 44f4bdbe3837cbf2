//! The runner's memory bound: on every liveness tick the runner actor reads its runner
//! process's resident memory; above the bound — the workflow's `limits.runnerMemoryMb`, else
//! `PI_WORKFLOWS_RUNNER_MEMORY_MB` (default 4096) — the runner is stopped and its run parks
//! as `runnerOutOfMemory`, resumable. The bound is on the
//! runner process itself (where workflow code runs), not on the shell steps and agents it
//! starts: a virtual-memory rlimit would be inherited by them and break programs that
//! reserve large address spaces (a JVM, a linker) without using them.

use serde_json::Value;

use super::state::{RunnerArgs, RunnerState};
use crate::server::blocking;
use crate::store::blobs;
use crate::view::document::DEFINITION_MEDIA_TYPE;

/// The largest bound a workflow may declare, in MiB (the SDK checks the same).
pub const WORKFLOW_MEMORY_MB_MAX: u64 = 65_536;

/// The runner's bound: the workflow's declared `limits.runnerMemoryMb` (read from its
/// definition snapshot, once per definition), else the server's.
pub async fn bound_for(args: &RunnerArgs) -> Option<u64> {
    let digest = &args.run.definition_digest;
    let declared = match args.runners.declared_memory(digest) {
        Some(declared) => declared,
        None => match declared_memory_mb(args).await {
            Some(declared) => {
                args.runners.remember_declared_memory(digest, declared);
                declared
            }
            // Not readable now: the server's bound for this launch, and a fresh look next time.
            None => None,
        },
    };
    declared.map(|mb| mb << 20).or(args.runners.settings.memory_bytes_max)
}

/// The bound a definition declares, in MiB (`Some(None)`: none); `None` when the definition
/// could not be read.
async fn declared_memory_mb(args: &RunnerArgs) -> Option<Option<u64>> {
    let digest = args
        .run
        .definition_digest
        .strip_prefix("sha256:")
        .unwrap_or(&args.run.definition_digest);
    if !crate::digest::is_sha256_hex(digest) {
        return Some(None);
    }
    let hex = digest.to_string();
    let definition = blocking::read(&args.shared.store, move |conn| {
        let reference = blobs::blob_ref(conn, &hex, DEFINITION_MEDIA_TYPE)?;
        blobs::read_blob_verified(conn, &reference)
    })
    .await
    .ok()?;
    let declared = serde_json::from_slice::<Value>(&definition)
        .ok()
        .and_then(|definition| definition.pointer("/limits/runnerMemoryMb").and_then(Value::as_u64))
        .filter(|mb| (1..=WORKFLOW_MEMORY_MB_MAX).contains(mb));
    Some(declared)
}

/// Whether the runner's resident memory is above its bound (`VmRSS` of `/proc/<pid>/status`).
pub fn over_bound(state: &RunnerState) -> bool {
    let Some(bound) = state.memory_bytes_max else {
        return false;
    };
    let Some(resident) = resident_bytes(state.pid) else {
        return false;
    };
    if resident <= bound {
        return false;
    }
    tracing::warn!(
        run_id = %state.args.run.run_id,
        resident_mib = resident >> 20,
        bound_mib = bound >> 20,
        "runner is above its memory bound; stopping it"
    );
    true
}

/// Resident memory of `pid` in bytes.
fn resident_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}
