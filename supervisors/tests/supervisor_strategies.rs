//! Every strategy, restart type, intensity escalation and shutdown mode of `Supervisor`,
//! with real ractor actors.

mod common;

use common::{Tree, start as start_tree};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{ChildSpec, NodeState, Report, Restart, Shutdown, Strategy, SupervisorMsg, SupervisorSpec};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

/// A worker that counts its starts and exits when told.
struct Worker;

#[derive(Clone)]
struct WorkerArgs {
    starts: Arc<AtomicUsize>,
    cleaned_up: Arc<AtomicBool>,
    /// How long `post_stop` takes (to test shutdown timeouts).
    cleanup_delay: Duration,
}

enum WorkerMsg {
    /// Exit abnormally (a failure).
    Fail,
    /// Exit normally.
    Finish,
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = WorkerArgs;
    type Arguments = WorkerArgs;

    async fn pre_start(&self, _: ActorRef<WorkerMsg>, args: WorkerArgs) -> Result<WorkerArgs, ActorProcessingErr> {
        args.starts.fetch_add(1, Ordering::SeqCst);
        Ok(args)
    }

    async fn post_stop(&self, _: ActorRef<WorkerMsg>, state: &mut WorkerArgs) -> Result<(), ActorProcessingErr> {
        tokio::time::sleep(state.cleanup_delay).await;
        state.cleaned_up.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        _: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Fail => Err("worker failed on purpose".into()),
            WorkerMsg::Finish => {
                myself.stop(None);
                Ok(())
            }
        }
    }
}

struct Probe {
    starts: Arc<AtomicUsize>,
    cleaned_up: Arc<AtomicBool>,
}

fn worker(id: &str, restart: Restart) -> (ChildSpec, Probe) {
    worker_with_cleanup(id, restart, Duration::ZERO)
}

fn worker_with_cleanup(id: &str, restart: Restart, cleanup_delay: Duration) -> (ChildSpec, Probe) {
    let args = WorkerArgs {
        starts: Arc::new(AtomicUsize::new(0)),
        cleaned_up: Arc::new(AtomicBool::new(false)),
        cleanup_delay,
    };
    let probe = Probe {
        starts: Arc::clone(&args.starts),
        cleaned_up: Arc::clone(&args.cleaned_up),
    };
    (ChildSpec::worker(id, restart, move || (Worker, args.clone())), probe)
}

impl Tree {
    async fn child_ref(&self, id: &str) -> ActorRef<WorkerMsg> {
        child_of(&self.root, id).await.into()
    }

    async fn snapshot(&self) -> supervisors::TreeSnapshot {
        match self.root.call(SupervisorMsg::Snapshot, Some(WAIT)).await.expect("call") {
            ractor::rpc::CallResult::Success(snapshot) => snapshot,
            _ => panic!("snapshot call timed out"),
        }
    }
}

async fn child_of(supervisor: &ActorRef<SupervisorMsg>, id: &str) -> ractor::ActorCell {
    let id = id.to_string();
    match supervisor
        .call(|reply| SupervisorMsg::Child(id, reply), Some(WAIT))
        .await
        .expect("call")
    {
        ractor::rpc::CallResult::Success(Some(cell)) => cell,
        _ => panic!("child is not running"),
    }
}

fn restarted(id: &'static str) -> impl Fn(&Report) -> bool {
    move |report| matches!(report, Report::Restarted { child, .. } if child == id)
}

fn exited(id: &'static str) -> impl Fn(&Report) -> bool {
    move |report| matches!(report, Report::Exited { child, .. } if child == id)
}

fn starts(probes: &[&Probe]) -> Vec<usize> {
    probes.iter().map(|probe| probe.starts.load(Ordering::SeqCst)).collect()
}

