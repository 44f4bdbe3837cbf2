//! What one runner actor knows: its launch arguments, its fence, its process and channel,
//! and the facts its messages established (ready, finished, claim lost, …). The actor, its
//! message handling and its settlement share it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ractor::ActorRef;
use supervisors::{Fence, ProcessEnd, ProcessMsg, Refused, Stamp};
use tokio::task::AbortHandle;

use super::mailbox::LaunchHandOver;
use super::registry::Runners;
use crate::protocol::runner::Fencing;
use crate::server::shared::Shared;
use crate::server::socket;
use crate::store::claims::ClaimAuthority;
use crate::store::workers::Admissible;

#[derive(Clone)]
pub struct RunnerArgs {
    pub shared: Arc<Shared>,
    pub runners: Arc<Runners>,
    pub run: Admissible,
    pub authority: ClaimAuthority,
    /// The envelope recorded at admission, and the warm process taken for the run.
    pub launch: LaunchHandOver,
    pub runner_epoch: String,
    /// The runner program and its arguments.
    pub program: (PathBuf, Vec<std::ffi::OsString>),
    /// Where the runner shows its generation and process in the tree.
    pub details: supervisors::DetailsCell,
}

pub struct RunnerState {
    pub args: RunnerArgs,
    pub fence: RunnerFence,
    /// The actor that owns the runner process.
    pub process: ActorRef<ProcessMsg>,
    pub pid: i32,
    /// How the process ended, written by its actor before that actor stops.
    pub end_slot: Arc<Mutex<Option<ProcessEnd>>>,
    /// The environment entry the runner's descendants carry (`spawn::child_mark`).
    pub mark: String,
    /// The process ended and this runner's outcome is recorded: nothing more to settle.
    pub settled: bool,
    /// The channel reader saw the end of the channel after handing over every frame.
    pub channel_closed: bool,
    /// The process ended (how, if its actor knew) while frames it sent before its exit may
    /// still be on their way: settled once the channel is drained (or `CHANNEL_DRAIN_MS`).
    pub ended_undrained: Option<Option<supervisors::process::ExitOutcome>>,
    pub writer: socket::WriteHalf,
    /// When the runner answered ready (store clock); `None` before.
    pub ready_at_ms: Option<i64>,
    /// The revision the ready answer named: the one recording it leads to.
    pub revision_at_ready: Option<i64>,
    /// The ready is recorded: by the runner's first committed proposal, alone after
    /// `messages::READY_RECORD_WAIT_MS` without one, or by `settle` if the runner ended first.
    pub ready_recorded: bool,
    /// The store refused our claim: another owner has the run; leave it alone.
    pub claim_lost: bool,
    /// The runner sent a stale or foreign stamp and was told `claimLost`.
    pub runner_stale: bool,
    /// Missed its ready deadline (recorded `timedOut`).
    pub timed_out: bool,
    /// Stopped by the server for not answering pings past the stall bound (`liveness.rs`):
    /// recorded `timedOut`, its claim given up for the reclaimer, never renewed again.
    pub stalled: bool,
    /// Stopped by the server for using more memory than its bound.
    pub out_of_memory: bool,
    /// A proposal of this runner could not be stored because the disk is full: it is
    /// stopped after that answer and its run left to the reclaimer (a disk error is not the
    /// workflow's fault, so the run resumes from its last durable boundary, unreviewed).
    pub disk_full: bool,
    /// The runner process's resident-memory bound (`memory.rs`); `None`: none.
    pub memory_bytes_max: Option<u64>,
    pub finished: bool,
    /// Content offered to this runner (a run state above the frame limit): the only
    /// content `content.read` may return.
    pub advertised: Vec<crate::store::blobs::BlobRef>,
    /// The newest settings version this runner knows (from its run state, its start fields
    /// and answers); an answer carries a newer one. `None`: the run declares no settings.
    pub settings_known: Option<i64>,
    pub tasks: Vec<AbortHandle>,
    pub liveness: Liveness,
    /// Held while this runner lives: dropping it frees the runner's slot (`Runners::register`).
    pub _registration: super::registry::Registration,
}

