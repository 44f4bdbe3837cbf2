//! Process-group cleanup with the test process acting as a child subreaper, as the server does.
//! Kept in its own test binary because the subreaper flag is process-wide.

use std::path::Path;
use std::time::Duration;

use supervisors::process::{ProcessChild, ProcessSpec, group_members, set_child_subreaper, spawn};

const WAIT_BOUND: Duration = Duration::from_secs(30);

/// Zombies in group `pgid` whose parent is this test process (i.e. reparented and never reaped).
fn our_zombies_in_group(pgid: i32) -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(close) = stat.rfind(')') else {
                return false;
            };
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            fields.first() == Some(&"Z")
                && fields.get(1) == Some(&me.as_str())
                && fields.get(2) == Some(&pgid.to_string().as_str())
        })
        .collect()
}

async fn spawn_with_grandchildren() -> ProcessChild {
    let child = spawn(ProcessSpec::new("/bin/sh").args(["-c", "sleep 60 & sleep 60 & wait"])).expect("spawn");
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    while group_members(child.pgid()).len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "grandchildren never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

async fn wait_group_empty(pgid: i32) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    loop {
        let members = group_members(pgid);
        if members.is_empty() || tokio::time::Instant::now() >= deadline {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_leaves_no_survivor_and_no_zombie_in_group() {
    set_child_subreaper().expect("subreaper");
    let mut child = spawn_with_grandchildren().await;
    let pgid = child.pgid();
    child.terminate(Duration::from_secs(5)).await.expect("terminate");
    // Signals were delivered before terminate returned; the leader was reaped and the reparented
    // grandchildren were reaped by group.
    assert_eq!(group_members(pgid), Vec::<i32>::new(), "survivors in group {pgid}");
    assert!(!Path::new(&format!("/proc/{pgid}")).exists(), "leader not reaped");
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    while !our_zombies_in_group(pgid).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reparented zombies never reaped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stragglers_are_killed_after_leader_exits_on_its_own() {
    set_child_subreaper().expect("subreaper");
    // The leader exits at once, leaving a background member that ignores SIGTERM.
    let spec = ProcessSpec::new("/bin/sh").args(["-c", r#"trap "" TERM; sleep 60 & echo started"#]);
    let mut child = spawn(spec).expect("spawn");
    let pgid = child.pgid();
    tokio::time::timeout(WAIT_BOUND, child.wait_exit())
        .await
        .expect("bound")
        .expect("wait");
    let done = child.terminate(Duration::from_secs(5)).await.expect("terminate");
    assert!(!done.escalated, "leader had already exited");
    assert_eq!(wait_group_empty(pgid).await, Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_live_child_kills_and_reaps_its_group() {
    set_child_subreaper().expect("subreaper");
    let child = spawn_with_grandchildren().await;
    let pgid = child.pgid();
    drop(child);
    assert_eq!(wait_group_empty(pgid).await, Vec::<i32>::new());
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    while Path::new(&format!("/proc/{pgid}")).exists() || !our_zombies_in_group(pgid).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "dropped child left zombies");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
