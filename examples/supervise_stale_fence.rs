//! Fencing by epoch and generation: an owner actor holds a `Fence` and admits only messages
//! stamped with the generation it issued last, in its current epoch. Workers carry the stamp
//! they were started with; a replaced worker (older generation) and a worker from before the
//! owner's restart (older epoch) are refused and exit.
//!
//! Run: `cargo run --example supervise_stale_fence`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use supervisors::{
    ChildSpec, Fence, Refused, Report, Restart, Stamp, Strategy, Supervisor, SupervisorMsg, SupervisorSpec,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);
static T0: OnceLock<Instant> = OnceLock::new();
type Verdict = Result<(), Refused>;

/// Elapsed milliseconds since the start of `main`.
fn ms() -> u128 {
    T0.get_or_init(Instant::now).elapsed().as_millis()
}

/// Holds the fence. Each start is a new epoch (like a server restart).
struct Owner;

enum OwnerMsg {
    Issue(RpcReplyPort<Stamp>),
    Deliver(String, Stamp, String, RpcReplyPort<Verdict>),
    Crash,
}

impl Actor for Owner {
    type Msg = OwnerMsg;
    type State = Fence;
    type Arguments = Arc<AtomicU64>;

    async fn pre_start(&self, _: ActorRef<OwnerMsg>, epochs: Arc<AtomicU64>) -> Result<Fence, ActorProcessingErr> {
        Ok(Fence::new(epochs.fetch_add(1, Ordering::SeqCst) + 1))
    }

    async fn handle(&self, _: ActorRef<OwnerMsg>, msg: OwnerMsg, fence: &mut Fence) -> Result<(), ActorProcessingErr> {
        match msg {
            OwnerMsg::Issue(reply) => drop(reply.send(fence.next_generation())),
            OwnerMsg::Deliver(from, stamp, payload, reply) => {
                let verdict = fence.admit(stamp);
                match &verdict {
                    Ok(()) => println!("[{:>5} ms] owner: ADMITTED {payload:?} from {from} {stamp:?}", ms()),
                    Err(refused) => println!("[{:>5} ms] owner: REFUSED  {payload:?} from {from}: {refused}", ms()),
                }
                let _ = reply.send(verdict);
            }
            OwnerMsg::Crash => return Err("owner crashed (simulated server restart)".into()),
        }
        Ok(())
    }
}

/// Sends payloads to whoever is the owner now, stamped with the stamp it was started with.
struct Worker;

enum WorkerMsg {
    Send(String, RpcReplyPort<Verdict>),
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = (String, Stamp, ActorRef<SupervisorMsg>);
    type Arguments = (String, Stamp, ActorRef<SupervisorMsg>);

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        me: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerMsg::Send(payload, reply) = msg;
        let (name, stamp, root) = state.clone();
        let verdict = call(&owner_of(&root).await?, |p| OwnerMsg::Deliver(name, stamp, payload, p)).await?;
        let _ = reply.send(verdict);
        if verdict.is_err() {
            me.stop(Some("fenced".into())); // told once, then it exits
        }
        Ok(())
    }
}

async fn call<T, M>(actor: &ActorRef<M>, msg: impl FnOnce(RpcReplyPort<T>) -> M) -> anyhow::Result<T>
where
    M: ractor::Message,
    T: Send + 'static,
{
    match actor.call(msg, Some(WAIT)).await? {
        CallResult::Success(value) => Ok(value),
        _ => bail!("call timed out"),
    }
}

/// Whoever is the owner now (it changes when the owner is restarted).
async fn owner_of(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<ActorRef<OwnerMsg>> {
    let cell = call(root, |p| SupervisorMsg::Child("owner".into(), p)).await?;
    Ok(cell.context("no owner")?.into())
}

async fn tree(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<String> {
    Ok(call(root, SupervisorMsg::Snapshot).await?.render())
}

async fn start_worker(root: &ActorRef<SupervisorMsg>, name: &str, stamp: Stamp) -> anyhow::Result<()> {
    let args = (name.to_string(), stamp, root.clone());
    let spec = ChildSpec::worker(name, Restart::Temporary, move || (Worker, args.clone()))
        .with_label(format!("epoch {}, generation {}", stamp.epoch, stamp.generation));
    call(root, |p| SupervisorMsg::StartChild(spec, p))
        .await?
        .map_err(anyhow::Error::from)
}

async fn send(root: &ActorRef<SupervisorMsg>, name: &str, payload: &str) -> anyhow::Result<Verdict> {
    let cell = call(root, |p| SupervisorMsg::Child(name.into(), p))
        .await?
        .context("worker not running")?;
    println!("[{:>5} ms] {name} sends {payload:?}", ms());
    call(&ActorRef::<WorkerMsg>::from(cell), |p| {
        WorkerMsg::Send(payload.into(), p)
    })
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ms();
    let (tx, mut reports) = mpsc::channel::<Report>(256);
    // Print every report as it arrives; forward the owner's restarts.
    let (restarted_tx, mut restarted) = mpsc::channel(16);
    let printer = tokio::spawn(async move {
        while let Some(report) = reports.recv().await {
            println!("[{:>5} ms] {report:?}", ms());
            if matches!(&report, Report::Restarted { child, .. } if child == "owner") {
                let _ = restarted_tx.send(()).await;
            }
        }
    });
    let epochs = Arc::new(AtomicU64::new(6)); // the first owner runs in epoch 7
    let owner_epochs = Arc::clone(&epochs);
    let owner_spec = ChildSpec::worker("owner", Restart::Permanent, move || (Owner, Arc::clone(&owner_epochs)));
    let spec = SupervisorSpec::new("fenced", Strategy::OneForOne)
        .with_child(owner_spec)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;
    println!("tree at start:\n{}", tree(&root).await?);

    let first = call(&owner_of(&root).await?, OwnerMsg::Issue).await?;
    start_worker(&root, "worker-a", first).await?;
    let second = call(&owner_of(&root).await?, OwnerMsg::Issue).await?;
    start_worker(&root, "worker-b", second).await?; // replaces worker-a's generation
    println!("tree with two generations:\n{}", tree(&root).await?);
    let a_stale = send(&root, "worker-a", "result from generation 1").await?;
    let b_current = send(&root, "worker-b", "result from generation 2").await?;

    owner_of(&root).await?.cast(OwnerMsg::Crash)?;
    tokio::time::timeout(WAIT, restarted.recv())
        .await
        .context("no restart")?
        .context("closed")?;
    let third = call(&owner_of(&root).await?, OwnerMsg::Issue).await?;
    start_worker(&root, "worker-c", third).await?;
    let b_stale = send(&root, "worker-b", "late result from the old epoch").await?;
    let c_current = send(&root, "worker-c", "result from the new epoch").await?;
    // Let the refused worker's exit reach the supervisor before the snapshot.
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!("tree after (fenced workers exited):\n{}", tree(&root).await?);
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;
    printer.await?;

    let expected = [
        matches!(a_stale, Err(Refused::StaleGeneration { got: 1, current: 2 })),
        b_current.is_ok(),
        matches!(b_stale, Err(Refused::StaleEpoch { got: 7, current: 8 })),
        c_current.is_ok(),
    ];
    if expected.contains(&false) {
        bail!("unexpected verdicts: {a_stale:?} {b_current:?} {b_stale:?} {c_current:?}");
    }
    println!(
        "RESULT: ok — the owner admitted only the current stamp: generation 1 refused as StaleGeneration \
         after generation 2 was issued, epoch 7 refused as StaleEpoch after the owner restarted in epoch 8"
    );
    Ok(())
}