impl RunnerState {
    /// The runner answered ready (its later messages may change the run).
    pub fn ready(&self) -> bool {
        self.ready_at_ms.is_some()
    }
}

/// What the actor keeps about its liveness pings (`liveness.rs`).
#[derive(Debug)]
pub struct Liveness {
    /// The ping in flight, if any.
    pub outstanding: Option<u64>,
    pub next: u64,
    /// When the runner last showed it is alive (ready, or a pong).
    pub last_seen: Instant,
    /// Recorded as unresponsive.
    pub unresponsive: bool,
    /// When the ping timer last ran (a late timer means this server did not run).
    pub last_tick: Instant,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            outstanding: None,
            next: 0,
            last_seen: Instant::now(),
            unresponsive: false,
            last_tick: Instant::now(),
        }
    }
}

/// The one stamp this runner was issued: the server epoch and the run's claim generation
/// (checked by the supervision crate's `Fence`), for exactly the run and runner epoch it
/// was launched with.
pub struct RunnerFence {
    fence: Fence,
    run_id: String,
    runner_epoch: String,
}

impl RunnerFence {
    pub fn new(server_epoch: i64, run_id: &str, generation: i64, runner_epoch: &str) -> Self {
        let stamp = Stamp {
            epoch: server_epoch as u64,
            generation: generation as u64,
        };
        Self {
            fence: Fence::issued(stamp),
            run_id: run_id.to_string(),
            runner_epoch: runner_epoch.to_string(),
        }
    }

    /// Admit a message's fencing fields before its payload is read.
    pub fn admit(&self, fencing: &Fencing) -> Result<(), Refused> {
        let never_issued = |epoch| Refused::NeverIssued {
            got: Stamp {
                epoch,
                generation: fencing.generation,
            },
            current: self.fence.current(),
        };
        let epoch = server_epoch_of(&fencing.runner_epoch).ok_or_else(|| never_issued(0))?;
        self.fence.admit(Stamp {
            epoch,
            generation: fencing.generation,
        })?;
        if fencing.run_id != self.run_id || fencing.runner_epoch != self.runner_epoch {
            return Err(never_issued(epoch));
        }
        Ok(())
    }
}

/// A runner epoch names its server epoch: `e<server epoch>-<unique suffix>`.
pub fn runner_epoch_name(server_epoch: i64, suffix: &str) -> String {
    format!("e{server_epoch}-{suffix}")
}

fn server_epoch_of(runner_epoch: &str) -> Option<u64> {
    let (epoch, suffix) = runner_epoch.strip_prefix('e')?.split_once('-')?;
    (!suffix.is_empty()).then_some(())?;
    epoch.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fencing(run_id: &str, generation: u64, runner_epoch: &str) -> Fencing {
        Fencing {
            run_id: run_id.into(),
            generation,
            runner_epoch: runner_epoch.into(),
            message_id: "m1".into(),
        }
    }

    #[test]
    fn only_the_issued_stamp_of_this_run_and_epoch_is_admitted() {
        let fence = RunnerFence::new(3, "run-1", 2, &runner_epoch_name(3, "ab12"));
        assert_eq!(fence.admit(&fencing("run-1", 2, "e3-ab12")), Ok(()));
        assert!(matches!(
            fence.admit(&fencing("run-1", 1, "e3-ab12")),
            Err(Refused::StaleGeneration { got: 1, current: 2 })
        ));
        assert!(matches!(
            fence.admit(&fencing("run-1", 2, "e2-ab12")),
            Err(Refused::StaleEpoch { got: 2, current: 3 })
        ));
        for (run_id, generation, epoch) in [
            ("run-1", 3, "e3-ab12"),
            ("run-2", 2, "e3-ab12"),
            ("run-1", 2, "e3-other"),
            ("run-1", 2, "garbage"),
            ("run-1", 2, "e3-"),
        ] {
            assert!(
                matches!(
                    fence.admit(&fencing(run_id, generation, epoch)),
                    Err(Refused::NeverIssued { .. })
                ),
                "{run_id} {generation} {epoch}"
            );
        }
    }
}
