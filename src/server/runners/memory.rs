//! The runner's memory bound: on every liveness tick the runner actor reads its runner
//! process's resident memory; above `PI_WORKFLOWS_RUNNER_MEMORY_MB` (default 4096) the
//! runner is stopped and its run parks as `runnerOutOfMemory`, resumable. The bound is on the
//! runner process itself (where workflow code runs), not on the shell steps and agents it
//! starts: a virtual-memory rlimit would be inherited by them and break programs that
//! reserve large address spaces (a JVM, a linker) without using them.

use super::state::RunnerState;

/// Whether the runner's resident memory is above its bound (`VmRSS` of `/proc/<pid>/status`).
pub fn over_bound(state: &RunnerState) -> bool {
    let Some(bound) = state.args.runners.settings.memory_bytes_max else {
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
