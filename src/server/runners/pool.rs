//! The warm runner pool (a permanent worker under `runners`): runner processes started ahead
//! of need, each waiting (on its fd 3 channel) for a launch envelope, so a run's first node
//! does not wait for a Node start-up.
//!
//! The pool follows demand. Idle, it keeps `PI_WORKFLOWS_WARM_RUNNERS` (default 1). While runs
//! arrive (a take within the last `PI_WORKFLOWS_WARM_DEMAND_MS`, default 5 s), its target grows
//! to the runner capacity (at most `WARM_RUNNERS_MAX`); that long after the last take it shrinks
//! back, by a single timer (an idle pool sets no timer and never wakes up).
//!
//! It refills when a runner ends, never when a warm runner is taken: a Node start-up takes a
//! core for ~20–60 ms, and on a small machine one started beside a run that had just begun
//! slowed that run measurably (per-node overhead 0.4 → 1.0 ms on 2 cores). A runner's end is
//! the moment its core comes free. While runs arrive, at most `REFILL_BURST_MAX` start per
//! refill, so demand cannot start a crowd of processes at once beside running work.
//!
//! A warm runner rehearses its run's path while it waits (the runner's warm-up: ~8 ms of CPU
//! that saves its run ~4 ms of compiling), except one started while runs are running: on a
//! small machine that CPU would be taken from them, and the run it serves next pays the
//! compiling instead (`NO_WARM_UP_FLAG`; measured: 4 clients' runner CPU per run -3 ms,
//! an idle server's first node unchanged).
//!
//! Warm Node runners start from the runners' startup snapshot once it is built and checked
//! (`snapshot.rs`; the pool starts its build in the background when the pool starts), about a
//! fifth less CPU per runner; until then, and for good once a build fails or a snapshot runner
//! exits unused, they start the plain way.
//!
//! A run takes the newest warm runner that has settled (is at least `WARM_SETTLED_MS` old:
//! done with its start-up and rehearsal), else the oldest, the likeliest to be nearly done (a
//! runner still booting when taken is used as is: its start-up is already under way). Newest
//! because on a virtual machine memory a process has not touched for a few seconds comes back
//! slowly (measured here, not explained: the host seems slow to give a guest its idle memory
//! back; docs/PERFORMANCE.md, thirty-sixth round): with runs arriving 0.6 s apart and four
//! warm runners, the oldest had waited 2.5 s and, in a slow hour, spent 19.7–24.4 ms of CPU
//! on its run, where one that had waited 0.6 s spent 17.1–19.1 ms (docs/PERFORMANCE.md,
//! thirty-eighth round). For the same reason a shrink retires the oldest.
//!
//! A restarted pool starts empty and refills; the processes of the pool that failed were
//! killed and reaped when their `ProcessChild`ren were dropped.
//!
//! Architecture Invariant: a warm runner holds nothing: no claim, no runner epoch, no
//! workflow code. It becomes a run's runner only after that run's admission and epoch are
//! recorded; if the server dies first, the channel closes and the warm runner exits on its
//! own (end of file before any launch). The pool owns its processes until it hands one over;
//! then the runner actor that took it owns it, or hands it back unused when its run was not
//! admitted.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{DetailsCell, ProcessInfo};

use super::mailbox::{PoolMsg, WarmRunner};
use super::registry::Runners;
use super::snapshot::{self, SnapshotSource};
use crate::server::config::{Program, WARM_RUNNERS_MAX};
use crate::server::shared::Shared;
use crate::server::spawn::spawn_runner_with_channel;

/// How long the pool waits for a warm runner to stop on a graceful stop.
const WARM_STOP_GRACE_MS: u64 = 500;
/// Warm runners one refill starts at most.
const REFILL_BURST_MAX: usize = 2;
/// A warm runner this old has finished its start-up and its rehearsal and waits only for a
/// launch (both take 50–80 ms of wall on an unloaded 2-core machine in a slow hour; a loaded
/// one takes its runners young, and then the oldest).
const WARM_SETTLED_MS: u64 = 250;
/// Tells the Node runner not to rehearse while it waits (packages/pi-workflows/src/runner/main.ts).
pub const NO_WARM_UP_FLAG: &str = "--no-warm-up";

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
    /// Oldest first (by `WarmRunner::started`).
    warm: VecDeque<WarmRunner>,
    last_take: Option<Instant>,
    /// How warm runners start now (`start_program`).
    snapshot: SnapshotUse,
}

