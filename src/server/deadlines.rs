//! The deadline task (a supervised task under the root, transient): it observes the model
//! time of interactive steps whose Pi turn is open in a connected session, and it times out
//! each waiting step whose time is up — an agent or assistant step whose model time reached
//! its `timeoutMs`, a checkpoint or decision whose wall-clock deadline passed
//! (docs/SESSIONS.md "Deadlines"). A timed-out run is queued, and the scheduler starts the
//! runner that records the timeout on the same attempt and follows its `$result.outcome`
//! route (or ends the run `timed_out`). Startup recovery runs the same timeout pass first.
//!
//! When it looks: every `DEADLINE_TICK_MS` while a turn is open in a connected session
//! (model time grows); else at the next wall-clock deadline the store holds, after a commit
//! (anything committed may have set a deadline or opened a turn) or when a session's
//! coordinator comes or goes (a turn left open by a closed Pi counts again once its session
//! reconnects), but never sooner than a tick after the last look, and at least every
//! `DEADLINE_IDLE_LOOK_MS_MAX`. An idle server therefore does not wake for it, not even with
//! a turn that a closed Pi left open, and a busy one looks at most once a tick, as a fixed
//! tick did.
//!
//! Architecture Invariant: the task holds nothing the store does not know. "Connected" is
//! the one in-memory fact it reads (the coordinators of this server: an older server's
//! coordinators are gone with it), so a restarted task simply observes again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::blocking;
use super::coordinators::Coordinators;
use super::runners::mailbox::RunnerMsg;
use super::runners::registry::Runners;
use super::shared::Shared;
use crate::store::deadlines;

/// How often model time is observed and deadlines are checked. Also the most model time a
/// step can lose or gain at a turn's edge.
pub const DEADLINE_TICK_MS: u64 = 1_000;
/// The longest the task waits with nothing due and nothing committed (a backstop for a wall
/// clock set forward).
pub const DEADLINE_IDLE_LOOK_MS_MAX: u64 = 60_000;
const _: () = assert!(DEADLINE_TICK_MS < DEADLINE_IDLE_LOOK_MS_MAX);

#[derive(Clone)]
pub struct DeadlineArgs {
    pub shared: Arc<Shared>,
    pub coordinators: Arc<Coordinators>,
    pub runners: Arc<Runners>,
}

/// Observe and time out until the server stops.
pub async fn deadline_task(args: DeadlineArgs) -> Result<(), String> {
    let mut commits = args.shared.store.commits();
    let mut coordinators = args.coordinators.changes();
    let mut next_look = Duration::from_millis(DEADLINE_TICK_MS);
    loop {
        tokio::select! {
            () = wait_to_look(&mut commits, &mut coordinators, next_look) => {}
            _ = args.shared.stopped() => return Ok(()),
        }
        if args.shared.stop_requested().is_some() {
            return Ok(());
        }
        // Seen before looking: a commit or coordinator change made while looking wakes the
        // next wait.
        commits.borrow_and_update();
        coordinators.borrow_and_update();
        let observing = observe_once(&args).await;
        time_out_once(&args.shared).await;
        stop_overdue_runners(&args).await;
        next_look = if observing {
            Duration::from_millis(DEADLINE_TICK_MS)
        } else {
            until_next_due(&args.shared).await
        };
    }
}

/// Wait `next_look`, or less when something commits or a coordinator comes or goes, but at
/// least a tick (or `next_look` when that is shorter).
async fn wait_to_look(
    commits: &mut watch::Receiver<u64>,
    coordinators: &mut watch::Receiver<u64>,
    next_look: Duration,
) {
    let tick = Duration::from_millis(DEADLINE_TICK_MS);
    tokio::time::sleep(tick.min(next_look)).await;
    let Some(rest) = next_look.checked_sub(tick).filter(|rest| !rest.is_zero()) else {
        return;
    };
    tokio::select! {
        () = tokio::time::sleep(rest) => {}
        // A closed channel (the writer gone) also returns: the reads then report it.
        _ = commits.changed() => {}
        _ = coordinators.changed() => {}
    }
}

/// How long until the store's next wall-clock deadline: at most `DEADLINE_IDLE_LOOK_MS_MAX`,
/// a tick when one is past (a live claim refused it; look again then) or the read failed.
async fn until_next_due(shared: &Arc<Shared>) -> Duration {
    let tick = Duration::from_millis(DEADLINE_TICK_MS);
    let idle_max = Duration::from_millis(DEADLINE_IDLE_LOOK_MS_MAX);
    match blocking::read(&shared.store, deadlines::next_due_ms).await {
        Ok(None) => idle_max,
        Ok(Some(due_ms)) => {
            let wait_ms = u64::try_from(due_ms.saturating_sub(shared.store.now_ms())).unwrap_or(0);
            if wait_ms == 0 {
                tick
            } else {
                Duration::from_millis(wait_ms).min(idle_max)
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "the next deadline could not be read; looking again in a second");
            tick
        }
    }
}

/// Returns whether a turn is open or waits to be observed in a connected session (model
/// time may grow).
async fn observe_once(args: &DeadlineArgs) -> bool {
    let store = &args.shared.store;
    let connected = |session: &str| args.coordinators.active_epoch(session).is_some();
    let seen = match blocking::read(store, deadlines::observation).await {
        Ok(seen) if !seen.needs_observing(connected) => return false,
        Ok(seen) => seen,
        Err(err) => {
            tracing::warn!(error = %err, "step model time could not be read; observing again in a second");
            return true;
        }
    };
    let coordinators = Arc::clone(&args.coordinators);
    let observed = blocking::write(store, move |tx| {
        deadlines::observe(tx, &seen, |session| coordinators.active_epoch(session).is_some())
    })
    .await;
    if let Err(err) = observed {
        tracing::warn!(error = %err, "step model time could not be recorded; observing again in a second");
    }
    true
}

async fn time_out_once(shared: &Arc<Shared>) {
    let store = &shared.store;
    let now = store.now_ms();
    // A read first: most ticks find nothing, and then nothing is written.
    match blocking::read(store, move |conn| deadlines::expired(conn, now, 1)).await {
        Ok(due) if due.is_empty() => return,
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(error = %err, "deadlines could not be read; checking again in a second");
            return;
        }
    }
    match blocking::write(store, deadlines::time_out_due).await {
        Ok(queued) if !queued.is_empty() => {
            tracing::info!(steps = queued.len(), "timed out steps whose time was up");
            shared.wake_scheduler();
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "steps could not be timed out; trying again in a second"),
    }
}

/// A headless step past its deadline by `OVERDUE_GRACE_MS` whose runner did not end it (its
/// event loop is blocked): its runner is stopped like a stalled one, and the reclaim that
/// follows records the step `timed_out` (`store::deadlines::time_out_overdue`).
async fn stop_overdue_runners(args: &DeadlineArgs) {
    let store = &args.shared.store;
    let now = store.now_ms();
    let overdue = match blocking::read(store, move |conn| {
        deadlines::overdue_runs(conn, now, deadlines::OVERDUE_BATCH_MAX)
    })
    .await
    {
        Ok(overdue) => overdue,
        Err(err) => {
            tracing::warn!(error = %err, "overdue steps could not be read; checking again in a second");
            return;
        }
    };
    for run_id in overdue {
        if let Some(runner) = args.runners.runner_for(&run_id) {
            // A runner already stopping ignores it; one gone leaves its run to the reclaimer.
            let _ = runner.cast(RunnerMsg::Overdue);
        }
    }
}
