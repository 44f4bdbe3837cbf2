//! How a runner's end is settled: its one recorded outcome, the park of a run it left
//! running (`runnerNoProgress` when the revision never advanced after ready, else
//! `workerCrashed`; `effectAmbiguous` over both when an effect was applying), and the stop
//! of the process groups it registered and left behind. A stalled runner (`liveness.rs`), or
//! one stopped because the disk is full, parks nothing: once its groups are stopped its claim
//! is given up (`claims::expire_now`; on a disk still full the claim simply expires) and the
//! reclaimer recovers the run as startup recovery would (`recovery::reclaim_run`), at its own
//! pace, so a disk that stays full is not a relaunch loop.
//!
//! Architecture Invariant: a runner exit is not a run failure by itself, and a lost claim
//! changes nothing: another owner has the run.

use std::sync::Arc;

use supervisors::process::ExitOutcome;

use super::state::RunnerState;
use crate::server::blocking;
use crate::store::claims::{self, ClaimAuthority};
use crate::store::effects;
use crate::store::recovery::StaleWorker;
use crate::store::runs::{self, ParkReason, RunStatus};
use crate::store::workers::{self, WorkerOutcome};
use crate::store::{Durability, Store, StoreError, StoreResult, WriteTx};

/// After the runner process ended: record its one outcome and decide the run's state.
pub async fn settle(state: &mut RunnerState, exit: Option<ExitOutcome>, forced: Option<WorkerOutcome>) {
    if state.settled {
        return;
    }
    state.settled = true;
    let outcome = forced.unwrap_or(if state.claim_lost || state.runner_stale {
        WorkerOutcome::ClaimLost
    } else if state.timed_out || state.stalled {
        WorkerOutcome::TimedOut
    } else if exit.is_some_and(ExitOutcome::success) {
        WorkerOutcome::Exited
    } else {
        WorkerOutcome::Crashed
    });
    // A stalled runner's run is the reclaimer's: its claim is given up below instead. So is
    // the run of a runner stopped for a full disk: not the workflow's fault, nothing to review.
    let give_up = (state.stalled || state.disk_full) && !state.claim_lost && !state.finished;
    let leave_alone = state.claim_lost || state.finished || give_up;
    let park = match state.revision_at_ready {
        _ if leave_alone => None,
        // Stopped by the server (shutdown, cancellation): a durable boundary, resumable.
        _ if forced == Some(WorkerOutcome::Cancelled) => Some((i64::MAX, ParkReason::Boundary)),
        // Stopped for its memory: said as such, whatever progress it had made.
        _ if state.out_of_memory => Some((i64::MIN, ParkReason::RunnerOutOfMemory)),
        Some(ready) => Some((ready, ParkReason::WorkerCrashed)),
        None => Some((i64::MIN, ParkReason::RunnerNoProgress)),
    };
    // Children the runner registered die first: until the run is parked and the epoch
    // recorded, no other runner can be admitted for it, so none can overlap with them.
    reap_registered(&state.args.shared.store, Some(state.args.runner_epoch.clone())).await;
    stop_escaped(&state.mark).await;
    // Stopped from outside while the server keeps running (a restart of the runners subtree):
    // the boundary park is requeued at once, as startup recovery would.
    let requeue =
        park.is_some_and(|(_, reason)| reason == ParkReason::Boundary) && state.args.shared.stop_requested().is_none();
    let (authority, epoch) = (state.args.authority.clone(), state.args.runner_epoch.clone());
    // A ready no proposal recorded (the runner ended or was stopped before its first one
    // committed) is still a fact of this epoch: a stall after it counts (`consecutive_stalls`).
    let unrecorded_ready_at_ms = state.ready_at_ms.filter(|_| !state.ready_recorded);
    let (code, signal) = (exit.and_then(ExitOutcome::code), exit.and_then(ExitOutcome::signal));
    // A runner's end alone is a process fact nobody waits for: its commit rides the next
    // one. A change to its run is a workflow fact, on the disk before the actor goes on.
    let plain_end = park.is_none() && !requeue && !give_up;
    let durability = if plain_end {
        Durability::Deferred
    } else {
        Durability::Disk
    };
    let submitted = state.args.shared.store.submit_write(durability, move |tx| {
        if let Some((revision_at_ready, reason)) = park {
            park_if_still_running(tx, &authority, revision_at_ready, reason)?;
        }
        if requeue {
            crate::store::recovery::requeue_boundary(tx, &authority.resource_id)?;
        }
        if give_up {
            // After its groups died: whoever reclaims the run next can overlap with nothing.
            match claims::expire_now(tx, &authority) {
                Ok(()) | Err(StoreError::ClaimLost(_)) => {}
                Err(err) => return Err(err),
            }
        }
        if let Some(ready_at_ms) = unrecorded_ready_at_ms {
            workers::record_ready(tx, &epoch, ready_at_ms)?;
        }
        workers::record_outcome(tx, &epoch, outcome, code, signal)
    });
    let run_id = state.args.run.run_id.clone();
    let settled = async move {
        let settled = match submitted {
            Ok(pending) => pending.wait().await.map(|_| ()),
            Err(err) => Err(err),
        };
        match settled {
            Ok(()) => tracing::info!(run_id = %run_id, outcome = outcome.as_str(), "runner ended"),
            Err(err) => tracing::warn!(run_id = %run_id, error = %err, "runner end was not recorded"),
        }
    };
    if plain_end {
        // Queued already, so every later write (another admission of the run included)
        // commits after it; the actor need not wait, and its slot comes free now.
        tokio::spawn(settled);
    } else {
        settled.await;
    }
}