/// Whether warm runners start from the startup snapshot (`runners/snapshot.rs`).
enum SnapshotUse {
    /// No snapshot: a custom runner, `PI_WORKFLOWS_RUNNER_SNAPSHOT=off`, a package built
    /// without one, or one that failed.
    Plain,
    /// Being built and checked in the background; runners start the plain way meanwhile.
    /// Aborting the task stops the build (its `ProcessChild` kills its group when dropped).
    Building(tokio::task::JoinHandle<()>),
    /// Warm runners start with this program, from this snapshot file.
    Using { program: Program, blob: PathBuf },
}

impl Actor for Pool {
    type Msg = PoolMsg;
    type State = PoolState;
    type Arguments = PoolArgs;

    async fn pre_start(&self, myself: ActorRef<PoolMsg>, args: PoolArgs) -> Result<PoolState, ActorProcessingErr> {
        args.runners.set_pool(Some(myself.clone()));
        args.details.set_processes([]);
        let _ = myself.cast(PoolMsg::Refill);
        let mut state = PoolState {
            args,
            warm: VecDeque::new(),
            last_take: None,
            snapshot: SnapshotUse::Plain,
        };
        start_from_snapshot(&mut state, &myself);
        Ok(state)
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
        if let SnapshotUse::Building(task) = &state.snapshot {
            task.abort();
        }
        for mut runner in state.warm.drain(..) {
            let _ = runner.child.terminate(Duration::from_millis(WARM_STOP_GRACE_MS)).await;
        }
        state.args.details.set_processes([]);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<PoolMsg>,
        message: PoolMsg,
        state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PoolMsg::Take(reply) => {
                let first_of_a_burst = !arriving(state);
                state.last_take = Some(Instant::now());
                if first_of_a_burst {
                    // One timer per burst of demand; `Shrink` looks again if takes went on.
                    myself.send_after(demand_window(state), || PoolMsg::Shrink);
                }
                let taken = take(state);
                show(state);
                let _ = reply.send(taken);
            }
            PoolMsg::Refill => {
                refill(state);
                show(state);
            }
            PoolMsg::Return(runner) => {
                if !state.args.stopping() {
                    put_back(state, *runner);
                    show(state);
                }
            }
            PoolMsg::SnapshotBuilt(built) => {
                snapshot_built(state, built);
                show(state);
            }
            PoolMsg::Shrink => {
                if let Some(last) = state.last_take.filter(|_| arriving(state)) {
                    let left = demand_window(state).saturating_sub(last.elapsed());
                    myself.send_after(left, || PoolMsg::Shrink);
                } else {
                    shrink(state);
                    show(state);
                }
            }
        }
        Ok(())
    }
}

fn demand_window(state: &PoolState) -> Duration {
    state.args.runners.settings.warm_demand_window
}

/// Runs are arriving: a take within the demand window.
fn arriving(state: &PoolState) -> bool {
    state.last_take.is_some_and(|at| at.elapsed() < demand_window(state))
}

/// How many warm runners to keep now: the idle number, or the capacity while runs arrive.
/// A pool configured empty stays empty.
fn target(state: &PoolState) -> usize {
    let settings = &state.args.runners.settings;
    let idle = settings.warm_runners.min(WARM_RUNNERS_MAX);
    if idle == 0 || !arriving(state) {
        return idle;
    }
    settings.max_workers.clamp(idle, WARM_RUNNERS_MAX)
}

/// The live warm runner to take (`pick`); one that exited on its own (e.g. a broken
/// installation) is dropped.
fn take(state: &mut PoolState) -> Option<WarmRunner> {
    loop {
        let now = Instant::now();
        let index = pick(
            state
                .warm
                .iter()
                .map(|runner| now.saturating_duration_since(runner.started)),
        )?;
        let mut runner = state.warm.remove(index)?;
        if matches!(runner.child.try_exit(), Ok(None)) {
            return Some(runner);
        }
        exited_unused(state);
    }
}

