//! The server's live supervision tree as tests see it (`server status --tree [--json]` of the
//! real binary), the processes it lists, and bounded waits that print the tree and the logs
//! when they fail (tests/server_tree.rs, tests/runner_snapshot.rs).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::e2e::{Env, repo_root};

/// How long each wait lasts before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);
/// Between two polls of the tree (each poll is one CLI call).
pub const POLL: Duration = Duration::from_millis(100);
/// A scripted runner that stays alive: one node whose attempt runs for a minute.
pub const LONG_SCRIPT: &str = "steps=1,work-ms=60000";

// Servers --------------------------------------------------------------------------------------

/// A state directory whose server runs the scripted test runner with `script`.
pub fn scripted(script: &str, extra: &[(&str, &str)]) -> Env {
    let mut vars = vec![
        (
            "PI_WORKFLOWS_RUNNER".to_string(),
            env!("CARGO_BIN_EXE_pi-workflows-test-runner").to_string(),
        ),
        ("PI_WORKFLOWS_TEST_SCRIPT".to_string(), script.to_string()),
    ];
    vars.extend(extra.iter().map(|(name, value)| (name.to_string(), value.to_string())));
    Env::with_vars(vars)
}

pub fn start_server(env: &Env) {
    let out = env.cli(&["server", "start"]);
    env.expect_code(&out, 0, "server start");
}

pub fn package_dist() -> PathBuf {
    repo_root().join("packages/pi-workflows/dist")
}

pub fn package_built() -> bool {
    package_dist().join("resolver-main.js").is_file()
}

/// The resolver (and the Node runner) need the built npm package.
pub fn require_package() {
    assert!(
        package_built(),
        "{} is missing: run `npm --prefix packages/pi-workflows ci && npm --prefix packages/pi-workflows run build` \
         (the resolver is the package's `resolver-main.js`)",
        package_dist().join("resolver-main.js").display()
    );
}

// The tree -------------------------------------------------------------------------------------

/// `server status --tree --json`, or `None` when the server did not answer with a tree.
pub fn try_status(env: &Env) -> Option<Value> {
    let out = env.cli(&["server", "status", "--tree", "--json"]);
    if out.status.code() != Some(0) {
        return None;
    }
    let status: Value = serde_json::from_slice(&out.stdout).ok()?;
    status.get("tree")?;
    Some(status)
}

/// The status object, which must hold a well-formed tree.
pub fn status(env: &Env) -> Value {
    let status = try_status(env).unwrap_or_else(|| panic!("server status --tree --json failed{}", report(env)));
    if let Err(problem) = check_node(&status["tree"], true) {
        panic!("malformed tree: {problem}\n{}", pretty(&status["tree"]));
    }
    status
}

/// The live tree (well-formed).
pub fn tree(env: &Env) -> Value {
    status(env)["tree"].clone()
}

/// A tree read inside a poll: `None` when the server did not answer; a malformed tree fails.
pub fn poll_tree(env: &Env) -> Option<Value> {
    let tree = try_status(env)?["tree"].clone();
    if let Err(problem) = check_node(&tree, true) {
        panic!("malformed tree: {problem}\n{}", pretty(&tree));
    }
    Some(tree)
}

/// The human form, `server status --tree`.
pub fn human_tree(env: &Env) -> String {
    let out = env.cli(&["server", "status", "--tree"]);
    env.expect_code(&out, 0, "server status --tree");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// What a failed wait prints: the tree in both forms, the server log and the database.
pub fn report(env: &Env) -> String {
    let human = env.cli(&["server", "status", "--tree"]);
    let json = env.cli(&["server", "status", "--tree", "--json"]);
    let json_text = serde_json::from_slice::<Value>(&json.stdout)
        .map(|status| status["tree"].to_string())
        .unwrap_or_else(|_| String::from_utf8_lossy(&json.stdout).into_owned());
    format!(
        "\n--- server status --tree (exit {:?}) ---\n{}{}\n--- tree (JSON) ---\n{json_text}{}",
        human.status.code(),
        String::from_utf8_lossy(&human.stdout),
        String::from_utf8_lossy(&human.stderr),
        env.diagnostics()
    )
}

/// Poll `probe` until it yields a value; fail after `WAIT` with the tree and the logs.
pub fn wait_for<T>(env: &Env, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {WAIT:?} waiting until {what}{}", report(env));
        }
        std::thread::sleep(POLL);
    }
}

