//! The warm runner pool (a permanent worker under `runners`): runner processes started ahead
//! of need, each waiting (on its fd 3 channel) for a launch envelope, so a run's first node
//! does not wait for a Node start-up.
//!
//! The pool refills when it starts and when the server's last runner ends, not when a warm
//! runner is taken: a Node start-up takes a core for ~50–100 ms, which on a small machine
//! measurably slowed the run that had just begun (per-node overhead 0.4 → 1.0 ms on 2 cores).
//! A warm runner still booting when taken is used as is (the start-up is already under way).
//! A restarted pool starts empty and refills; the processes of the pool that failed were
//! killed and reaped when their `ProcessChild`ren were dropped.
//!
//! Architecture Invariant: a warm runner holds nothing: no claim, no runner epoch, no
//! workflow code. It becomes a run's runner only after that run's epoch is recorded; if the
//! server dies first, the channel closes and the warm runner exits on its own (end of file
//! before any launch). The pool owns its processes until it hands one over; then the runner
//! actor that took it owns it.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{DetailsCell, ProcessInfo};

use super::mailbox::{PoolMsg, WarmRunner};
use super::registry::Runners;
use crate::server::config::{Program, WARM_RUNNERS_MAX};
use crate::server::shared::Shared;
use crate::server::spawn::spawn_with_channel;

/// How long the pool waits for a warm runner to stop on a graceful stop.
const WARM_STOP_GRACE_MS: u64 = 500;

pub struct Pool;

#[derive(Clone)]
pub struct PoolArgs {
    pub runners: Arc<Runners>,
    pub shared: Arc<Shared>,
    pub details: DetailsCell,
}

impl PoolArgs {
    /// The server is stopping: no new warm process.
    fn stopping(&self) -> bool {
        self.shared.stop_requested().is_some()
    }
}

pub struct PoolState {
    args: PoolArgs,
    warm: Vec<WarmRunner>,
}

impl Actor for Pool {
    type Msg = PoolMsg;
    type State = PoolState;
    type Arguments = PoolArgs;

    async fn pre_start(&self, myself: ActorRef<PoolMsg>, args: PoolArgs) -> Result<PoolState, ActorProcessingErr> {
        args.runners.set_pool(Some(myself.clone()));
        args.details.set_processes([]);
        let _ = myself.cast(PoolMsg::Refill);
        Ok(PoolState { args, warm: Vec::new() })
    }

    async fn post_stop(&self, myself: ActorRef<PoolMsg>, state: &mut PoolState) -> Result<(), ActorProcessingErr> {
        if state
            .args
            .runners
            .pool()
            .is_some_and(|pool| pool.get_id() == myself.get_id())
        {
            state.args.runners.set_pool(None);
        }
        for mut runner in state.warm.drain(..) {
            let _ = runner.child.terminate(Duration::from_millis(WARM_STOP_GRACE_MS)).await;
        }
        state.args.details.set_processes([]);
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<PoolMsg>,
        message: PoolMsg,
        state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PoolMsg::Take(reply) => {
                let taken = take(state);
                show(state);
                let _ = reply.send(taken);
            }
            PoolMsg::Refill => {
                refill(state);
                show(state);
            }
        }
        Ok(())
    }
}

/// A live warm runner; one that exited on its own (e.g. a broken installation) is dropped.
fn take(state: &mut PoolState) -> Option<WarmRunner> {
    while let Some(mut runner) = state.warm.pop() {
        if matches!(runner.child.try_exit(), Ok(None)) {
            return Some(runner);
        }
    }
    None
}

/// Start warm runners until the target number wait.
fn refill(state: &mut PoolState) {
    let settings = &state.args.runners.settings;
    let Some(program) = settings.program.clone() else {
        return;
    };
    let target = settings.warm_runners.min(WARM_RUNNERS_MAX);
    if state.args.stopping() {
        return;
    }
    state
        .warm
        .retain_mut(|runner| matches!(runner.child.try_exit(), Ok(None)));
    while state.warm.len() < target {
        match start_one(state, &program) {
            Ok(runner) => state.warm.push(runner),
            Err(err) => {
                tracing::warn!(error = %err, "could not start a warm runner; runners start on demand");
                return;
            }
        }
    }
}

fn start_one(state: &PoolState, program: &Program) -> anyhow::Result<WarmRunner> {
    // Numbered from the registry's counter, so a restarted pool never reuses a capture name.
    let log_stem = format!("warm-e{}-{}", state.args.shared.epoch, state.args.runners.next_launch());
    let (child, channel) = spawn_with_channel(&state.args.runners.settings, program, &log_stem, None)?;
    Ok(WarmRunner {
        child,
        channel,
        log_stem,
    })
}

/// The tree shows the processes the pool owns right now.
fn show(state: &PoolState) {
    state
        .args
        .details
        .set_processes(state.warm.iter().map(|runner| ProcessInfo {
            pid: runner.child.pid(),
            process_group: runner.child.pgid(),
        }));
}