/// Which warm runner a run takes, given their ages oldest first: the newest that has settled
/// (`WARM_SETTLED_MS`), else the oldest; `None` when there is none.
fn pick(mut ages_oldest_first: impl DoubleEndedIterator<Item = Duration> + ExactSizeIterator) -> Option<usize> {
    if ages_oldest_first.len() == 0 {
        return None;
    }
    let settled = Duration::from_millis(WARM_SETTLED_MS);
    Some(ages_oldest_first.rposition(|age| age >= settled).unwrap_or(0))
}

/// A runner taken but not used goes back to its place by age (the pool stays oldest first).
fn put_back(state: &mut PoolState, runner: WarmRunner) {
    let at = state.warm.partition_point(|other| other.started <= runner.started);
    state.warm.insert(at, runner);
    debug_assert!(
        state
            .warm
            .iter()
            .zip(state.warm.iter().skip(1))
            .all(|(a, b)| a.started <= b.started)
    );
}

/// A warm runner exited before any launch: if runners start from the snapshot, the rest of
/// this server's runners start the plain way, and the snapshot is removed so the next server
/// builds and checks a new one (a snapshot that passed its check should not fail: e.g. a
/// `PI_WORKFLOWS_NODE` wrapper now runs another Node, which refuses it).
fn exited_unused(state: &mut PoolState) {
    if let SnapshotUse::Using { blob, .. } = &state.snapshot {
        tracing::warn!(
            "a warm runner started from the startup snapshot exited unused; runners start without it from now on"
        );
        let _ = std::fs::remove_file(blob);
        state.snapshot = SnapshotUse::Plain;
    }
}

/// Start runners from the snapshot of this Node and package if it is built, else build it
/// in the background (`snapshot_built` switches once it passed its check).
fn start_from_snapshot(state: &mut PoolState, myself: &ActorRef<PoolMsg>) {
    let settings = &state.args.runners.settings;
    let Some(source) = settings
        .program
        .as_ref()
        .filter(|_| settings.runner_snapshot && settings.warm_runners > 0)
        .and_then(SnapshotSource::of_runner)
    else {
        return;
    };
    match source.find(&settings.cache_dir) {
        Ok(Some(stored)) => {
            state.snapshot = SnapshotUse::Using {
                program: source.runner_program(&stored),
                blob: stored.blob,
            };
            return;
        }
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(error = %err, "no runner startup snapshot; runners start without it");
            return;
        }
    }
    let settings = settings.clone();
    let pool = myself.clone();
    state.snapshot = SnapshotUse::Building(tokio::spawn(async move {
        let built = snapshot::build(&settings, &source, &settings.cache_dir).await;
        let _ = pool.cast(PoolMsg::SnapshotBuilt(
            built
                .map(|built| (source.runner_program(&built), built.blob))
                .map_err(|err| err.to_string()),
        ));
    }));
}

/// The background build ended: warm runners started from now on use the snapshot, or, if it
/// failed, never do in this server's life (the next server builds again).
fn snapshot_built(state: &mut PoolState, built: Result<(Program, PathBuf), String>) {
    if !matches!(state.snapshot, SnapshotUse::Building(_)) {
        return;
    }
    match built {
        Ok((program, blob)) => {
            tracing::info!("runner startup snapshot built and checked; warm runners start from it");
            state.snapshot = SnapshotUse::Using { program, blob };
        }
        Err(error) => {
            tracing::warn!(%error, "no runner startup snapshot; runners start without it");
            state.snapshot = SnapshotUse::Plain;
        }
    }
}

/// Start warm runners toward the target (at most `REFILL_BURST_MAX` at once while runs arrive).
fn refill(state: &mut PoolState) {
    if state.args.stopping() {
        return;
    }
    let before = state.warm.len();
    state
        .warm
        .retain_mut(|runner| matches!(runner.child.try_exit(), Ok(None)));
    if state.warm.len() < before {
        exited_unused(state);
    }
    let Some(program) = start_program(state) else {
        return;
    };
    let mut wanted = target(state).saturating_sub(state.warm.len());
    if arriving(state) {
        // Runs are running beside these start-ups: a few at a time.
        wanted = wanted.min(REFILL_BURST_MAX);
    }
    let program = runner_program(state, program);
    for _ in 0..wanted {
        match start_one(state, &program) {
            Ok(runner) => state.warm.push_back(runner),
            Err(err) => {
                tracing::warn!(error = %err, "could not start a warm runner; runners start on demand");
                return;
            }
        }
    }
}

