//! Runner liveness: after `runner.ready` the runner actor pings its runner every
//! `ping_interval` (one ping in flight at most, so a stopped runner's socket never fills);
//! the runner answers from its event loop. A runner that has not answered for
//! `unresponsive_after` is recorded as unresponsive (the view's activity says so, with the
//! run's usual controls, `cancel` among them); its next pong records it responsive again.
//!
//! Only a runner silent for `stalled_after` (minutes by default: a stopped process or a
//! wedged event loop, not a slow step) is stopped: the actor renews its claim on the
//! runner's behalf, so without this bound a SIGSTOPped or hung runner would hold its run
//! forever. The actor then kills the group, gives the claim up and leaves the run to the
//! reclaimer (`server/reclaimer.rs`), the same recovery as after a server crash.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::state::RunnerState;
use crate::protocol::encode_frame;
use crate::protocol::runner::ping;
use crate::server::blocking;
use crate::store::workers;

/// How long a ping may take to write before it counts as not sent.
const PING_WRITE_MS: u64 = 100;

/// What the ping timer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Alive,
    /// Silent for `stalled_after`: the actor must stop the runner.
    Stalled,
}

/// The ping timer: record a runner silent for too long, and send the next ping.
pub async fn on_tick(state: &mut RunnerState) -> Tick {
    let settings = &state.args.runners.settings;
    let late = state.liveness.last_tick.elapsed() > settings.ping_interval + settings.unresponsive_after;
    state.liveness.last_tick = Instant::now();
    // A timer this late means the server itself did not run (stopped, starved): the runner
    // could not answer pings nobody sent, so its silence counts from now.
    if late || !state.ready() || state.finished || state.claim_lost || state.settled {
        state.liveness.last_seen = Instant::now();
        return Tick::Alive;
    }
    let silent = state.liveness.last_seen.elapsed();
    if silent >= settings.stalled_after {
        tracing::warn!(run_id = %state.args.run.run_id, silent_ms = silent.as_millis() as u64, "runner stalled; stopping it");
        return Tick::Stalled;
    }
    if silent >= settings.unresponsive_after && !state.liveness.unresponsive {
        tracing::warn!(run_id = %state.args.run.run_id, silent_ms = silent.as_millis() as u64, "runner does not answer pings");
        record(state, false).await;
    }
    if state.liveness.outstanding.is_some() {
        return Tick::Alive;
    }
    state.liveness.next += 1;
    let number = state.liveness.next;
    let Ok(bytes) = encode_frame(&ping(number)) else {
        return Tick::Alive;
    };
    let write = state.writer.write_all(&bytes);
    if matches!(
        tokio::time::timeout(Duration::from_millis(PING_WRITE_MS), write).await,
        Ok(Ok(()))
    ) {
        state.liveness.outstanding = Some(number);
    }
    Tick::Alive
}

/// A pong: the runner's event loop runs.
pub async fn on_pong(state: &mut RunnerState, number: u64) {
    if state.liveness.outstanding != Some(number) {
        return;
    }
    state.liveness.outstanding = None;
    state.liveness.last_seen = Instant::now();
    if state.liveness.unresponsive {
        tracing::info!(run_id = %state.args.run.run_id, "runner answers pings again");
        record(state, true).await;
    }
}

async fn record(state: &mut RunnerState, responsive: bool) {
    let epoch = state.args.runner_epoch.clone();
    let recorded = blocking::write(&state.args.shared.store, move |tx| {
        workers::record_responsiveness(tx, &epoch, responsive)
    })
    .await;
    match recorded {
        Ok(_) => state.liveness.unresponsive = !responsive,
        Err(err) => tracing::warn!(error = %err, "runner liveness was not recorded"),
    }
}
