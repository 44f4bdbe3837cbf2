//! What the server's tree relies on beyond OTP's basics: supervised tasks (`ChildSpec::task`)
//! that restart after a panic and end normally; dynamic transient children removed once they
//! end for good; a `ProcessActor` that adopts a running process, shows its pid and group in
//! the tree while it lives, tells its owner how it ended, and stops its group on `Terminate`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::Actor;
use ractor::rpc::CallResult;
use supervisors::process::{ProcessSpec, group_members, spawn};
use supervisors::{
    ChildSpec, DetailsCell, EndCause, NodeState, ProcessActor, ProcessConfig, ProcessEnd, ProcessMsg, Readiness,
    Report, Restart, Strategy, SupervisorMsg, SupervisorSpec, TreeSnapshot,
};

const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

async fn snapshot(tree: &common::Tree) -> TreeSnapshot {
    match tree.root.call(SupervisorMsg::Snapshot, Some(WAIT)).await {
        Ok(CallResult::Success(snapshot)) => snapshot,
        other => panic!("no snapshot: {:?}", other.map(|_| ())),
    }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_panics_is_restarted_and_one_that_ends_is_not() {
    let runs = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&runs);
    // First run panics, second ends normally.
    let flaky = ChildSpec::task("flaky", Restart::Transient, move || {
        let counter = Arc::clone(&counter);
        async move {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("first run fails");
            }
            Ok(())
        }
    });
    let spec = SupervisorSpec::new("root", Strategy::OneForOne)
        .with_intensity(3, Duration::from_secs(10))
        .with_child(flaky);
    let mut tree = common::start(spec, WAIT).await;
    tree.reports_until(|report| matches!(report, Report::Restarted { child, .. } if child == "flaky"))
        .await;
    let exited = tree
        .reports_until(|report| matches!(report, Report::Exited { child, abnormal: false, .. } if child == "flaky"))
        .await;
    assert!(!exited.is_empty());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "restarted once after the panic, not after the normal end"
    );
    let flaky = snapshot(&tree)
        .await
        .find("flaky")
        .cloned()
        .expect("a static child stays listed");
    assert_eq!((flaky.state, flaky.restarts), (NodeState::Stopped, 1));
    tree.root.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_transient_child_is_removed_once_it_ends_normally() {
    let spec = SupervisorSpec::new("root", Strategy::OneForOne);
    let mut tree = common::start(spec, WAIT).await;
    let (release, wait) = tokio::sync::watch::channel(false);
    let wait = Arc::new(Mutex::new(wait));
    let task = ChildSpec::task("feed-1", Restart::Transient, move || {
        let mut wait = wait.lock().expect("lock").clone();
        async move {
            let _ = wait.wait_for(|released| *released).await;
            Ok(())
        }
    });
    let started = tree
        .root
        .call(|reply| SupervisorMsg::StartChild(task, reply), Some(WAIT))
        .await;
    assert!(matches!(started, Ok(CallResult::Success(Ok(())))));
    assert!(snapshot(&tree).await.find("feed-1").is_some(), "listed while it runs");
    release.send_replace(true);
    tree.reports_until(|report| matches!(report, Report::Exited { child, .. } if child == "feed-1"))
        .await;
    eventually("the ended child is gone from the tree", async || {
        snapshot(&tree).await.find("feed-1").is_none()
    })
    .await;
    tree.root.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_process_shows_in_the_tree_and_its_end_reaches_the_owner() {
    let child = spawn(ProcessSpec::new("/bin/sh").args(["-c", "sleep 0.3; exit 0"])).expect("spawn");
    let (pid, pgid) = (child.pid(), child.pgid());
    let ends: Arc<Mutex<Vec<ProcessEnd>>> = Arc::default();
    let record = Arc::clone(&ends);
    let details = DetailsCell::default();
    let config = ProcessConfig::adopt(child, Readiness::Immediate)
        .with_details(details.clone())
        .on_exit(move |end| record.lock().expect("lock").push(end));
    let spec = SupervisorSpec::new("root", Strategy::OneForOne).with_child(
        ChildSpec::worker("adopted", Restart::Temporary, move || (ProcessActor, config.clone())).with_details(details),
    );
    let tree = common::start(spec, WAIT).await;
    let shown = snapshot(&tree).await.find("adopted").cloned().expect("listed");
    assert_eq!(shown.details.processes.len(), 1);
    assert_eq!(
        (shown.details.processes[0].pid, shown.details.processes[0].process_group),
        (pid, pgid)
    );
    eventually("the process exits and its actor reports it", async || {
        !ends.lock().expect("lock").is_empty()
    })
    .await;
    let end = ends.lock().expect("lock")[0];
    assert_eq!(end.cause, EndCause::Exited);
    assert!(end.outcome.is_some_and(|outcome| outcome.success()));
    eventually("the temporary child leaves the tree", async || {
        snapshot(&tree).await.find("adopted").is_none()
    })
    .await;
    assert_eq!(ends.lock().expect("lock").len(), 1, "told exactly once");
    tree.root.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_stops_the_whole_group_and_answers_its_status() {
    let child = spawn(ProcessSpec::new("/bin/sh").args(["-c", "sleep 300 & sleep 300 & wait"])).expect("spawn");
    let pgid = child.pgid();
    let ends: Arc<Mutex<Vec<ProcessEnd>>> = Arc::default();
    let record = Arc::clone(&ends);
    let config =
        ProcessConfig::adopt(child, Readiness::Immediate).on_exit(move |end| record.lock().expect("lock").push(end));
    let (process, handle) = Actor::spawn(None, ProcessActor, config).await.expect("actor");
    let deadline = Instant::now() + WAIT;
    while group_members(pgid).len() < 3 {
        assert!(Instant::now() < deadline, "the group did not form");
        tokio::time::sleep(POLL).await;
    }
    let grace = Duration::from_millis(200);
    let answer = process
        .call(|reply| ProcessMsg::Terminate(grace, reply), Some(WAIT))
        .await;
    let Ok(CallResult::Success(Some(outcome))) = answer else {
        panic!("no exit status from Terminate");
    };
    assert!(!outcome.success(), "SIGTERM ended it: {outcome}");
    assert!(group_members(pgid).is_empty(), "no member of the group survives");
    handle.await.expect("the actor stops after Terminate");
    let ends = ends.lock().expect("lock");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].cause, EndCause::Terminated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_ready_deadline_is_reported_as_such() {
    let child = spawn(ProcessSpec::new("/bin/sh").args(["-c", "sleep 300"])).expect("spawn");
    let ends: Arc<Mutex<Vec<ProcessEnd>>> = Arc::default();
    let record = Arc::clone(&ends);
    let readiness = Readiness::Message {
        deadline: Duration::from_millis(100),
    };
    let config = ProcessConfig::adopt(child, readiness).on_exit(move |end| record.lock().expect("lock").push(end));
    let (_process, handle) = Actor::spawn(None, ProcessActor, config).await.expect("actor");
    let _ = tokio::time::timeout(WAIT, handle)
        .await
        .expect("the actor fails after the deadline");
    let ends = ends.lock().expect("lock");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].cause, EndCause::ReadyDeadlineMissed);
}