fn three(strategy: Strategy) -> (SupervisorSpec, [Probe; 3]) {
    let (a, pa) = worker("a", Restart::Permanent);
    let (b, pb) = worker("b", Restart::Permanent);
    let (c, pc) = worker("c", Restart::Permanent);
    let spec = SupervisorSpec::new("root", strategy)
        .with_intensity(10, Duration::from_secs(60))
        .with_child(a)
        .with_child(b)
        .with_child(c);
    (spec, [pa, pb, pc])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_start_in_order_and_stop_in_reverse() {
    let (spec, _probes) = three(Strategy::OneForOne);
    let mut tree = start_tree(spec, WAIT).await;
    let started = tree
        .reports_until(|r| matches!(r, Report::Started { child, .. } if child == "c"))
        .await;
    let order: Vec<_> = started.iter().map(|r| format!("{r:?}")).collect();
    assert!(
        order[0].contains("\"a\"") && order[1].contains("\"b\"") && order[2].contains("\"c\""),
        "{order:?}"
    );
    tree.root.stop_and_wait(None, Some(WAIT)).await.expect("stop");
    let stopped = tree
        .reports_until(|r| matches!(r, Report::Stopped { child, .. } if child == "a"))
        .await;
    let ids: Vec<String> = stopped
        .into_iter()
        .filter_map(|r| match r {
            Report::Stopped { child, .. } => Some(child),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["c", "b", "a"]);
    tree.handle.await.expect("root ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_for_one_restarts_only_the_failed_child() {
    let (spec, [a, b, c]) = three(Strategy::OneForOne);
    let mut tree = start_tree(spec, WAIT).await;
    tree.child_ref("b").await.cast(WorkerMsg::Fail).expect("cast");
    tree.reports_until(restarted("b")).await;
    assert_eq!(starts(&[&a, &b, &c]), [1, 2, 1]);
    let snapshot = tree.snapshot().await;
    assert_eq!(snapshot.find("b").expect("b").restarts, 1);
    assert_eq!(snapshot.find("a").expect("a").restarts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_for_all_restarts_every_child() {
    let (spec, [a, b, c]) = three(Strategy::OneForAll);
    let mut tree = start_tree(spec, WAIT).await;
    tree.child_ref("b").await.cast(WorkerMsg::Fail).expect("cast");
    let reports = tree.reports_until(restarted("c")).await;
    assert_eq!(starts(&[&a, &b, &c]), [2, 2, 2]);
    let stops: Vec<_> = reports.iter().filter(|r| matches!(r, Report::Stopped { .. })).collect();
    assert!(
        matches!(stops.as_slice(), [Report::Stopped { child: first, .. }, Report::Stopped { child: second, .. }] if first == "c" && second == "a"),
        "siblings must stop in reverse order: {stops:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_for_one_restarts_the_child_and_those_after_it() {
    let (spec, [a, b, c]) = three(Strategy::RestForOne);
    let mut tree = start_tree(spec, WAIT).await;
    tree.child_ref("b").await.cast(WorkerMsg::Fail).expect("cast");
    tree.reports_until(restarted("c")).await;
    assert_eq!(starts(&[&a, &b, &c]), [1, 2, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_types_decide_which_exits_restart() {
    let (permanent, p) = worker("permanent", Restart::Permanent);
    let (transient, t) = worker("transient", Restart::Transient);
    let (temporary, m) = worker("temporary", Restart::Temporary);
    let spec = SupervisorSpec::new("root", Strategy::OneForOne)
        .with_intensity(10, Duration::from_secs(60))
        .with_child(permanent)
        .with_child(transient)
        .with_child(temporary);
    let mut tree = start_tree(spec, WAIT).await;

    tree.child_ref("permanent").await.cast(WorkerMsg::Finish).expect("cast");
    tree.reports_until(restarted("permanent")).await;
    assert_eq!(
        p.starts.load(Ordering::SeqCst),
        2,
        "a permanent child restarts even after a normal exit"
    );

    tree.child_ref("transient").await.cast(WorkerMsg::Finish).expect("cast");
    tree.reports_until(exited("transient")).await;
    tree.snapshot().await; // a full round-trip: any restart would have happened by now
    assert_eq!(
        t.starts.load(Ordering::SeqCst),
        1,
        "a transient child stays down after a normal exit"
    );
    assert_eq!(
        tree.snapshot().await.find("transient").expect("kept").state,
        NodeState::Stopped
    );

    tree.child_ref("temporary").await.cast(WorkerMsg::Fail).expect("cast");
    tree.reports_until(exited("temporary")).await;
    let snapshot = tree.snapshot().await;
    assert_eq!(m.starts.load(Ordering::SeqCst), 1, "a temporary child never restarts");
    assert!(
        snapshot.find("temporary").is_none(),
        "a temporary child is removed after it exits"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_child_restarts_after_a_failure() {
    let (transient, t) = worker("transient", Restart::Transient);
    let spec = SupervisorSpec::new("root", Strategy::OneForOne).with_child(transient);
    let mut tree = start_tree(spec, WAIT).await;
    tree.child_ref("transient").await.cast(WorkerMsg::Fail).expect("cast");
    tree.reports_until(restarted("transient")).await;
    assert_eq!(t.starts.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceeding_the_intensity_escalates_to_the_parent() {
    let (flaky, probe) = worker("flaky", Restart::Permanent);
    let inner_reports = mpsc::channel(1024);
    let inner_sender = inner_reports.0.clone();
    let inner = ChildSpec::supervisor("inner", Restart::Permanent, move || {
        SupervisorSpec::new("inner", Strategy::OneForOne)
            .with_intensity(2, Duration::from_secs(60))
            .with_child(flaky.clone())
            .with_observer(inner_sender.clone())
    });
    let spec = SupervisorSpec::new("root", Strategy::OneForOne)
        .with_intensity(5, Duration::from_secs(60))
        .with_child(inner);
    let mut tree = start_tree(spec, WAIT).await;
    let mut inner_events = inner_reports.1;

    for _ in 0..3 {
        let inner_ref: ActorRef<SupervisorMsg> = child_of(&tree.root, "inner").await.into();
        let flaky_ref: ActorRef<WorkerMsg> = child_of(&inner_ref, "flaky").await.into();
        flaky_ref.cast(WorkerMsg::Fail).expect("cast");
        let until = tokio::time::timeout(WAIT, async {
            loop {
                match inner_events.recv().await.expect("open") {
                    Report::Restarted { .. } | Report::Escalated { .. } => break,
                    _ => continue,
                }
            }
        });
        until.await.expect("inner reacted");
    }
    // The third failure within the period is one too many: the inner supervisor escalated,
    // and the root restarted it (and with it a fresh flaky child).
    tree.reports_until(restarted("inner")).await;
    let snapshot = tree.snapshot().await;
    assert_eq!(snapshot.find("inner").expect("inner").restarts, 1);
    assert_eq!(
        probe.starts.load(Ordering::SeqCst),
        4,
        "3 starts under the first inner supervisor, 1 under the new one"
    );
    println!("{}", snapshot.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_kills_a_child_whose_cleanup_is_too_slow() {
    let (slow, slow_probe) = worker_with_cleanup("slow", Restart::Permanent, Duration::from_secs(30));
    let slow = slow.with_shutdown(Shutdown::Timeout(Duration::from_millis(200)));
    let (quick, quick_probe) = worker("quick", Restart::Permanent);
    let (brutal, brutal_probe) = worker("brutal", Restart::Permanent);
    let brutal = brutal.with_shutdown(Shutdown::BrutalKill);
    let spec = SupervisorSpec::new("root", Strategy::OneForOne)
        .with_child(slow)
        .with_child(quick)
        .with_child(brutal);
    let tree = start_tree(spec, WAIT).await;
    let started = std::time::Instant::now();
    tree.root.stop_and_wait(None, Some(WAIT)).await.expect("root stops");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the slow child was not killed at its timeout"
    );
    assert!(
        !slow_probe.cleaned_up.load(Ordering::SeqCst),
        "killed before its cleanup finished"
    );
    assert!(
        quick_probe.cleaned_up.load(Ordering::SeqCst),
        "a graceful stop runs cleanup"
    );
    assert!(
        !brutal_probe.cleaned_up.load(Ordering::SeqCst),
        "a brutal kill skips cleanup"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_children_can_be_added_and_terminated() {
    let spec = SupervisorSpec::new("runners", Strategy::OneForOne);
    let tree = start_tree(spec, WAIT).await;
    let (runner, probe) = worker("run-1/gen-1", Restart::Temporary);
    let runner = runner.with_label("generation 1");
    let added = tree
        .root
        .call(|reply| SupervisorMsg::StartChild(runner.clone(), reply), Some(WAIT))
        .await
        .expect("call");
    assert!(matches!(added, ractor::rpc::CallResult::Success(Ok(()))));
    let duplicate = tree
        .root
        .call(|reply| SupervisorMsg::StartChild(runner, reply), Some(WAIT))
        .await
        .expect("call");
    assert!(matches!(
        duplicate,
        ractor::rpc::CallResult::Success(Err(supervisors::SupervisorError::DuplicateChild(_)))
    ));
    let snapshot = tree.snapshot().await;
    assert_eq!(
        snapshot.find("run-1/gen-1").expect("listed").label.as_deref(),
        Some("generation 1")
    );
    let removed = tree
        .root
        .call(
            |reply| SupervisorMsg::TerminateChild("run-1/gen-1".to_string(), reply),
            Some(WAIT),
        )
        .await
        .expect("call");
    assert!(matches!(removed, ractor::rpc::CallResult::Success(Ok(()))));
    assert!(probe.cleaned_up.load(Ordering::SeqCst));
    assert!(tree.snapshot().await.children.is_empty());
}