/// Stop what escaped the runner's process group and still carries its mark (reparented to
/// this server, a subreaper, when the runner ended); the reaper reaps them.
async fn stop_escaped(mark: &str) {
    // Nothing escaped when nothing was reparented here (the usual end): no search.
    if !supervisors::process::has_orphans() {
        return;
    }
    let mark = mark.to_string();
    let killed = tokio::task::spawn_blocking(move || supervisors::process::kill_orphans_with_env(&mark)).await;
    match killed {
        Ok(0) => {}
        Ok(killed) => tracing::info!(killed, "stopped processes that escaped a runner's process group"),
        Err(err) => tracing::warn!(error = %err, "escaped processes were not looked for"),
    }
}

/// Stop the process groups a runner registered and did not unregister (its runner ended
/// first), each only while its recorded start identity still matches; `None` reaps those
/// of every runner epoch (startup recovery, when no runner of this server is alive yet).
pub async fn reap_registered(store: &Arc<Store>, runner_epoch: Option<String>) {
    use supervisors::process::{ProcessSignal, StartIdentity, signal_group_if_identity_matches};
    // The process groups one runner epoch registered (a handful) or, at startup, every
    // epoch's: in place only for one epoch.
    let one_epoch = runner_epoch.is_some();
    let query = move |conn: &rusqlite::Connection| crate::store::processes::attached(conn, runner_epoch.as_deref());
    let attached = blocking::read_small_if(store, one_epoch, query).await;
    let Ok(attached) = attached.inspect_err(|err| tracing::warn!(error = %err, "registered processes unreadable"))
    else {
        return;
    };
    if attached.is_empty() {
        return;
    }
    for process in &attached {
        match process.start_identity.parse::<StartIdentity>() {
            Ok(identity) => match signal_group_if_identity_matches(&identity, ProcessSignal::Kill) {
                Ok(outcome) => {
                    tracing::info!(pid = process.pid, ?outcome, "stopped a registered process group");
                    // Reparented to this server (a subreaper) when its runner died: reap it.
                    supervisors::process::reap_group(identity.pid).await;
                }
                Err(err) => tracing::warn!(pid = process.pid, error = %err, "registered process group not stopped"),
            },
            Err(_) => tracing::warn!(pid = process.pid, "registered process has a malformed start identity"),
        }
    }
    let reaped = blocking::write(store, move |tx| crate::store::processes::mark_reaped(tx, &attached)).await;
    if let Err(err) = reaped {
        tracing::warn!(error = %err, "reaped processes not recorded");
    }
}