pub fn wait_for_sql(env: &Env, what: &str, sql: &str) {
    wait_for(env, what, || (env.count(sql) > 0).then_some(()));
}

pub fn id(node: &Value) -> &str {
    node["id"].as_str().unwrap_or_default()
}

pub fn children(node: &Value) -> &[Value] {
    node["children"].as_array().map_or(&[], Vec::as_slice)
}

/// The direct child `name` of `node`.
pub fn child<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
    children(node).iter().find(|child| id(child) == name)
}

/// The node at `path` below the root (e.g. `["resolvers", "resolver"]`).
pub fn at<'a>(tree: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(tree, |node, name| child(node, name))
}

pub fn nodes(node: &Value) -> Vec<&Value> {
    let mut all = vec![node];
    for child in children(node) {
        all.extend(nodes(child));
    }
    all
}

/// The `runner-N` children of `runners`.
pub fn runner_children(tree: &Value) -> Vec<&Value> {
    at(tree, &["runners"])
        .map(children)
        .unwrap_or_default()
        .iter()
        .filter(|child| id(child).starts_with("runner-"))
        .collect()
}

/// `(pid, process group)` of every process a node lists.
pub fn processes(node: &Value) -> Vec<(i32, i32)> {
    node["details"]["processes"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|process| {
                    let number = |key: &str| process[key].as_i64().unwrap_or_default() as i32;
                    (number("pid"), number("processGroup"))
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn restarts(node: &Value) -> u64 {
    node["restarts"].as_u64().expect("restarts")
}

/// The one live process a node lists, once it lists exactly one, it is alive and its exec is
/// done: the tree lists a process from its spawn, and its argv (`/proc/<pid>/cmdline`) is
/// empty until the exec has set it up, which a busy machine lets a test see.
pub fn single_live_process(node: &Value) -> Option<(i32, i32)> {
    match processes(node).as_slice() {
        [(pid, pgid)] if alive(*pid) && !cmdline(*pid).is_empty() => Some((*pid, *pgid)),
        _ => None,
    }
}

/// The documented node shape: every field present with a value of its domain, `details`
/// omitted when empty, workers without children.
pub fn check_node(node: &Value, is_root: bool) -> Result<(), String> {
    let object = node.as_object().ok_or("a node is not an object")?;
    let name = node["id"]
        .as_str()
        .filter(|name| !name.is_empty())
        .ok_or("a node without an id")?;
    let fail = |what: String| Err(format!("node {name:?}: {what}"));
    for key in ["kind", "strategy", "restart", "state", "restarts", "label", "children"] {
        if !object.contains_key(key) {
            return fail(format!("no `{key}` field"));
        }
    }
    if let Some(extra) = object.keys().find(|key| {
        ![
            "id", "kind", "strategy", "restart", "state", "restarts", "label", "details", "children",
        ]
        .contains(&key.as_str())
    }) {
        return fail(format!("unknown field `{extra}`"));
    }
    let kind = node["kind"].as_str().unwrap_or_default();
    match (kind, &node["strategy"]) {
        ("supervisor", Value::String(strategy))
            if ["one_for_one", "one_for_all", "rest_for_one"].contains(&strategy.as_str()) => {}
        ("worker", Value::Null) => {}
        (kind, strategy) => return fail(format!("kind {kind:?} with strategy {strategy}")),
    }
    match (&node["restart"], is_root) {
        (Value::Null, true) => {}
        (Value::String(restart), false) if ["permanent", "transient", "temporary"].contains(&restart.as_str()) => {}
        (restart, _) => return fail(format!("restart {restart} (root: {is_root})")),
    }
    let state = node["state"].as_str().unwrap_or_default();
    if !["running", "stopping", "stopped", "unresponsive"].contains(&state) {
        return fail(format!("state {:?}", node["state"]));
    }
    if node["restarts"].as_u64().is_none() {
        return fail(format!("restarts {}", node["restarts"]));
    }
    match &node["label"] {
        Value::Null => {}
        Value::String(label) if label.chars().count() <= 120 => {}
        label => return fail(format!("label {label}")),
    }
    if let Some(details) = object.get("details") {
        let details = details.as_object().ok_or("details is not an object")?;
        if details.is_empty() {
            return fail("empty details are not omitted".to_string());
        }
        for (key, value) in details {
            match (key.as_str(), value) {
                ("generation" | "epoch", value) if value.as_u64().is_some() => {}
                // A word or two, never a path or a name of the user's.
                ("mode", Value::String(mode))
                    if (1..=32).contains(&mode.len()) && mode.chars().all(|c| c.is_ascii_lowercase() || c == ' ') => {}
                ("processes", Value::Array(list)) if !list.is_empty() => {
                    for process in list {
                        let valid = process.as_object().is_some_and(|process| {
                            process.len() == 2
                                && process.get("pid").and_then(Value::as_i64).is_some_and(|pid| pid > 0)
                                && process
                                    .get("processGroup")
                                    .and_then(Value::as_i64)
                                    .is_some_and(|pgid| pgid > 0)
                        });
                        if !valid {
                            return fail(format!("process entry {process}"));
                        }
                    }
                }
                (key, value) => return fail(format!("details.{key} = {value}")),
            }
        }
    }
    let children = node["children"].as_array().ok_or("children is not a list")?;
    if kind == "worker" && !children.is_empty() {
        return fail("a worker with children".to_string());
    }
    children.iter().try_for_each(|child| check_node(child, false))
}

pub fn assert_node(tree: &Value, path: &[&str], kind: &str, strategy: Option<&str>, restart: &str) {
    let node = at(tree, path).unwrap_or_else(|| panic!("no node {path:?}:\n{}", pretty(tree)));
    assert_eq!(node["kind"], kind, "{path:?}:\n{}", pretty(node));
    assert_eq!(node["strategy"].as_str(), strategy, "{path:?}:\n{}", pretty(node));
    assert_eq!(node["restart"], restart, "{path:?}:\n{}", pretty(node));
    assert_eq!(node["state"], "running", "{path:?}:\n{}", pretty(node));
}

/// The line of the human tree that shows node `name`.
pub fn human_line<'a>(human: &'a str, name: &str) -> Option<&'a str> {
    let head = format!("{name} [");
    human
        .lines()
        .find(|line| line.trim_start_matches(['│', '├', '└', '─', ' ']).starts_with(&head))
}

// Processes ------------------------------------------------------------------------------------

/// `/proc/<pid>/stat` fields after the command name: state (field 3), ppid, pgrp, ...
pub fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split(' ').map(str::to_string).collect())
}

