//! An OS process child that never proves it is ready is killed at its handshake deadline: the
//! actor fails, the supervisor sees an abnormal exit, and the process is gone from /proc.
//!
//! Run: `cargo run --example supervise_ready_deadline`

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ractor::{Actor, ActorRef};
use supervisors::process::{ProcessSpec, StartIdentity};
use supervisors::{
    ChildSpec, ProcessActor, ProcessConfig, Readiness, Report, Restart, Strategy, Supervisor, SupervisorMsg,
    SupervisorSpec, TreeSnapshot,
};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_millis(500);

async fn snapshot(root: &ActorRef<SupervisorMsg>) -> anyhow::Result<TreeSnapshot> {
    match root.call(SupervisorMsg::Snapshot, Some(WAIT)).await? {
        ractor::rpc::CallResult::Success(tree) => Ok(tree),
        _ => bail!("snapshot timed out"),
    }
}

fn describe_pid(pid: i32) -> String {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => format!(
            "/proc/{pid} exists: {}",
            String::from_utf8_lossy(&cmdline).replace('\0', " ").trim()
        ),
        Err(_) => format!("/proc/{pid} does not exist"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let (tx, mut rx) = mpsc::channel(256);
    let started: Arc<Mutex<Option<StartIdentity>>> = Arc::default();
    let record = Arc::clone(&started);
    // `sleep` never sends a ready handshake, and nobody sends `ProcessMsg::Ready` for it.
    let config = ProcessConfig::new(
        || Ok((ProcessSpec::new("sleep").arg("60"), None)),
        Readiness::Message { deadline: DEADLINE },
    )
    .on_started(move |identity: &StartIdentity| {
        *record.lock().expect("lock") = Some(identity.clone());
    });
    let child = ChildSpec::worker("handshake", Restart::Temporary, move || (ProcessActor, config.clone()))
        .with_label(format!("ready deadline {} ms", DEADLINE.as_millis()));
    let spec = SupervisorSpec::new("procs", Strategy::OneForOne)
        .with_child(child)
        .with_observer(tx);
    let (root, handle) = Actor::spawn(None, Supervisor, spec).await?;

    let identity = started
        .lock()
        .expect("lock")
        .clone()
        .context("on_started was not called")?;
    let pid = identity.pid;
    println!("tree at start:\n{}", snapshot(&root).await?.render());
    println!(
        "[{:>5} ms] started pid {pid} (identity {identity})",
        t0.elapsed().as_millis()
    );
    println!("[{:>5} ms] {}", t0.elapsed().as_millis(), describe_pid(pid));
    let existed = Path::new(&format!("/proc/{pid}")).exists();

    let exit = loop {
        let report = tokio::time::timeout(WAIT, rx.recv())
            .await
            .context("no exit in time")?
            .context("closed")?;
        println!("[{:>5} ms] {report:?}", t0.elapsed().as_millis());
        if let Report::Exited { abnormal, reason, .. } = report {
            break (abnormal, reason.unwrap_or_default());
        }
    };
    let elapsed = t0.elapsed();
    let gone = !Path::new(&format!("/proc/{pid}")).exists();
    println!("[{:>5} ms] {}", elapsed.as_millis(), describe_pid(pid));
    println!(
        "tree after the deadline (a temporary child is removed):\n{}",
        snapshot(&root).await?.render()
    );
    root.stop_and_wait(None, Some(WAIT)).await?;
    handle.await?;

    if !existed || !exit.0 || !exit.1.contains("handshake deadline") {
        bail!("expected an abnormal exit for the missed handshake, got {exit:?}");
    }
    if elapsed < DEADLINE {
        bail!("killed before the deadline ({elapsed:?})");
    }
    if !gone {
        bail!("process {pid} still exists after its missed deadline");
    }
    println!(
        "RESULT: ok — pid {pid} never became ready, was killed at its {} ms handshake deadline \
         (actor failed after {} ms) and /proc/{pid} is gone",
        DEADLINE.as_millis(),
        elapsed.as_millis()
    );
    Ok(())
}
