//! The real server's supervision tree under faults: a server on a temporary state directory
//! with a long-running run (Node runner), then a SIGKILL of its warm source resolver and of
//! the run's runner process, each by the pid the tree lists. Expected: the `resolver` child
//! (permanent) is restarted (restarts + 1, a new pid); the `runner-N` child (temporary)
//! leaves the tree and its run is parked for review; a new `run start` then completes. The
//! server is stopped at the end, also on failure.
//!
//! Run: `cargo build && npm --prefix packages/pi-workflows run build &&
//!       cargo run --example supervise_server_tree`
//! (it runs the `pi-workflows` binary next to this example's directory, in target/<profile>/;
//! no network is needed).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// How long each expected outcome may take.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// One node that holds its runner for ten minutes (killed long before).
const HOLD_WORKFLOW: &str = r#"import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "hold",
  startAt: "hold",
  nodes: {
    hold: compute({ title: "Hold the runner", run: () => new Promise((done) => setTimeout(() => done({ held: true }), 600_000)) }),
    after: compute({ run: () => ({ done: true }) }),
  },
  edges: [{ from: "hold", to: "after" }],
});
"#;

/// Two quick compute nodes: the run after the faults.
const QUICK_WORKFLOW: &str = r#"import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "quick",
  startAt: "first",
  nodes: {
    first: compute({ run: () => ({ n: 1 }) }),
    second: compute({ run: ({ outputs }) => ({ n: (outputs.first as { n: number }).n + 1 }) }),
  },
  edges: [{ from: "first", to: "second" }],
});
"#;

fn main() -> ExitCode {
    match scenario() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("RESULT: FAILED — {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The server of one state directory; stopped when dropped.
struct Server {
    exe: PathBuf,
    state: PathBuf,
    project: PathBuf,
    agent_dir: PathBuf,
}

impl Server {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.exe);
        command
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(&self.project)
            // The real Node runner and the package found next to the binary.
            .env_remove("PI_WORKFLOWS_RUNNER")
            .env_remove("PI_WORKFLOWS_TEST_SCRIPT")
            .env("PI_CODING_AGENT_DIR", &self.agent_dir)
            .stdin(Stdio::null());
        command
    }

    /// Run a CLI command to its end, within `WAIT`.
    fn cli(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start `pi-workflows {}`", args.join(" ")))?;
        let deadline = Instant::now() + WAIT;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`pi-workflows {}` did not end within {WAIT:?}", args.join(" "));
            }
            std::thread::sleep(POLL);
        }
        Ok(child.wait_with_output()?)
    }

    fn cli_ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.cli(args)?;
        if !out.status.success() {
            bail!(
                "`pi-workflows {}` exited {:?}: {}{}",
                args.join(" "),
                out.status.code(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The live tree, or `None` when the server did not answer with one.
    fn tree(&self) -> Option<Value> {
        let out = self.cli(&["server", "status", "--tree", "--json"]).ok()?;
        let status: Value = serde_json::from_slice(&out.stdout).ok()?;
        status.get("tree").cloned()
    }

    fn human_tree(&self) -> String {
        match self.cli(&["server", "status", "--tree"]) {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => format!("(no tree: {err:#})\n"),
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.state.join("logs/server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Poll `probe` until it yields a value; the error shows the tree and the server log.
    fn wait_for<T>(&self, what: &str, mut probe: impl FnMut(&Self) -> Option<T>) -> anyhow::Result<T> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(value) = probe(self) {
                return Ok(value);
            }
            if Instant::now() > deadline {
                bail!(
                    "{what}: not seen within {WAIT:?}\n--- tree ---\n{}--- server.log (tail) ---\n{}",
                    self.human_tree(),
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// `runs.status`, `runs.status_detail` and `run_queue.status` of a run (read-only).
    fn run_state(&self, run_id: &str) -> anyhow::Result<(String, String, String)> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let db = rusqlite::Connection::open_with_flags(self.state.join("state.sqlite"), flags)?;
        Ok(db.query_row(
            "SELECT r.status, coalesce(r.status_detail, '-'), q.status FROM runs r JOIN run_queue q USING (run_id) \
             WHERE r.run_id = ?1",
            [run_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.cli(&["server", "stop"]);
    }
}

fn children(node: &Value) -> &[Value] {
    node["children"].as_array().map_or(&[], Vec::as_slice)
}

fn at<'a>(tree: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(tree, |node, name| {
        children(node).iter().find(|child| child["id"] == *name)
    })
}

fn runner_children(tree: &Value) -> Vec<&Value> {
    at(tree, &["runners"])
        .map(children)
        .unwrap_or_default()
        .iter()
        .filter(|child| child["id"].as_str().is_some_and(|id| id.starts_with("runner-")))
        .collect()
}

/// Every pid the tree lists, at any depth.
fn listed_pids(node: &Value) -> Vec<i32> {
    let mut pids: Vec<i32> = node["details"]["processes"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|process| i32::try_from(process["pid"].as_i64()?).ok())
                .collect()
        })
        .unwrap_or_default();
    for child in children(node) {
        pids.extend(listed_pids(child));
    }
    pids
}

/// The one pid a node lists, if it lists exactly one live process.
fn live_pid(node: &Value) -> Option<i32> {
    match node["details"]["processes"].as_array().map(Vec::as_slice) {
        Some([process]) => {
            let pid = i32::try_from(process["pid"].as_i64()?).ok()?;
            alive(pid).then_some(pid)
        }
        _ => None,
    }
}

fn restarts(node: &Value) -> u64 {
    node["restarts"].as_u64().unwrap_or_default()
}

/// `/proc/<pid>/stat` fields after the command name (state first).
fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split(' ').map(str::to_string).collect())
}

fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|fields| fields[0] != "Z" && fields[0] != "X")
}

