//! A worker that fails on a timer is restarted one_for_one until its supervisor's restart
//! intensity (3 in 10 s) is exceeded; the supervisor then escalates to its parent, which
//! restarts the whole subtree.
//!
//! Run: `cargo run --example supervise_restart_intensity`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{ChildSpec, Report, Restart, Strategy, Supervisor, SupervisorMsg, SupervisorSpec, TreeSnapshot};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);
/// The worker fails on its first starts only, so the restarted subtree stays up.
const FAILING_STARTS: u32 = 4;
const FAIL_AFTER: Duration = Duration::from_millis(300);

/// Fails `FAIL_AFTER` after starting, for its first `FAILING_STARTS` starts.
struct Flaky;

enum FlakyMsg {
    Fail,
}

impl Actor for Flaky {
    type Msg = FlakyMsg;
    type State = u32;
    type Arguments = Arc<AtomicU32>;

    async fn pre_start(&self, myself: ActorRef<FlakyMsg>, starts: Arc<AtomicU32>) -> Result<u32, ActorProcessingErr> {
        let start = starts.fetch_add(1, Ordering::SeqCst) + 1;
        if start <= FAILING_STARTS {
            myself.send_after(FAIL_AFTER, || FlakyMsg::Fail);
        }
        Ok(start)
    }

    async fn handle(&self, _: ActorRef<FlakyMsg>, msg: FlakyMsg, start: &mut u32) -> Result<(), ActorProcessingErr> {
        match msg {
            FlakyMsg::Fail => Err(format!("start #{start} failed on its timer").into()),
        }
    }
}

/// Never fails; shows that the parent restarts the whole subtree.
struct Steady;

impl Actor for Steady {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

async fn snapshot(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<TreeSnapshot> {
    match root.call(SupervisorMsg::Snapshot, Some(WAIT)).await? {
        ractor::rpc::CallResult::Success(tree) => Ok(tree),
        _ => bail!("snapshot timed out"),
    }
}

/// Prints reports as they arrive until `done` accepts one.
async fn until(
    rx: &mut mpsc::Receiver<Report>,
    t0: Instant,
    seen: &mut Vec<Report>,
    done: impl Fn(&Report) -> bool,
) -> anyhow::Result<()> {
    loop {
        let report = tokio::time::timeout(WAIT, rx.recv())
            .await
            .context("no report in time")?
            .context("closed")?;
        println!("[{:>5} ms] {report:?}", t0.elapsed().as_millis());
        let stop = done(&report);
        seen.push(report);
        if stop {
            return Ok(());
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let (tx, mut rx) = mpsc::channel(256);
    let starts = Arc::new(AtomicU32::new(0));
    let (inner_tx, flaky_starts) = (tx.clone(), Arc::clone(&starts));
    let workers = ChildSpec::supervisor("workers", Restart::Permanent, move || {
        let starts = Arc::clone(&flaky_starts);
        SupervisorSpec::new("workers", Strategy::OneForOne)
            .with_intensity(3, Duration::from_secs(10))
            .with_child(ChildSpec::worker("steady", Restart::Permanent, || (Steady, ())))
            .with_child(ChildSpec::worker("flaky", Restart::Permanent, move || {
                (Flaky, Arc::clone(&starts))
            }))
            .with_observer(inner_tx.clone())
    });
    let spec = SupervisorSpec::new("app", Strategy::OneForOne)
        .with_intensity(2, Duration::from_secs(10))
        .with_child(workers)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;
    println!("tree at start:\n{}", snapshot(&root).await?.render());

    let mut seen = Vec::new();
    let third = |r: &Report| matches!(r, Report::Restarted { child, restarts: 3, .. } if child == "flaky");
    until(&mut rx, t0, &mut seen, third).await?;
    println!(
        "tree after the 3rd restart of flaky:\n{}",
        snapshot(&root).await?.render()
    );
    let subtree = |r: &Report| matches!(r, Report::Restarted { supervisor, child, .. } if supervisor == "app" && child == "workers");
    until(&mut rx, t0, &mut seen, subtree).await?;
    // Past the moment the restarted worker would fail if it still did.
    tokio::time::sleep(FAIL_AFTER * 3).await;
    while let Ok(report) = rx.try_recv() {
        println!("[{:>5} ms] {report:?}", t0.elapsed().as_millis());
        seen.push(report);
    }
    let after = snapshot(&root).await?;
    println!("tree after escalation and subtree restart:\n{}", after.render());

    let flaky_restarts: Vec<u32> = seen
        .iter()
        .filter_map(|r| match r {
            Report::Restarted { child, restarts, .. } if child == "flaky" => Some(*restarts),
            _ => None,
        })
        .collect();
    let escalated = seen
        .iter()
        .any(|r| matches!(r, Report::Escalated { supervisor, restarts_in_period: 4 } if supervisor == "workers"));
    let workers_node = after.find("workers").context("workers missing")?;
    let flaky_node = after.find("flaky").context("flaky missing")?;
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;
    if flaky_restarts != [1, 2, 3] || !escalated {
        bail!(
            "expected 3 restarts of flaky then an escalation of workers; saw {flaky_restarts:?}, escalated={escalated}"
        );
    }
    if workers_node.restarts != 1 || flaky_node.restarts != 0 || starts.load(Ordering::SeqCst) != FAILING_STARTS + 1 {
        bail!("subtree was not restarted exactly once with a fresh flaky worker");
    }
    println!(
        "RESULT: ok — flaky restarted 3 times (intensity 3 in 10 s); the 4th failure escalated \
         'workers' to 'app', which restarted the subtree once (workers restarts 1, fresh flaky running)"
    );
    Ok(())
}
