//! An OS process that ignores SIGTERM is SIGKILLed after its grace: once under a supervisor
//! (TerminateChild, timed), once with `ProcessChild::terminate` directly (prints the
//! `Termination` and the exit signal).
//!
//! Run: `cargo run --example supervise_sigterm_ignored`

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::{Actor, ActorRef};
use supervisors::process::{ExitOutcome, ProcessSpec, StartIdentity, group_members, spawn};
use supervisors::{
    ChildSpec, ProcessActor, ProcessConfig, Readiness, Restart, Strategy, Supervisor, SupervisorMsg, SupervisorSpec,
    TreeSnapshot,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_millis(500);
/// The ready line is written after the trap, so once it is seen SIGTERM is ignored.
const SCRIPT: &str = r#"trap "" TERM; echo ready >&3; exec sleep 300"#;

async fn snapshot(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<TreeSnapshot> {
    match root.call(SupervisorMsg::Snapshot, Some(WAIT)).await? {
        ractor::rpc::CallResult::Success(tree) => Ok(tree),
        _ => bail!("snapshot timed out"),
    }
}

/// Whether /proc says the process ignores SIGTERM (bit 15 of SigIgn).
fn ignores_sigterm(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(str::trim)
        .unwrap_or("0");
    u64::from_str_radix(mask, 16).is_ok_and(|mask| mask & (1 << (15 - 1)) != 0)
}

fn spec_with_ready_fd() -> std::io::Result<(ProcessSpec, OwnedFd)> {
    let (ours, theirs) = UnixStream::pair()?;
    let spec = ProcessSpec::new("/bin/sh")
        .args(["-c", SCRIPT])
        .grace(GRACE)
        .inherit_fd(theirs.into(), 3);
    Ok((spec, ours.into()))
}

async fn wait_until(what: &str, condition: impl Fn() -> bool) -> anyhow::Result<()> {
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

    // 1. Under a supervisor: the actor's stop is SIGTERM to the group, SIGKILL after the grace.
    let (tx, mut rx) = mpsc::channel(256);
    let pid_cell: Arc<Mutex<Option<i32>>> = Arc::default();
    let record = Arc::clone(&pid_cell);
    let config = ProcessConfig::new(
        || spec_with_ready_fd().map(|(spec, ours)| (spec, Some(ours))),
        Readiness::Line {
            deadline: WAIT,
            line: "ready".into(),
        },
    )
    .on_started(move |id: &StartIdentity| *record.lock().expect("lock") = Some(id.pid));
    let child = ChildSpec::worker("stubborn", Restart::Permanent, move || (ProcessActor, config.clone()))
        .with_label(format!("grace {} ms", GRACE.as_millis()));
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne)
        .with_child(child)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;
    let pid = pid_cell.lock().expect("lock").context("no pid")?;
    println!("tree at start:\n{}", snapshot(&root).await?.render());
    wait_until("the trap", || ignores_sigterm(pid)).await?;
    println!(
        "[{:>5} ms] pid {pid} ignores SIGTERM (SigIgn in /proc/{pid}/status)",
        ms()
    );

    let stop_began = Instant::now();
    let reply = root
        .call(
            |port| SupervisorMsg::TerminateChild("stubborn".into(), port),
            Some(WAIT),
        )
        .await?;
    let supervised_stop = stop_began.elapsed();
    println!(
        "[{:>5} ms] TerminateChild replied {reply:?} after {} ms",
        ms(),
        supervised_stop.as_millis()
    );
    while let Ok(report) = rx.try_recv() {
        println!("[{:>5} ms] {report:?}", ms());
    }
    let supervised_gone = group_members(pid).is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists();
    println!(
        "[{:>5} ms] group {pid} members after stop: {:?}",
        ms(),
        group_members(pid)
    );
    println!("tree after the stop:\n{}", snapshot(&root).await?.render());
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;

    // 2. Directly: the same child, `ProcessChild::terminate`, to see how it ended.
    let (spec, ours) = spec_with_ready_fd()?;
    let mut direct = spawn(spec)?;
    let line = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let stream = UnixStream::from(ours);
        stream.set_read_timeout(Some(WAIT))?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line)
    })
    .await??;
    println!(
        "[{:>5} ms] direct child pid {} said {:?}",
        ms(),
        direct.pid(),
        line.trim()
    );
    let began = Instant::now();
    let termination = direct.terminate(GRACE).await?;
    let direct_stop = began.elapsed();
    println!(
        "[{:>5} ms] terminate({} ms) -> {termination:?} after {} ms (exit signal {:?})",
        ms(),
        GRACE.as_millis(),
        direct_stop.as_millis(),
        termination.outcome.signal()
    );

    let terminated = matches!(reply, ractor::rpc::CallResult::Success(Ok(())));
    if !terminated || supervised_stop < GRACE || !supervised_gone {
        bail!("supervised stop: {reply:?} after {supervised_stop:?}, gone={supervised_gone}");
    }
    if termination.outcome != ExitOutcome::Signaled(9) || !termination.escalated || direct_stop < GRACE {
        bail!("direct terminate: {termination:?} after {direct_stop:?}");
    }
    println!(
        "RESULT: ok — a child ignoring SIGTERM outlived the {} ms grace and was SIGKILLed \
         (supervised stop took {} ms; direct terminate took {} ms, escalated, exit signal 9)",
        GRACE.as_millis(),
        supervised_stop.as_millis(),
        direct_stop.as_millis()
    );
    Ok(())
}