/// Back to the idle target: the oldest go first (their memory is the coldest, see the module's
/// notes). A warm runner holds nothing, so dropping it (SIGKILL of its group, reaped) loses
/// nothing.
fn shrink(state: &mut PoolState) {
    let keep = target(state);
    while state.warm.len() > keep {
        drop(state.warm.pop_front());
    }
}

/// How warm runners start now: from the snapshot, else the configured program.
fn start_program(state: &PoolState) -> Option<Program> {
    match &state.snapshot {
        SnapshotUse::Using { program, .. } => Some(program.clone()),
        SnapshotUse::Plain | SnapshotUse::Building(_) => state.args.runners.settings.program.clone(),
    }
}

/// The pool's runner program: the Node runner started beside running runs skips its warm-up.
fn runner_program(state: &PoolState, mut program: Program) -> Program {
    let runners = &state.args.runners;
    if !runners.settings.custom_runner && runners.live() > 0 {
        program.1.push(NO_WARM_UP_FLAG.into());
    }
    program
}

fn start_one(state: &PoolState, program: &Program) -> anyhow::Result<WarmRunner> {
    // Numbered from the registry's counter, so a restarted pool never reuses a capture name.
    let log_stem = format!("warm-e{}-{}", state.args.shared.epoch, state.args.runners.next_launch());
    let (child, channel) = spawn_runner_with_channel(&state.args.runners.settings, program, &log_stem, None)?;
    Ok(WarmRunner {
        child,
        channel,
        log_stem,
        started: Instant::now(),
    })
}

/// The tree shows the processes the pool owns right now, and how it starts them.
fn show(state: &PoolState) {
    let mode = match state.snapshot {
        SnapshotUse::Plain => "plain",
        SnapshotUse::Building(_) => "building snapshot",
        SnapshotUse::Using { .. } => "snapshot",
    };
    state.args.details.update(|details| {
        details.mode = Some(mode.to_string());
        details.processes = state
            .warm
            .iter()
            .map(|runner| ProcessInfo {
                pid: runner.child.pid(),
                process_group: runner.child.pgid(),
            })
            .collect();
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{NO_WARM_UP_FLAG, WARM_SETTLED_MS, pick};

    fn ages(ms: &[u64]) -> impl DoubleEndedIterator<Item = Duration> + ExactSizeIterator + '_ {
        ms.iter().map(|ms| Duration::from_millis(*ms))
    }

    /// A run takes the newest runner that has settled: its memory is the warmest.
    #[test]
    fn a_run_takes_the_newest_settled_warm_runner() {
        let settled = WARM_SETTLED_MS;
        assert_eq!(pick(ages(&[2_500, 1_900, 1_300, 700])), Some(3));
        assert_eq!(
            pick(ages(&[2_500, settled, settled - 1, 5])),
            Some(1),
            "exactly settled counts"
        );
        assert_eq!(pick(ages(&[settled])), Some(0));
    }

    /// None settled: the oldest, the likeliest to be nearly done starting; none at all: nothing.
    #[test]
    fn with_none_settled_a_run_takes_the_oldest() {
        assert_eq!(pick(ages(&[WARM_SETTLED_MS - 1, 40, 3])), Some(0));
        assert_eq!(pick(ages(&[0])), Some(0));
        assert_eq!(pick(ages(&[])), None);
    }

    /// The flag is the server's word to the Node runner (both of its entries read it through
    /// runner/main.ts): both sides must spell it alike.
    #[test]
    fn the_node_runner_entry_reads_the_no_warm_up_flag() {
        let entry = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packages/pi-workflows/src/runner/main.ts");
        let source = std::fs::read_to_string(&entry).expect("the runner entry's source");
        assert!(
            source.contains(&format!("\"{NO_WARM_UP_FLAG}\""))
                && source.contains("process.argv.includes(NO_WARM_UP_FLAG)"),
            "runner/main.ts must read {NO_WARM_UP_FLAG} from its arguments"
        );
    }
}
