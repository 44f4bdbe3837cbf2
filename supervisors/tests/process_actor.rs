//! Real OS processes as children of a real `Supervisor` (through `ProcessActor`): restart and
//! escalation, the ready handshake (by message and by line), SIGTERM then SIGKILL on stop, and
//! no survivor in the process group afterwards.
//!
//! This binary does not set the child-subreaper flag: orphaned grandchildren go to init, and
//! `group_members` ignores zombies, so "no survivor" means no live member.

mod common;

use common::{Tree, start as start_tree};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use supervisors::process::{ProcessSpec, StartIdentity, group_members};
use supervisors::{
    ChildSpec, ProcessActor, ProcessConfig, Readiness, Report, Restart, Shutdown, Strategy, SupervisorSpec,
};

/// Upper bound for anything we wait for; never a claim that something is fast.
const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

fn sh(script: &str) -> ProcessSpec {
    ProcessSpec::new("/bin/sh").args(["-c", script])
}

/// Pids of every instance started, in start order (filled by `on_started`).
type Started = Arc<Mutex<Vec<i32>>>;

fn config(
    factory: impl Fn() -> std::io::Result<(ProcessSpec, Option<OwnedFd>)> + Send + Sync + 'static,
    readiness: Readiness,
) -> (ProcessConfig, Started) {
    let started: Started = Arc::default();
    let record = Arc::clone(&started);
    let config = ProcessConfig::new(factory, readiness).on_started(move |identity: &StartIdentity| {
        record.lock().expect("lock").push(identity.pid);
    });
    (config, started)
}

fn process_child(id: &str, restart: Restart, config: ProcessConfig) -> ChildSpec {
    ChildSpec::worker(id, restart, move || (ProcessActor, config.clone()))
}

/// A factory for `Readiness::Line`: the child gets one end of a socketpair as fd 3.
fn line_factory(script: &'static str, grace: Duration) -> impl Fn() -> std::io::Result<(ProcessSpec, Option<OwnedFd>)> {
    move || {
        let (ours, theirs) = UnixStream::pair()?;
        let spec = sh(script).grace(grace).inherit_fd(theirs.into(), 3);
        Ok((spec, Some(ours.into())))
    }
}

impl Tree {
    /// Stops the root (which stops its children) and waits for it to end; returns how long it took.
    async fn stop(self) -> Duration {
        let began = Instant::now();
        self.root.stop_and_wait(None, Some(WAIT)).await.expect("root stops");
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("root ends in time")
            .expect("root task");
        began.elapsed()
    }
}

async fn started_pid(started: &Started) -> i32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(&pid) = started.lock().expect("lock").first() {
            return pid;
        }
        assert!(Instant::now() < deadline, "process never started");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits (bounded) until the group has no live member; returns what is left.
