//! Benchmark: `pi-workflows server start` until ready, and the idle server's memory.
//!
//! `cargo build --release && cargo run --release --example bench_server [-- --starts N]`
//!
//! Figures printed, all measured in this run:
//! - baseline: `pi-workflows --version` (process start and exit, nothing else);
//! - start-to-ready: `server start` on a fresh state directory until it returns (it returns
//!   after the server's ready handshake: socket bound, store open, lease taken);
//! - idle RSS of the running server after a short settle.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const STARTS_DEFAULT: usize = 20;
const SETTLE_MS: u64 = 1_000;

fn main() -> anyhow::Result<()> {
    let starts = parse_starts()?;
    let binary = binary_path()?;
    println!("bench_server: {starts} starts, binary {}", binary.display());

    let baseline = measure(starts, || run_ok(&binary, &["--version"], None))?;
    report("baseline: --version", &baseline);

    let mut ready = Vec::with_capacity(starts);
    let mut rss_kib = Vec::new();
    for index in 0..starts {
        let dir = tempfile::Builder::new().prefix("piwb").tempdir_in("/tmp")?;
        let started = Instant::now();
        run_ok(&binary, &["server", "start"], Some(dir.path()))?;
        ready.push(started.elapsed());
        if index == 0 {
            std::thread::sleep(Duration::from_millis(SETTLE_MS));
            rss_kib.push(server_rss_kib(dir.path())?);
        }
        run_ok(&binary, &["server", "stop"], Some(dir.path()))?;
    }
    report("server start until ready", &ready);
    let p50 = |samples: &[Duration]| percentile(samples, 50).as_secs_f64();
    println!(
        "ratio start-to-ready / baseline (p50) = {:.1}",
        p50(&ready) / p50(&baseline)
    );
    println!(
        "idle server RSS: {} KiB ({:.1} MiB)",
        rss_kib[0],
        rss_kib[0] as f64 / 1024.0
    );
    Ok(())
}

fn parse_starts() -> anyhow::Result<usize> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(STARTS_DEFAULT),
        [flag, value] if flag == "--starts" => Ok(value.parse()?),
        _ => bail!("usage: bench_server [--starts N]"),
    }
}

/// The `pi-workflows` binary next to this example's directory (target/<profile>/).
fn binary_path() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("unexpected example location")?;
    let binary = profile_dir.join("pi-workflows");
    if !binary.exists() {
        bail!("{} is missing; run `cargo build --release` first", binary.display());
    }
    Ok(binary)
}

fn run_ok(binary: &Path, args: &[&str], state_dir: Option<&Path>) -> anyhow::Result<()> {
    let mut command = Command::new(binary);
    if let Some(dir) = state_dir {
        command.arg("--state-dir").arg(dir);
    }
    let output = command.args(args).output()?;
    if !output.status.success() {
        bail!("{args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(())
}

fn measure(count: usize, mut once: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    (0..count)
        .map(|_| {
            let started = Instant::now();
            once()?;
            Ok(started.elapsed())
        })
        .collect()
}

fn percentile(samples: &[Duration], percent: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[(sorted.len() - 1) * percent / 100]
}

fn report(label: &str, samples: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{label:<28} p50 {:>6.1} ms  p90 {:>6.1} ms  max {:>6.1} ms",
        ms(percentile(samples, 50)),
        ms(percentile(samples, 90)),
        ms(percentile(samples, 100))
    );
}

fn server_rss_kib(state_dir: &Path) -> anyhow::Result<u64> {
    let pid = std::fs::read_to_string(state_dir.join("server/server.lock"))?
        .trim()
        .to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("VmRSS value")?.parse()?)
}
