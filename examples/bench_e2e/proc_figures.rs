//! Figures from `/proc`: CPU of the server, its children and the machine, RSS, the idle
//! server, and the `node -e 0` baseline.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use super::percentile;

/// Clock ticks per second of /proc's CPU counters (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;
/// `node -e 0` starts the baseline times, one after another.
const BASELINE_STARTS: usize = 20;
/// How long the start-rate baseline runs `node -e 0` back to back on every core.
const NODE_RATE_SECONDS: u64 = 3;
/// After the load, the wait for the warm pool's demand window to pass (5 s by default).
const IDLE_SETTLE_SECONDS: u64 = 7;
/// The idle CPU figure's span (ticks are 10 ms: a longer span resolves less than 1 ms/s).
const IDLE_SECONDS: u64 = 20;

/// Idle figures: the server's RSS before any run, and its CPU over `IDLE_SECONDS` with no
/// client and no run (after the load; the warm pool shrank back meanwhile), alone and with
/// every process of its session (warm runners, the resolver and their children). Of the RSS,
/// the server binary's own code pages (`link/hot-text.txt` keeps those few).
pub(crate) fn idle(server_pid: i32, fresh_rss_kib: u64, fresh_code_rss_kib: u64) -> anyhow::Result<Value> {
    std::thread::sleep(Duration::from_secs(IDLE_SETTLE_SECONDS));
    let before = server_cpu_ms(server_pid)?;
    let session_before = session_cpu_ms(server_pid)?;
    std::thread::sleep(Duration::from_secs(IDLE_SECONDS));
    let cpu = server_cpu_ms(server_pid)? - before;
    let session_cpu = session_cpu_ms(server_pid)? - session_before;
    Ok(json!({
        "fresh_rss_kib": fresh_rss_kib,
        "rss_kib": rss_kib(server_pid)?,
        "fresh_code_rss_kib": fresh_code_rss_kib,
        "code_rss_kib": code_rss_kib(server_pid)?,
        "cpu_ms_per_s": cpu / IDLE_SECONDS as f64,
        "session_cpu_ms_per_s": session_cpu / IDLE_SECONDS as f64,
    }))
}

/// CPU (ms) of every live process in the server's session (it is the session's leader), each
/// with its reaped children's: a process that ended between two reads is counted in its
/// parent's reaped share, so the difference of two reads is the session's CPU meanwhile.
fn session_cpu_ms(server_pid: i32) -> anyhow::Result<f64> {
    let (mut total, mut leader_found) = (0.0, false);
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        let Some(pid) = name.to_str().filter(|name| name.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        // A process may end meanwhile: it is then counted in its parent's reaped share.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state ppid pgrp session (the 4th) ...
        // utime stime cutime cstime (the 12th to 15th), in ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        if fields.get(3).and_then(|session| session.parse::<i32>().ok()) == Some(server_pid) {
            let ticks: f64 = fields
                .get(11..15)
                .unwrap_or_default()
                .iter()
                .filter_map(|value| value.parse::<f64>().ok())
                .sum();
            total += ticks * 1e3 / USER_HZ;
            leader_found |= pid == server_pid.to_string();
        }
    }
    // `server start` detaches the server into a session of its own; else this sum means nothing.
    ensure!(leader_found, "the server {server_pid} does not lead its own session");
    Ok(total)
}

/// `node -e 0`: wall per start, and CPU per start from the children's rusage.
pub(crate) fn node_baseline() -> anyhow::Result<Value> {
    let node = std::env::var("PI_WORKFLOWS_NODE").unwrap_or_else(|_| "node".to_string());
    let cpu_before = children_cpu_ms();
    let mut walls = Vec::new();
    for _ in 0..BASELINE_STARTS {
        let started = Instant::now();
        let status = Command::new(&node)
            .args(["-e", "0"])
            .status()
            .context("run node -e 0")?;
        if !status.success() {
            bail!("node -e 0 failed");
        }
        walls.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let cpu = (children_cpu_ms() - cpu_before) / BASELINE_STARTS as f64;
    Ok(json!({
        "node_e_0_wall_p50_ms": percentile(&walls, 0.5),
        "node_e_0_cpu_ms": cpu,
        "node_starts_per_s": node_start_rate(&node)?,
    }))
}

/// `node -e 0` back to back in one loop per core for `NODE_RATE_SECONDS`: starts per second,
/// the ceiling of a process per run on this machine (before any run's own work).
fn node_start_rate(node: &str) -> anyhow::Result<f64> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let started = Instant::now();
    let span = Duration::from_secs(NODE_RATE_SECONDS);
    let loops: Vec<_> = (0..cores)
        .map(|_| {
            let node = node.to_string();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut starts = 0;
                while started.elapsed() < span {
                    Command::new(&node)
                        .args(["-e", "0"])
                        .status()
                        .context("run node -e 0")?;
                    starts += 1;
                }
                Ok(starts)
            })
        })
        .collect();
    let mut starts = 0;
    for one in loops {
        starts += one.join().map_err(|_| anyhow::anyhow!("a start loop panicked"))??;
    }
    Ok(starts as f64 / started.elapsed().as_secs_f64())
}

/// Busy CPU of the whole machine (ms, every core): the non-idle jiffies of /proc/stat.
pub(crate) fn machine_cpu_ms() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat")?;
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let busy: f64 = fields
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != 3 && *index != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(busy * 1e3 / USER_HZ)
}

/// CPU of this process's waited-for children (ms): cutime + cstime of /proc/self/stat.
fn children_cpu_ms() -> f64 {
    proc_stat_ms("self", &[13, 14]).unwrap_or(f64::NAN)
}

/// The server's utime + stime (ms), from /proc/<pid>/stat.
pub(crate) fn server_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[11, 12])
}

/// The server's stime alone (ms): its CPU in the kernel (syscalls, page faults, switches).
pub(crate) fn server_kernel_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[12])
}

/// CPU of the server's reaped children (ms): its runner and resolver processes, counted when
/// they end (cutime + cstime of /proc/<pid>/stat).
pub(crate) fn server_children_cpu_ms(pid: i32) -> anyhow::Result<f64> {
    proc_stat_ms(&pid.to_string(), &[13, 14])
}

/// Tick counters of /proc/<pid>/stat, counted from the field after the command's `)` (0 is
/// the state), summed in ms.
fn proc_stat_ms(pid: &str, indexes: &[usize]) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("stat")?.1.split_whitespace().collect();
    let mut ticks = 0.0;
    for &index in indexes {
        ticks += fields.get(index).context("a /proc stat field")?.parse::<f64>()?;
    }
    Ok(ticks * 1e3 / USER_HZ)
}

pub(crate) fn rss_kib(pid: i32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("VmRSS value")?.parse()?)
}

/// The resident part of the server binary's executable mappings (its code), from smaps.
pub(crate) fn code_rss_kib(pid: i32) -> anyhow::Result<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut in_code = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("Rss:") if in_code => kib += fields.next().context("an Rss value")?.parse::<u64>()?,
            // A mapping's header: address range, permissions, offset, device, inode, path.
            Some(range) if range.contains('-') && !range.ends_with(':') => {
                let executable = fields.next().is_some_and(|perms| perms.contains('x'));
                in_code = executable && fields.nth(3) == Some(exe.as_ref());
            }
            _ => {}
        }
    }
    Ok(kib)
}
