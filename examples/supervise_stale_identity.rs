//! A persisted start identity protects against signalling a reused PID: a recorded identity
//! whose start time does not match the live process is refused (`IdentityMismatch`) and
//! nothing is sent; the genuine identity is signalled and the supervised process ends.
//!
//! Run: `cargo run --example supervise_stale_identity`

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::{Actor, ActorRef};
use supervisors::process::{
    ProcessSignal, ProcessSpec, SignalOutcome, StartIdentity, identity_of, signal_group_if_identity_matches,
};
use supervisors::{
    ChildSpec, ProcessActor, ProcessConfig, Readiness, Report, Restart, Strategy, Supervisor, SupervisorMsg,
    SupervisorSpec, TreeSnapshot,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

async fn snapshot(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<TreeSnapshot> {
    match root.call(SupervisorMsg::Snapshot, Some(WAIT)).await? {
        ractor::rpc::CallResult::Success(tree) => Ok(tree),
        _ => bail!("snapshot timed out"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis();
    let (tx, mut rx) = mpsc::channel(256);
    // What a server would persist before it could ever signal the child.
    let persisted: Arc<Mutex<Option<String>>> = Arc::default();
    let record = Arc::clone(&persisted);
    let config = ProcessConfig::new(|| Ok((ProcessSpec::new("sleep").arg("60"), None)), Readiness::Immediate)
        .on_started(move |id: &StartIdentity| *record.lock().expect("lock") = Some(id.to_string()));
    let child = ChildSpec::worker("sleeper", Restart::Temporary, move || (ProcessActor, config.clone()));
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne)
        .with_child(child)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;
    println!("tree at start:\n{}", snapshot(&root).await?.render());

    let stored = persisted
        .lock()
        .expect("lock")
        .clone()
        .context("no identity persisted")?;
    let genuine: StartIdentity = stored.parse()?;
    let pid = genuine.pid;
    println!("[{:>5} ms] persisted identity (boot_id:pid:starttime): {stored}", ms());

    // A record about an older process that had the same pid (e.g. before a server restart and
    // a pid wrap-around): same boot, same pid, an earlier start time.
    let tampered = StartIdentity {
        start_time_ticks: genuine.start_time_ticks.saturating_sub(1),
        ..genuine.clone()
    };
    let refused = signal_group_if_identity_matches(&tampered, ProcessSignal::Term)?;
    println!("[{:>5} ms] SIGTERM by stale identity {tampered} -> {refused:?}", ms());
    // `sleep` dies at the first SIGTERM; still alive afterwards means nothing was sent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still_same = identity_of(pid) == Some(genuine.clone());
    let mut quiet = true;
    while let Ok(report) = rx.try_recv() {
        println!("[{:>5} ms] {report:?}", ms());
        quiet &= !matches!(report, Report::Exited { .. });
    }
    println!(
        "[{:>5} ms] pid {pid} still alive with the same identity: {still_same}; no exit reported: {quiet}",
        ms()
    );
    println!("tree after the refused signal:\n{}", snapshot(&root).await?.render());

    let signalled = signal_group_if_identity_matches(&genuine, ProcessSignal::Term)?;
    println!(
        "[{:>5} ms] SIGTERM by genuine identity {genuine} -> {signalled:?}",
        ms()
    );
    let exit = loop {
        let report = tokio::time::timeout(WAIT, rx.recv())
            .await
            .context("no exit in time")?
            .context("closed")?;
        println!("[{:>5} ms] {report:?}", ms());
        if let Report::Exited { reason, .. } = report {
            break reason.unwrap_or_default();
        }
    };
    let gone = !Path::new(&format!("/proc/{pid}")).exists();
    println!("[{:>5} ms] /proc/{pid} exists: {}", ms(), !gone);
    let again = signal_group_if_identity_matches(&genuine, ProcessSignal::Term)?;
    println!(
        "[{:>5} ms] SIGTERM by the same identity after reaping -> {again:?}",
        ms()
    );
    println!("tree after the genuine signal:\n{}", snapshot(&root).await?.render());
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;

    if refused != SignalOutcome::IdentityMismatch || !still_same || !quiet {
        bail!("the stale identity was not refused cleanly: {refused:?}, alive={still_same}, quiet={quiet}");
    }
    if signalled != SignalOutcome::Signaled || !exit.contains("signal 15") || !gone {
        bail!("the genuine identity did not end the process: {signalled:?}, exit {exit:?}, gone={gone}");
    }
    if again == SignalOutcome::Signaled {
        bail!("a reaped process was signalled again");
    }
    println!(
        "RESULT: ok — a stale identity for pid {pid} was refused (IdentityMismatch, process untouched); \
         the genuine one was signalled, the process died by SIGTERM and was reaped"
    );
    Ok(())
}