/// Start time in clock ticks after boot (field 22): with the pid it names one process.
fn start_time(pid: i32) -> Option<u64> {
    proc_stat(pid)?.get(19)?.parse().ok()
}

fn kill9(pid: i32) -> anyhow::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .with_context(|| format!("SIGKILL {pid}"))
}

fn locate_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().and_then(Path::parent).context("examples dir")?;
    let binary = dir.join("pi-workflows");
    if !binary.is_file() {
        bail!(
            "{} is missing; run `cargo build` (or `cargo build --release` for --release) first",
            binary.display()
        );
    }
    Ok(binary)
}

fn require_package() -> anyhow::Result<()> {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("packages/pi-workflows/dist");
    for entry in ["resolver-main.js", "runner-main.js"] {
        if !dist.join(entry).is_file() && std::env::var_os("PI_WORKFLOWS_PACKAGE_DIR").is_none() {
            bail!(
                "{} is missing; run `npm --prefix packages/pi-workflows ci && npm --prefix packages/pi-workflows run build`",
                dist.join(entry).display()
            );
        }
    }
    Ok(())
}

fn scenario() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis();
    let exe = locate_binary()?;
    require_package()?;
    // Short paths under /tmp: the socket path holds at most 107 bytes.
    let scratch = tempfile::Builder::new().prefix("piwst").tempdir_in("/tmp")?;
    let project = scratch.path().join("project");
    let agent_dir = scratch.path().join("agent");
    std::fs::create_dir_all(&project)?;
    std::fs::create_dir_all(&agent_dir)?;
    let hold = project.join("hold.workflow.ts");
    let quick = project.join("quick.workflow.ts");
    std::fs::write(&hold, HOLD_WORKFLOW)?;
    std::fs::write(&quick, QUICK_WORKFLOW)?;
    let server = Server {
        exe,
        state: scratch.path().join("state"),
        project,
        agent_dir,
    };
    println!("supervise_server_tree: {}", server.exe.display());

    print!("[{:>5} ms] {}", ms(), server.cli_ok(&["server", "start"])?);
    let answer = server.cli_ok(&["run", "start", &hold.to_string_lossy(), "--json"])?;
    let run_id = serde_json::from_str::<Value>(answer.trim())?["runId"]
        .as_str()
        .context("run start printed no runId")?
        .to_string();
    println!(
        "[{:>5} ms] started the long-running run (one node holds its runner)",
        ms()
    );

    let (resolver_pid, resolver_restarts, runner_id, runner_pid) =
        server.wait_for("the resolver and the run's runner with live processes", |server| {
            let tree = server.tree()?;
            let resolver = at(&tree, &["resolvers", "resolver"])?;
            let runner = *runner_children(&tree).first()?;
            Some((
                live_pid(resolver)?,
                restarts(resolver),
                runner["id"].as_str()?.to_string(),
                live_pid(runner)?,
            ))
        })?;
    let resolver_start = start_time(resolver_pid).context("resolver start time")?;
    let runner_start = start_time(runner_pid).context("runner start time")?;
    println!("[{:>5} ms] tree before the faults:\n{}", ms(), server.human_tree());

    kill9(resolver_pid)?;
    println!(
        "[{:>5} ms] SIGKILL resolver pid {resolver_pid} (restarts {resolver_restarts})",
        ms()
    );
    kill9(runner_pid)?;
    println!("[{:>5} ms] SIGKILL {runner_id} pid {runner_pid}", ms());

    let (new_pid, new_restarts) = server.wait_for("the resolver restarted with a new live pid", |server| {
        let tree = server.tree()?;
        let resolver = at(&tree, &["resolvers", "resolver"])?;
        let pid = live_pid(resolver)?;
        (resolver["state"] == "running" && restarts(resolver) > resolver_restarts && pid != resolver_pid)
            .then(|| (pid, restarts(resolver)))
    })?;
    println!(
        "[{:>5} ms] resolver restarted: pid {resolver_pid} -> {new_pid}, restarts {resolver_restarts} -> {new_restarts}",
        ms()
    );
    let new_start = start_time(new_pid).context("new resolver start time")?;
    if new_restarts != resolver_restarts + 1 {
        bail!(
            "one SIGKILL of the resolver counted {} restarts",
            new_restarts - resolver_restarts
        );
    }
    server.wait_for("the killed runner's child gone from the tree", |server| {
        let tree = server.tree()?;
        let listed = runner_children(&tree)
            .iter()
            .any(|runner| runner["id"] == runner_id.as_str() || live_pid(runner) == Some(runner_pid));
        (!listed).then_some(())
    })?;
    println!(
        "[{:>5} ms] {runner_id} left the tree (temporary: never restarted)",
        ms()
    );
    let (status, detail, queue) = server.wait_for("the killed runner's run parked", |server| {
        let state = server.run_state(&run_id).ok()?;
        (state.2 == "parked").then_some(state)
    })?;
    println!(
        "[{:>5} ms] its run: status {status}, queue {queue}, park reason {detail}",
        ms()
    );
    server.wait_for("both killed processes reaped", |_| {
        (start_time(resolver_pid) != Some(resolver_start) && start_time(runner_pid) != Some(runner_start)).then_some(())
    })?;
    println!("[{:>5} ms] both killed processes are reaped", ms());
    println!("[{:>5} ms] tree after the faults:\n{}", ms(), server.human_tree());

    let began = Instant::now();
    let out = server.cli(&["run", "start", &quick.to_string_lossy(), "--follow", "--json"])?;
    if !out.status.success() {
        bail!(
            "`run start quick --follow` after the faults exited {:?}: {}{}\n--- tree ---\n{}--- server.log (tail) ---\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            server.human_tree(),
            server.log_tail()
        );
    }
    println!(
        "[{:>5} ms] a new run start completed (exit 0 with --follow) in {} ms",
        ms(),
        began.elapsed().as_millis()
    );

    // Every process the tree lists now (the restarted resolver, the refilled pool) must be
    // gone after the stop: the server stops and reaps them (a zombie counts as a survivor).
    let tree = server.tree().context("no tree before the stop")?;
    let mut listed = vec![(new_pid, new_start)];
    listed.extend(
        listed_pids(&tree)
            .into_iter()
            .filter_map(|pid| Some((pid, start_time(pid)?))),
    );
    listed.sort_unstable();
    listed.dedup();
    server.cli_ok(&["server", "stop"])?;
    let survivors: Vec<i32> = listed
        .iter()
        .filter(|(pid, start)| start_time(*pid) == Some(*start))
        .map(|(pid, _)| *pid)
        .collect();
    if !survivors.is_empty() {
        bail!("processes the tree listed outlived `server stop`: {survivors:?}");
    }
    println!(
        "[{:>5} ms] server stopped; none of the {} processes the tree listed survived",
        ms(),
        listed.len()
    );
    println!(
        "RESULT: ok — SIGKILL of the resolver: restarted (restarts {resolver_restarts} -> {new_restarts}, pid \
         {resolver_pid} -> {new_pid}); SIGKILL of {runner_id}: its child left the tree and the run parked \
         ({detail}); the next run start completed"
    );
    Ok(())
}
