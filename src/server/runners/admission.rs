//! Admission: a queued run's claim, its runner's launch (the envelope, by hash) and a warm
//! process's start identity in one commit, then its `runner-N` child under `runners`.
//!
//! Two callers, one mechanism: the scheduler admits what waits in the queue
//! (`admit_queued`), and `run.start` admits its own new run inside its creation commit
//! (`LaunchRecord::record_if_first`) when capacity is free and no older run is admissible —
//! one commit and one scheduler round fewer per run. Both first reserve capacity
//! (`Runners::reserve`), so together they never exceed `PI_WORKFLOWS_MAX_WORKERS`.
//!
//! Architecture Invariant: a warm process gets its launch envelope only after the commit that
//! records its run's claim and epoch; an admission that was refused or never committed
//! records nothing, leaves the run queued and gives the warm process (which saw no launch)
//! back to the pool.

use std::sync::Arc;
use std::time::Duration;

use supervisors::{ChildSpec, Restart, Shutdown};

use super::mailbox::{LaunchHandOver, PoolMsg, WarmRunner};
use super::registry::{Runners, Slot};
use super::runner::{RUNNER_GRACE_MS, Runner};
use super::settle::abandon_launch;
use super::state::{RunnerArgs, runner_epoch_name};
use crate::digest::sha256_hex;
use crate::protocol::encode_frame;
use crate::protocol::runner::{LAUNCH_SCHEMA, Launch, RUNNER_PROTOCOL_VERSION};
use crate::server::blocking;
use crate::server::config::Program;
use crate::server::shared::{Shared, start_child};
use crate::store::claims::ClaimAuthority;
use crate::store::runs;
use crate::store::workers::{self, Admissible, NewWorker};
use crate::store::{StoreError, StoreResult, WriteTx};

/// How long a launch waits for the warm pool to hand over a runner.
const POOL_TAKE_TIMEOUT_MS: u64 = 1_000;

/// One admission under way: its reserved capacity, its runner's name and epoch, and the warm
/// process taken for it (none when the pool had none ready: the runner actor spawns one).
pub struct Admission {
    slot: Slot,
    warm: Option<WarmRunner>,
    record: LaunchRecord,
    /// The runner program and its arguments.
    program: Program,
}

/// What the admitting transaction records, apart from the run: `Send + 'static`, so it goes
/// into the writer's job while the warm process stays here.
#[derive(Clone)]
pub struct LaunchRecord {
    runner_epoch: String,
    /// This server, the claim's owner.
    owner: String,
    server_epoch: i64,
    /// The warm process's pid and start identity.
    identity: Option<(i32, String)>,
    load_deadline: Duration,
}

/// Reserve capacity and take a warm process for one admission; `None` when the server is
/// stopping, has no runner program, or every slot is taken.
pub async fn prepare(shared: &Shared, runners: &Arc<Runners>) -> Option<Admission> {
    let program = runners.settings.program.clone()?;
    if shared.stop_requested().is_some() {
        return None;
    }
    let slot = runners.reserve()?;
    let suffix = crate::digest::random_hex(8).unwrap_or_else(|| format!("n{}", runners.next_launch()));
    let warm = take_warm(runners).await;
    let record = LaunchRecord::new(
        runner_epoch_name(shared.epoch, &suffix),
        (&shared.server_id, shared.epoch),
        warm.as_ref()
            .map(|warm| (warm.child.pid(), warm.child.identity().to_string())),
        runners.settings.ready_timeout,
    );
    Some(Admission {
        slot,
        warm,
        record,
        program,
    })
}

impl LaunchRecord {
    /// The record of a launch of `runner_epoch` by the server `(id, epoch)`, of the warm
    /// process `identity` (pid, start identity) if there is one.
    pub fn new(
        runner_epoch: String,
        (server_id, server_epoch): (&str, i64),
        identity: Option<(i32, String)>,
        load_deadline: Duration,
    ) -> Self {
        Self {
            runner_epoch,
            owner: server_id.to_string(),
            server_epoch,
            identity,
            load_deadline,
        }
    }

    /// Admit `run` in `tx`: its claim (`running`), the runner's launch and, with a warm
    /// process, that process's identity. Returns the claim and the encoded envelope.
    pub fn record(&self, tx: &WriteTx<'_>, run: &Admissible) -> StoreResult<(ClaimAuthority, Vec<u8>)> {
        let authority = runs::start_run(tx, &run.run_id, &self.owner)?.value;
        let mut envelope = launch_envelope(run, &self.runner_epoch, self.load_deadline);
        envelope.generation = authority.generation as u64;
        let bytes = encode_frame(&envelope).map_err(|err| StoreError::InvalidInput {
            what: "launch envelope",
            detail: err.to_string(),
        })?;
        workers::record_launch(
            tx,
            &NewWorker {
                runner_epoch: self.runner_epoch.clone(),
                run_id: run.run_id.clone(),
                generation: authority.generation,
                server_epoch: self.server_epoch,
                launch_envelope_hash: sha256_hex(&bytes),
            },
        )?;
        if let Some((pid, identity)) = &self.identity {
            workers::record_process(tx, &self.runner_epoch, *pid, identity)?;
        }
        Ok((authority, bytes))
    }