/// Stop (SIGKILL, whole group) the processes of runner epochs no actor of this server owns
/// any more — an older server's at startup, or one whose runner actor ended without
/// settling —, each only while its recorded start identity still matches (a reused PID is
/// never touched), with the groups its children lead; then reap what became this server's
/// to reap.
pub async fn stop_stale_runners(stale: &[StaleWorker]) {
    use supervisors::process::{ProcessSignal, SignalOutcome, StartIdentity, signal_group_if_identity_matches};
    for worker in stale {
        let Some(identity) = worker
            .process_start_identity
            .as_deref()
            .and_then(|text| text.parse::<StartIdentity>().ok())
        else {
            continue;
        };
        // A shell step's command runs in a group of its own, and the runner registers it only
        // after its spawn: one started just before an older server died is in no registered
        // group. Found while the runner still lives, it is stopped with it (else it would run
        // on while recovery calls its effect ambiguous).
        let children = child_identities(&identity);
        match signal_group_if_identity_matches(&identity, ProcessSignal::Kill) {
            Ok(outcome) => {
                tracing::info!(pid = identity.pid, ?outcome, "stopped a stale runner");
                for child in &children {
                    if let Ok(SignalOutcome::Signaled) = signal_group_if_identity_matches(child, ProcessSignal::Kill) {
                        tracing::info!(pid = child.pid, "stopped the group of a stale runner's child");
                    }
                }
                if outcome == SignalOutcome::Signaled {
                    supervisors::process::reap_group(identity.pid).await;
                }
            }
            Err(err) => tracing::warn!(pid = identity.pid, error = %err, "could not check a stale runner"),
        }
    }
}

/// The start identities of the live process's direct children (every thread's), if the
/// process is still the one `identity` names.
fn child_identities(identity: &supervisors::process::StartIdentity) -> Vec<supervisors::process::StartIdentity> {
    if supervisors::process::identity_of(identity.pid).as_ref() != Some(identity) {
        return Vec::new();
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", identity.pid)) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .filter_map(supervisors::process::identity_of)
        .collect()
}

/// A launch that failed before its runner could run (e.g. the program is missing): the run
/// must not stay `starting`, so it parks for an explicit resume.
pub async fn abandon_launch(store: &Arc<Store>, authority: ClaimAuthority, runner_epoch: String) {
    let parked = blocking::write(store, move |tx| {
        park_if_still_running(tx, &authority, i64::MIN, ParkReason::RunnerNoProgress)?;
        workers::record_outcome(tx, &runner_epoch, WorkerOutcome::Crashed, None, None)
    })
    .await;
    if let Err(err) = parked {
        tracing::warn!(error = %err, "a failed launch could not be parked");
    }
}

/// Park a run its runner left running: `runnerNoProgress` when the revision did not advance
/// after ready (or ready never came), else `workerCrashed`. A lost claim changes nothing.
fn park_if_still_running(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    revision_at_ready: i64,
    reason: ParkReason,
) -> StoreResult<()> {
    let run = runs::read_run(tx, &authority.resource_id)?;
    if run.status != RunStatus::Running || !run.queue.holds_claim() {
        return Ok(());
    }
    // A validating runner that ended without a verdict: the request stays ready for a
    // corrected retry; the run waits again instead of parking.
    match crate::store::interactions::abandon_validation(tx, authority) {
        Ok(true) | Err(StoreError::ClaimLost(_)) => return Ok(()),
        Ok(false) => {}
        Err(err) => return Err(err),
    }
    let no_progress =
        !matches!(reason, ParkReason::Boundary | ParkReason::RunnerOutOfMemory) && run.revision <= revision_at_ready;
    let reason = if no_progress {
        ParkReason::RunnerNoProgress
    } else {
        reason
    };
    // A manual effect the runner was applying when it ended cannot be proved either way;
    // an idempotent or read-back one is applied again by the next runner.
    let ambiguous = effects::ambiguous_if_interrupted(tx, &authority.resource_id)?;
    let reason = if ambiguous > 0 {
        ParkReason::EffectAmbiguous
    } else {
        reason
    };
    match runs::park_run(tx, authority, None, reason) {
        Ok(_) => {
            effects::interrupt_applying(tx, &authority.resource_id)?;
            Ok(())
        }
        // Another owner has the run now; its effects are not ours to judge.
        Err(StoreError::ClaimLost(_)) => Ok(()),
        Err(err) => Err(err),
    }
}
