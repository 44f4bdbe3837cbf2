//! A supervised child that spawned grandchildren: stopping it takes down its whole process
//! group (SIGTERM to the group, SIGKILL for stragglers), and — as the server does — this
//! program is a child subreaper, so the orphaned grandchildren are reaped here too.
//!
//! Run: `cargo run --example supervise_group_teardown`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::{Actor, ActorRef};
use supervisors::process::{ProcessSpec, StartIdentity, group_members, set_child_subreaper};
use supervisors::{
    ChildSpec, ProcessActor, ProcessConfig, Readiness, Restart, Strategy, Supervisor, SupervisorMsg, SupervisorSpec,
    TreeSnapshot,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);
const SCRIPT: &str = "sleep 300 & sleep 300 & sleep 300 & wait";

async fn snapshot(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<TreeSnapshot> {
    match root.call(SupervisorMsg::Snapshot, Some(WAIT)).await? {
        ractor::rpc::CallResult::Success(tree) => Ok(tree),
        _ => bail!("snapshot timed out"),
    }
}

/// `pid ppid state cmdline` of a process, from /proc.
fn describe(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let field = |i: usize| fields.get(i).copied().unwrap_or("?");
    format!(
        "pid {pid:>6}  ppid {:>6}  state {}  {}",
        field(1),
        field(0),
        cmdline.trim()
    )
}

/// Every /proc entry in group `pgid`, zombies included (`group_members` skips zombies).
fn group_entries_with_zombies(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            rest.split_whitespace().nth(2) == Some(pgid.to_string().as_str())
        })
        .collect()
}

async fn poll_until(what: &str, condition: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis();
    set_child_subreaper()?;
    let (tx, mut rx) = mpsc::channel(256);
    let pid_cell: Arc<Mutex<Option<i32>>> = Arc::default();
    let record = Arc::clone(&pid_cell);
    let config = ProcessConfig::new(
        || Ok((ProcessSpec::new("/bin/sh").args(["-c", SCRIPT]), None)),
        Readiness::Immediate,
    )
    .on_started(move |id: &StartIdentity| *record.lock().expect("lock") = Some(id.pid));
    let child = ChildSpec::worker("forker", Restart::Permanent, move || (ProcessActor, config.clone()))
        .with_label("sh with 3 background sleeps");
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne)
        .with_child(child)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;
    let pgid = pid_cell.lock().expect("lock").context("no pid")?;
    println!("tree at start:\n{}", snapshot(&root).await?.render());

    poll_until("the grandchildren", || group_members(pgid).len() == 4).await?;
    let before = group_members(pgid);
    println!(
        "[{:>5} ms] process group {pgid} before the stop ({} members):",
        ms(),
        before.len()
    );
    for pid in &before {
        println!("    {}", describe(*pid));
    }

    let began = Instant::now();
    root.call(|port| SupervisorMsg::TerminateChild("forker".into(), port), Some(WAIT))
        .await?;
    println!(
        "[{:>5} ms] TerminateChild returned after {} ms",
        ms(),
        began.elapsed().as_millis()
    );
    while let Ok(report) = rx.try_recv() {
        println!("[{:>5} ms] {report:?}", ms());
    }
    let after = group_members(pgid);
    println!("[{:>5} ms] group_members({pgid}) = {after:?}", ms());
    // Reaping of reparented members is bounded; give it the same bound before judging.
    let reaped = poll_until("zombies to be reaped", || group_entries_with_zombies(pgid).is_empty())
        .await
        .is_ok();
    let leftovers = group_entries_with_zombies(pgid);
    println!(
        "[{:>5} ms] /proc entries left in group {pgid}, zombies included: {leftovers:?}",
        ms()
    );
    println!("tree after the stop:\n{}", snapshot(&root).await?.render());
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;

    if before.len() != 4 || !after.is_empty() || !reaped {
        bail!("group {pgid}: before {before:?}, live after {after:?}, left {leftovers:?}");
    }
    println!("no survivors");
    println!(
        "RESULT: ok — stopping the child took down its whole group {pgid} (sh + 3 grandchildren): \
         group_members is empty right after the stop and every member was reaped"
    );
    Ok(())
}
