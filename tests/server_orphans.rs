//! Escaped processes of a run: detached children that left the runner's process group are
//! reparented to the server (a subreaper) when the runner ends; the server stops the ones
//! that carry the runner's mark and reaps every orphan, so none keeps running and none
//! stays a zombie.

mod common;

use std::time::{Duration, Instant};

use common::e2e::Env;

const WAIT: Duration = Duration::from_secs(30);

/// The process is gone from /proc: not running and not a zombie either (it was reaped).
fn reaped(pid: i64) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn detached_children_of_a_finished_run_are_stopped_and_reaped() {
    let env = Env::new();
    let run_id = env.start_fixture("escape-sleeps", None);
    env.wait_until("the run completed and its runner is gone", || {
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"
        )) == 1
    });
    env.wait_runner_gone(&run_id);
    let output = env.node_output(&run_id, "escape");
    let pids: Vec<i64> = output["pids"]
        .as_array()
        .expect("pids")
        .iter()
        .filter_map(serde_json::Value::as_i64)
        .collect();
    assert_eq!(pids.len(), 50, "{output}");
    let deadline = Instant::now() + WAIT;
    loop {
        let left: Vec<i64> = pids.iter().copied().filter(|pid| !reaped(*pid)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of the detached sleeps are still running or zombies: {left:?}\n{}",
            left.len(),
            env.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    assert!(log.contains("escaped a runner's process group"), "{log}");
    // The server itself leaves no zombie child behind either. One may exist for a moment —
    // a child of the server's own (the snapshot build's helper, a warm runner) that just
    // exited and is being reaped by its owner — so this waits for them to go.
    let server = env.server_pid();
    let deadline = Instant::now() + ZOMBIE_REAPED_MAX;
    loop {
        let zombies = zombie_children_of(server);
        if zombies.is_empty() {
            break;
        }
        let named: Vec<String> = zombies
            .iter()
            .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
            .collect();
        assert!(Instant::now() < deadline, "zombie children of the server: {named:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long a child of the server may stay a zombie before it counts as never reaped.
const ZOMBIE_REAPED_MAX: Duration = Duration::from_secs(5);

fn zombie_children_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit(')').next().unwrap_or_default().to_string();
            let fields: Vec<&str> = after.split_ascii_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(1).and_then(|ppid| ppid.parse::<i32>().ok()) == Some(parent)
        })
        .collect()
}

/// Found by `examples/torture.rs` (seed 23, point 802): a shell step's command that its runner
/// had started but not yet registered when the server was SIGKILLed outlived startup
/// recovery, which stops only the stale runner's own group and the registered groups. Its
/// manual effect was then `ambiguous` while the command still ran: it applied after an
/// operator's review had found nothing and chosen a retry, so the effect applied twice.
/// Recovery now also stops the groups of the stale runner's children.
#[test]
fn an_unregistered_child_of_a_runner_is_stopped_by_startup_recovery() {
    let env = Env::new();
    let pid_file = env.dir().join("child.pid");
    let input = serde_json::json!({ "pidFile": pid_file }).to_string();
    let run_id = env.start_fixture("unregistered-child", Some(&input));
    env.wait_until("the runner started its child", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|text| !text.trim().is_empty())
    });
    let child: i64 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let server = env.server_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
    env.wait_until("the killed server is gone", || {
        reaped(i64::from(server)) || zombie(i64::from(server))
    });
    // The child still runs: nothing but the runner knows it.
    assert!(!reaped(child) && !zombie(child), "the child died with the server");
    let start = env.cli(&["server", "start"]);
    env.expect_code(&start, 0, "server start");
    env.wait_until("startup recovery stopped the stale runner's unregistered child", || {
        reaped(child) || zombie(child)
    });
    env.expect_code(&env.cli(&["run", "cancel", &run_id]), 0, "run cancel");
}

/// A process that exited and waits for its parent to reap it.
fn zombie(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}