/// A process that still runs (not a zombie).
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|fields| fields[0] != "Z" && fields[0] != "X")
}

/// Its start time in clock ticks after boot (`/proc/<pid>/stat` field 22): with the pid, it
/// names one process, whatever later reuses the pid.
pub fn start_time(pid: i32) -> Option<u64> {
    proc_stat(pid)?.get(19)?.parse().ok()
}

pub fn parent_of(pid: i32) -> Option<i32> {
    proc_stat(pid)?.get(1)?.parse().ok()
}

pub fn group_of(pid: i32) -> Option<i32> {
    proc_stat(pid)?.get(2)?.parse().ok()
}

pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

/// The process that had `start` as its start time still exists (alive or a zombie).
pub fn still_exists(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

pub fn describe(pid: i32) -> String {
    match proc_stat(pid) {
        Some(fields) => format!(
            "pid {pid}: state {} ppid {} pgrp {} start {} `{}`",
            fields[0],
            fields[1],
            fields[2],
            fields.get(19).map_or("?", String::as_str),
            cmdline(pid)
        ),
        None => format!("pid {pid}: gone"),
    }
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| group_of(*pid) == Some(pgid) && alive(*pid))
        .collect()
}

pub fn kill9(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
}

/// A watcher client started in the background (`view`, `runs --watch`), killed on drop.
pub struct Watcher(Child);

impl Watcher {
    pub fn start(env: &Env, args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
            .arg("--state-dir")
            .arg(env.dir())
            .args(args)
            .env("PI_CODING_AGENT_DIR", env.agent_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a watcher");
        Self(child)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