async fn wait_group_empty(pgid: i32) -> Vec<i32> {
    let deadline = Instant::now() + WAIT;
    loop {
        let members = group_members(pgid);
        if members.is_empty() || Instant::now() >= deadline {
            return members;
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_group_size(pgid: i32, size: usize) {
    let deadline = Instant::now() + WAIT;
    while group_members(pgid).len() < size {
        assert!(Instant::now() < deadline, "group {pgid} never reached {size} members");
        tokio::time::sleep(POLL).await;
    }
}

fn proc_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_permanent_process_is_restarted_until_intensity_escalates() {
    let (config, started) = config(|| Ok((sh("exit 3"), None)), Readiness::Immediate);
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne)
        .with_intensity(2, Duration::from_secs(60))
        .with_child(process_child("crasher", Restart::Permanent, config));
    let mut tree = start_tree(spec, WAIT).await;
    let reports = tree.reports_until(|r| matches!(r, Report::Escalated { .. })).await;

    let restarts: Vec<u32> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Restarted { child, restarts, .. } if child == "crasher" => Some(*restarts),
            _ => None,
        })
        .collect();
    assert_eq!(restarts, vec![1, 2], "two restarts within the intensity: {reports:?}");
    let exits: Vec<&Report> = reports.iter().filter(|r| matches!(r, Report::Exited { .. })).collect();
    assert_eq!(exits.len(), 3, "three failures (the third escalates): {reports:?}");
    for exit in exits {
        assert!(
            matches!(exit, Report::Exited { abnormal: true, reason: Some(reason), .. } if reason.contains("exited with code 3")),
            "exit code 3 is a failure: {exit:?}"
        );
    }
    assert!(
        matches!(reports.last(), Some(Report::Escalated { supervisor, restarts_in_period: 3 }) if supervisor == "procs"),
        "{reports:?}"
    );
    // The root has no parent: escalating ends it.
    tokio::time::timeout(WAIT, tree.handle)
        .await
        .expect("escalated root ends")
        .expect("root task");
    let pids = started.lock().expect("lock").clone();
    assert_eq!(pids.len(), 3, "one process per start: {pids:?}");
    for pid in pids {
        assert!(!proc_exists(pid), "process {pid} was not reaped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_missing_ready_message_is_killed_at_deadline_and_actor_fails() {
    let deadline = Duration::from_millis(300);
    let (config, started) = config(|| Ok((sh("sleep 60"), None)), Readiness::Message { deadline });
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne).with_child(process_child(
        "unready",
        Restart::Temporary,
        config,
    ));
    let began = Instant::now();
    let mut tree = start_tree(spec, WAIT).await;
    let pid = started_pid(&started).await;
    let reports = tree
        .reports_until(|r| matches!(r, Report::Exited { child, .. } if child == "unready"))
        .await;
    assert!(began.elapsed() >= deadline, "killed before its deadline");
    match reports.last() {
        Some(Report::Exited {
            abnormal: true,
            reason: Some(reason),
            ..
        }) => {
            assert!(reason.contains("handshake deadline"), "reason: {reason}");
        }
        other => panic!("expected an abnormal exit, got {other:?}"),
    }
    // The leader was killed and reaped by exact pid before the actor failed.
    assert!(!proc_exists(pid), "process {pid} survived its missed deadline");
    assert_eq!(wait_group_empty(pid).await, Vec::<i32>::new());
    assert_eq!(
        started.lock().expect("lock").len(),
        1,
        "a temporary child is not restarted"
    );
    tree.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_line_child_stays_up_and_stop_ends_it_with_sigterm() {
    let deadline = Duration::from_secs(4);
    // A long grace: if SIGTERM did not end the child, the stop would take 30 s.
    let grace = Duration::from_secs(30);
    let factory = line_factory("echo ready >&3; exec sleep 60", grace);
    let readiness = Readiness::Line {
        deadline,
        line: "ready".to_string(),
    };
    let (config, started) = config(factory, readiness);
    let child = process_child("server", Restart::Permanent, config).with_shutdown(Shutdown::Timeout(WAIT * 2));
    let mut tree = start_tree(
        SupervisorSpec::new("procs", Strategy::OneForOne).with_child(child),
        WAIT,
    )
    .await;
    let pid = started_pid(&started).await;

    // Past the deadline with no failure: the line was seen.
    tokio::time::sleep(deadline + Duration::from_secs(1)).await;
    let mut early = Vec::new();
    while let Ok(report) = tree.reports.try_recv() {
        early.push(report);
    }
    assert!(
        !early.iter().any(|r| matches!(r, Report::Exited { .. })),
        "a ready child must not fail: {early:?}"
    );
    assert!(proc_exists(pid), "ready child is running");

    let took = tree.stop().await;
    assert!(
        took < grace,
        "SIGTERM should have ended it well before the {grace:?} grace (took {took:?})"
    );
    assert!(!proc_exists(pid), "leader {pid} not reaped");
    assert_eq!(wait_group_empty(pid).await, Vec::<i32>::new());
    assert_eq!(started.lock().expect("lock").len(), 1, "no restart during a stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_ignoring_sigterm_is_killed_after_grace_on_stop() {
    let deadline = Duration::from_secs(4);
    let grace = Duration::from_millis(300);
    // The ready line comes after the trap, so readiness proves SIGTERM is ignored from then on.
    let factory = line_factory(r#"trap "" TERM; sleep 60 & echo ready >&3; exec sleep 60"#, grace);
    let readiness = Readiness::Line {
        deadline,
        line: "ready".to_string(),
    };
    let (config, started) = config(factory, readiness);
    let child = process_child("stubborn", Restart::Permanent, config);
    let mut tree = start_tree(
        SupervisorSpec::new("procs", Strategy::OneForOne).with_child(child),
        WAIT,
    )
    .await;
    let pid = started_pid(&started).await;
    wait_group_size(pid, 2).await;

    tokio::time::sleep(deadline + Duration::from_secs(1)).await;
    let mut early = Vec::new();
    while let Ok(report) = tree.reports.try_recv() {
        early.push(report);
    }
    assert!(
        !early.iter().any(|r| matches!(r, Report::Exited { .. })),
        "a ready child must not fail: {early:?}"
    );

    let took = tree.stop().await;
    // It outlived SIGTERM for the whole grace, so only the SIGKILL escalation can have ended it.
    assert!(
        took >= grace,
        "stop returned before the grace ({took:?}): SIGTERM was not ignored?"
    );
    assert!(!proc_exists(pid), "leader {pid} not reaped");
    assert_eq!(
        wait_group_empty(pid).await,
        Vec::<i32>::new(),
        "survivors in group {pid}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_supervisor_leaves_no_grandchild_alive() {
    let (config, started) = config(|| Ok((sh("sleep 60 & sleep 60 & wait"), None)), Readiness::Immediate);
    let child = process_child("parent", Restart::Permanent, config);
    let tree = start_tree(
        SupervisorSpec::new("procs", Strategy::OneForOne).with_child(child),
        WAIT,
    )
    .await;
    let pgid = started_pid(&started).await;
    wait_group_size(pgid, 3).await;
    let members = group_members(pgid);
    assert_eq!(members.len(), 3, "leader and two grandchildren: {members:?}");

    tree.stop().await;
    assert_eq!(
        wait_group_empty(pgid).await,
        Vec::<i32>::new(),
        "survivors in group {pgid}"
    );
}