    /// Admit `run_id` in `tx` when it is the oldest admissible run (a queue is served in
    /// order), in a savepoint of its own: whatever else `tx` holds — the run's creation —
    /// commits whether or not the admission does. `None` when it was not admitted (the
    /// scheduler then admits it in turn).
    pub fn record_if_first(&self, tx: &WriteTx<'_>, run_id: &str) -> Option<Admitted> {
        match tx.nested(|tx| self.record_first(tx, run_id)) {
            Ok(admitted) => admitted,
            Err(err) => {
                tracing::warn!(error = %err, "a new run was not admitted with its creation; the scheduler admits it");
                None
            }
        }
    }

    fn record_first(&self, tx: &WriteTx<'_>, run_id: &str) -> StoreResult<Option<Admitted>> {
        let first = workers::admissible_runs(tx.conn(), tx.now_ms(), 1)?;
        let Some(run) = first.into_iter().find(|run| run.run_id == run_id) else {
            return Ok(None);
        };
        let (authority, envelope) = self.record(tx, &run)?;
        Ok(Some(Admitted {
            run,
            authority,
            envelope,
        }))
    }
}

/// A run whose admission committed: what its runner actor is started with.
pub struct Admitted {
    pub run: Admissible,
    pub authority: ClaimAuthority,
    pub envelope: Vec<u8>,
}

impl Admission {
    /// What the admitting transaction records (moved into the writer's job).
    pub fn record(&self) -> LaunchRecord {
        self.record.clone()
    }

    /// The admission did not commit: the warm process goes back to the pool (dropped, which
    /// stops its group, when the pool is gone) and the slot comes free.
    pub fn give_back(self, runners: &Runners) {
        if let (Some(warm), Some(pool)) = (self.warm, runners.pool()) {
            let _ = pool.cast(PoolMsg::Return(Box::new(warm)));
        }
    }

    /// Start the committed admission's runner actor under `runners`; a launch that fails parks
    /// the run (`abandon_launch`). The slot is held until the actor counts as live.
    pub async fn launch(self, shared: &Arc<Shared>, runners: &Arc<Runners>, admitted: Admitted) {
        let Admission {
            slot,
            warm,
            record,
            program,
        } = self;
        let details = supervisors::DetailsCell::default();
        let args = RunnerArgs {
            shared: Arc::clone(shared),
            runners: Arc::clone(runners),
            run: admitted.run,
            authority: admitted.authority.clone(),
            launch: LaunchHandOver::new(admitted.envelope, warm),
            runner_epoch: record.runner_epoch.clone(),
            program,
            details: details.clone(),
        };
        // Numbered only now: a refused admission leaves no gap in the children's names.
        let number = runners.next_launch();
        let shutdown = supervisors::process_shutdown_wait(Duration::from_millis(RUNNER_GRACE_MS));
        let spec = ChildSpec::worker(format!("runner-{number}"), Restart::Temporary, move || {
            (Runner, args.clone())
        })
        .with_details(details)
        .with_shutdown(Shutdown::Timeout(shutdown));
        let started = match runners.supervisor(shared).await {
            Some(supervisor) => start_child(&supervisor, spec).await,
            None => Err("the runners supervisor is not running".to_string()),
        };
        if let Err(why) = started {
            tracing::warn!(run_id = %admitted.authority.resource_id, error = %why, "runner launch failed; parking the run");
            abandon_launch(&shared.store, admitted.authority, record.runner_epoch).await;
        }
        drop(slot);
    }
}

/// The scheduler's admission of a queued `run`: the record in a commit of its own, without
/// an `fsync` (process facts: in the kernel before any process acts, so a crash of the server
/// still finds the epoch), then the launch. Refused, nothing is recorded and the run stays
/// queued.
pub async fn admit_queued(shared: &Arc<Shared>, runners: &Arc<Runners>, run: Admissible, admission: Admission) {
    let record = admission.record();
    let written = blocking::write_without_fsync(&shared.store, move |tx| {
        let (authority, envelope) = record.record(tx, &run)?;
        Ok(Admitted {
            run,
            authority,
            envelope,
        })
    })
    .await;
    match written {
        Ok(admitted) => admission.launch(shared, runners, admitted).await,
        Err(err) => {
            tracing::warn!(error = %err, "could not admit a run");
            admission.give_back(runners);
        }
    }
}

/// A warm runner from the pool, not yet assigned; None when the pool has none ready.
async fn take_warm(runners: &Runners) -> Option<WarmRunner> {
    let pool = runners.pool()?;
    let timeout = Some(Duration::from_millis(POOL_TAKE_TIMEOUT_MS));
    match pool.call(PoolMsg::Take, timeout).await {
        Ok(ractor::rpc::CallResult::Success(warm)) => warm,
        _ => None,
    }
}

/// The launch envelope of `run` for `runner_epoch`; its generation is the claim's, set by the
/// admission that records it.
fn launch_envelope(run: &Admissible, runner_epoch: &str, load_deadline: Duration) -> Launch {
    Launch {
        schema: LAUNCH_SCHEMA.to_string(),
        run_id: run.run_id.clone(),
        generation: 0,
        runner_epoch: runner_epoch.to_string(),
        project_path: run.project_path.clone(),
        // Stored canonical by the run's creator; an unreadable value sends `{}` (no file source).
        workflow_source: serde_json::from_str(&run.workflow_source_json)
            .unwrap_or(serde_json::Value::Object(serde_json::Map::new())),
        definition_digest: run.definition_digest.clone(),
        input_hash: run.input_hash.clone(),
        protocol_version: RUNNER_PROTOCOL_VERSION,
        load_deadline_ms: u64::try_from(load_deadline.as_millis()).unwrap_or(u64::MAX),
    }
}
