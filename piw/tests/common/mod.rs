//! The piw test harness: a real `pi-workflows` server on a short temporary state directory
//! (started by the CLI, stopped by a drop guard), the real `piw` binary, and tmux for the
//! interactive screen. Copied in small from the root crate's tests/common: piw's tests
//! never open the database either; they read state through the CLI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a test waits for one outcome before failing (a bound, not a timing assertion).
pub const WAIT: Duration = Duration::from_secs(60);
pub const POLL: Duration = Duration::from_millis(50);

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/debug` of this test binary (`target/debug/deps/<test>`).
fn binaries_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/debug").to_path_buf()
}

static BUILD_SERVER: Once = Once::new();

/// The server binary, built once per test process (the root package is not a dependency
/// of piw, so `cargo test -p piw` alone would not build it).
pub fn server_bin() -> PathBuf {
    BUILD_SERVER.call_once(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--locked", "-p", "pi-workflows", "--bin", "pi-workflows"])
            .args(["--bin", "pi-workflows-test-runner"])
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of pi-workflows failed");
    });
    binaries_dir().join("pi-workflows")
}

/// The scripted runner child of the root crate (`PI_WORKFLOWS_TEST_SCRIPT`), built with the
/// server.
pub fn test_runner_bin() -> PathBuf {
    server_bin();
    binaries_dir().join("pi-workflows-test-runner")
}

pub fn piw_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_piw"))
}

pub fn example(name: &str) -> String {
    let path = workspace_root()
        .join("examples/workflows")
        .join(format!("{name}.workflow.ts"));
    path.display().to_string()
}

/// A fixture of the root crate's tests, or one of piw's own.
pub fn fixture(name: &str) -> String {
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.workflow.ts"));
    let path = if own.exists() {
        own
    } else {
        workspace_root().join(format!("tests/fixtures/workflows/{name}.workflow.ts"))
    };
    path.display().to_string()
}

pub fn short_temp_dir(prefix: &str) -> tempfile::TempDir {
    // Socket paths must stay within 107 bytes: short names directly under /tmp.
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// One state directory and the server the CLI starts for it.
pub struct Env {
    pub state: tempfile::TempDir,
    /// `PI_CODING_AGENT_DIR`: keeps the user's global workflows out.
    pub agent: tempfile::TempDir,
    /// `XDG_CONFIG_HOME` of piw: keeps the user's piw config out.
    pub config: tempfile::TempDir,
    /// Scratch space of the workflows (release notes).
    pub scratch: tempfile::TempDir,
    /// The scripted test runner's script, instead of the Node runner (`with_test_runner`).
    runner_script: Option<String>,
}

impl Env {
    pub fn new() -> Self {
        Self {
            state: short_temp_dir("piwt"),
            agent: short_temp_dir("piwa"),
            config: short_temp_dir("piwc"),
            scratch: short_temp_dir("piws"),
            runner_script: None,
        }
    }

    /// The server runs workflows with the scripted test runner (`script`: its
    /// `PI_WORKFLOWS_TEST_SCRIPT`), e.g. for an agent step that waits for a submission.
    pub fn with_test_runner(script: &str) -> Self {
        let mut env = Self::new();
        env.runner_script = Some(script.to_string());
        env
    }

    pub fn socket(&self) -> PathBuf {
        self.dir().join("server/server.sock")
    }

    pub fn dir(&self) -> &Path {
        self.state.path()
    }

    /// `pi-workflows --state-dir D <args>` with the default (Node) runner.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut command = Command::new(server_bin());
        command
            .arg("--state-dir")
            .arg(self.dir())
            .args(args)
            .current_dir(workspace_root())
            .env_remove("PI_WORKFLOWS_RUNNER")
            .env_remove("PI_WORKFLOWS_TEST_SCRIPT")
            .env("PI_CODING_AGENT_DIR", self.agent.path());
        if let Some(script) = &self.runner_script {
            command
                .env("PI_WORKFLOWS_RUNNER", test_runner_bin())
                .env("PI_WORKFLOWS_TEST_SCRIPT", script);
        }
        command.output().expect("run pi-workflows")
    }

    /// `run start <workflow> [--input-json INPUT] --json`: the new run's ID.
    pub fn start(&self, workflow: &str, input: Option<&str>) -> String {
        let mut args = vec!["run", "start", workflow];
        if let Some(input) = input {
            args.extend(["--input-json", input]);
        }
        args.push("--json");
        let out = self.cli(&args);
        expect_success(&out, "run start");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        let value: Value = serde_json::from_str(line).expect("run start --json");
        value["runId"].as_str().expect("runId").to_string()
    }

    /// The `piw` command for this state directory (config isolated, server binary named).
    pub fn piw(&self) -> Command {
        let mut command = Command::new(piw_bin());
        command
            .arg("--state-dir")
            .arg(self.dir())
            .env("PI_WORKFLOWS_BIN", server_bin())
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("PI_CODING_AGENT_DIR", self.agent.path())
            .env_remove("PIW_CONFIG_PATH");
        command
    }

    /// `piw <runId> --once`.
    pub fn once(&self, run_id: &str) -> Output {
        self.piw().args([run_id, "--once"]).output().expect("run piw")
    }

    /// Poll `piw --once` until its frame satisfies `check`; the last frame.
    pub fn once_until(&self, run_id: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let last = std::cell::RefCell::new(String::new());
        let check_frame = || {
            let out = self.once(run_id);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let done = out.status.success() && check(&text);
            *last.borrow_mut() = text;
            done
        };
        wait_until(what, check_frame, || last.borrow().clone());
        last.into_inner()
    }

    pub fn server_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.dir().join("server/server.lock")).expect("server.lock");
        text.split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .expect("pid")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.cli(&["server", "stop"]);
    }
}

pub fn expect_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({:?})\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Poll `check` until it holds; on timeout fail with `detail()`.
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool, detail: impl Fn() -> String) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}; last seen:\n{}",
            detail()
        );
        std::thread::sleep(POLL);
    }
}

/// A tmux server of its own (its own socket, in a temp dir of its own), killed on drop: the
/// test never touches the user's tmux, and leaves no socket file behind.
pub struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Run `command` (with `env`) in a detached 120×40 session.
    pub fn start(name: &str, command: &Command) -> Self {
        // Short (a socket's path is bounded): /tmp/piwtmXXXXXX/<name>.
        let dir = tempfile::Builder::new()
            .prefix("piwtm")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let socket = dir.path().join(name).to_string_lossy().into_owned();
        let mut line = vec!["env".to_string()];
        for (key, value) in command.get_envs() {
            if let Some(value) = value {
                line.push(format!("{}={}", key.to_string_lossy(), value.to_string_lossy()));
            }
        }
        line.push(command.get_program().to_string_lossy().into_owned());
        line.extend(command.get_args().map(|arg| arg.to_string_lossy().into_owned()));
        let status = Command::new("tmux")
            .args([
                "-S",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "40",
                "-s",
                "piw",
            ])
            .args(line)
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        Self { socket, _dir: dir }
    }

    pub fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["-S", &self.socket, "capture-pane", "-p", "-t", "piw"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Send tmux key names (`Enter`, `Tab`, `j`, ...).
    pub fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-S", &self.socket, "send-keys", "-t", "piw"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Wait until the screen satisfies `check`; the screen.
    pub fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        wait_until(
            what,
            || {
                screen = self.capture();
                check(&screen)
            },
            || self.capture(),
        );
        screen
    }

    /// The first line of the screen (the header: run, status, connection).
    pub fn header(&self) -> String {
        self.capture().lines().next().unwrap_or_default().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // Before the dir (a field) is removed.
        let _ = Command::new("tmux").args(["-S", &self.socket, "kill-server"]).status();
    }
}
