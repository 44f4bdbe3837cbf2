//! The end-to-end harness: one state directory per test with the server the CLI starts for
//! it (stopped by a drop guard), CLI calls with the real Node runner, database reads, and
//! failure diagnostics (tails of the server and runner logs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::query_db;

/// How long a test waits for one outcome before failing.
pub const WAIT: Duration = Duration::from_secs(30);
pub const POLL: Duration = Duration::from_millis(25);

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn example(name: &str) -> String {
    repo_root()
        .join("examples/workflows")
        .join(format!("{name}.workflow.ts"))
        .display()
        .to_string()
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root()
        .join("tests/fixtures/workflows")
        .join(format!("{name}.workflow.ts"))
}

pub fn short_temp_dir(prefix: &str) -> tempfile::TempDir {
    // Socket paths must stay within 107 bytes: short names directly under /tmp.
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// One state directory and the server the CLI starts for it on demand.
pub struct Env {
    pub state: tempfile::TempDir,
    /// Extra environment of every CLI call (and so of the server it starts).
    pub vars: Vec<(String, String)>,
    /// `PI_CODING_AGENT_DIR` unless `vars` sets it: keeps global workflows of the user out.
    pub agent_dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self::with_vars(Vec::new())
    }

    pub fn with_vars(vars: Vec<(String, String)>) -> Self {
        Self {
            state: short_temp_dir("piwx"),
            vars,
            agent_dir: short_temp_dir("piwa"),
        }
    }

    pub fn dir(&self) -> &Path {
        self.state.path()
    }

    /// Run `pi-workflows --state-dir D <args>` in `cwd` with the default (Node) runner.
    pub fn cli_in(&self, cwd: &Path, args: &[&str]) -> Output {
        self.command_in(cwd, args).output().expect("run pi-workflows")
    }

    /// The command `cli_in` runs, to spawn it instead (a CLI call that runs alongside).
    pub fn command_in(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
        command
            .arg("--state-dir")
            .arg(self.dir())
            .args(args)
            .current_dir(cwd)
            .env_remove("PI_WORKFLOWS_RUNNER")
            .env_remove("PI_WORKFLOWS_TEST_SCRIPT")
            .env_remove("PI_WORKFLOWS_PACKAGE_DIR")
            .env("PI_CODING_AGENT_DIR", self.agent_dir.path())
            // Never the user's own channels (a real bot): a test names its configuration.
            .env("PI_WORKFLOWS_CONFIG_DIR", self.agent_dir.path().join("config"));
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_in(&repo_root(), args)
    }

    /// `run start <fixture> [--input-json INPUT] --json`, which must succeed: the run's ID.
    pub fn start_fixture(&self, name: &str, input: Option<&str>) -> String {
        let path = fixture(name);
        let mut args = vec!["run", "start", path.to_str().expect("path")];
        if let Some(input) = input {
            args.extend(["--input-json", input]);
        }
        args.push("--json");
        let out = self.cli(&args);
        self.expect_code(&out, 0, &format!("run start {name}"));
        run_id_of(&out)
    }

    pub fn count(&self, sql: &str) -> i64 {
        query_db(self.dir(), sql)
    }

    pub fn text(&self, sql: &str) -> String {
        query_db(self.dir(), sql)
    }

    pub fn texts(&self, sql: &str) -> Vec<String> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let db = rusqlite::Connection::open_with_flags(self.dir().join("state.sqlite"), flags).expect("db");
        let mut statement = db.prepare(sql).expect(sql);
        statement
            .query_map([], |row| row.get::<_, String>(0))
            .expect(sql)
            .collect::<Result<_, _>>()
            .expect(sql)
    }

    /// A stored JSON blob (e.g. a node output) by its hash (`sha256:` prefix optional).
    pub fn blob_json(&self, hash: &str) -> Value {
        let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let db = rusqlite::Connection::open_with_flags(self.dir().join("state.sqlite"), flags).expect("db");
        let bytes: Vec<u8> = db
            .query_row("SELECT content FROM blobs WHERE blob_hash = ?1", [hash], |row| {
                row.get(0)
            })
            .expect("blob");
        serde_json::from_slice(&bytes).expect("JSON blob")
    }

    /// The output of the run's completed attempt of `node_path`: kept in the attempt's row
    /// when small, else a blob.
    pub fn node_output(&self, run_id: &str, node_path: &str) -> Value {
        let inline = self.count(&format!(
            "SELECT count(*) FROM node_attempts WHERE run_id = '{run_id}' AND node_path = '{node_path}' \
             AND status = 'completed' AND output_inline IS NOT NULL"
        ));
        if inline == 0 {
            let hash = self.text(&format!(
                "SELECT output_hash FROM node_attempts WHERE run_id = '{run_id}' AND node_path = '{node_path}' \
                 AND status = 'completed'"
            ));
            return self.blob_json(&hash);
        }
        let text = self.text(&format!(
            "SELECT CAST(output_inline AS TEXT) FROM node_attempts WHERE run_id = '{run_id}' \
             AND node_path = '{node_path}' AND status = 'completed'"
        ));
        serde_json::from_str(&text).expect("a JSON output")
    }

    /// Tails of the server log, the server's start errors and every runner's output.
    pub fn diagnostics(&self) -> String {
        let logs = self.dir().join("logs");
        let mut files = vec![logs.join("server.log"), logs.join("server-start.err")];
        if let Ok(entries) = std::fs::read_dir(logs.join("runners")) {
            let mut runners: Vec<PathBuf> = entries.filter_map(|entry| entry.ok().map(|e| e.path())).collect();
            runners.sort();
            files.extend(runners);
        }
        let mut text = String::new();
        for file in files {
            let Ok(content) = std::fs::read(&file) else { continue };
            let content = String::from_utf8_lossy(&content);
            let tail: String = {
                let chars: Vec<char> = content.chars().collect();
                chars[chars.len().saturating_sub(3000)..].iter().collect()
            };
            if !tail.trim().is_empty() {
                text.push_str(&format!("\n--- {} (tail) ---\n{}", file.display(), tail.trim_end()));
            }
        }
        if self.dir().join("state.sqlite").exists() {
            let runs = self.texts(
                "SELECT run_id || ' ' || origin || ' ' || status || ' ' || coalesce(status_detail, '-') FROM runs",
            );
            let attempts = self.texts(
                "SELECT run_id || ' ' || node_path || '#' || visit || ' ' || status FROM node_attempts ORDER BY started_at",
            );
            let workers = self.texts(
                "SELECT runner_epoch || ' gen ' || generation || ' ' || status || ' exit ' || coalesce(exit_code, '-') \
                 FROM run_workers ORDER BY started_at",
            );
            text.push_str(&format!(
                "\n--- runs ---\n{}\n--- attempts ---\n{}\n--- run_workers ---\n{}",
                runs.join("\n"),
                attempts.join("\n"),
                workers.join("\n")
            ));
        }
        text
    }

    /// Assert the exit code of a CLI call, with its output and the logs on failure.
    pub fn expect_code(&self, out: &Output, code: i32, what: &str) {
        assert_eq!(
            out.status.code(),
            Some(code),
            "{what}: expected exit code {code}\nstdout: {}\nstderr: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
    }

    /// Poll `check` until it holds; fail with the logs after `WAIT`.
    pub fn wait_until(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}{}",
                self.diagnostics()
            );
            std::thread::sleep(POLL);
        }
    }

    pub fn wait_for_count(&self, what: &str, sql: &str) {
        self.wait_until(what, || self.count(sql) > 0);
    }

    /// Wait until the run is terminal, or parked again with no live runner after a
    /// resume made at `revision` (resume is one revision; parking again is at least one more).
    pub fn wait_settled_after(&self, run_id: &str, revision: i64) {
        self.wait_for_count(
            "the run ends or parks again",
            &format!(
                "SELECT count(*) FROM runs r JOIN run_queue q USING (run_id) WHERE r.run_id = '{run_id}' AND \
                 (r.finished_at IS NOT NULL OR (q.status = 'parked' AND r.revision >= {revision} + 2 AND \
                 NOT EXISTS (SELECT 1 FROM run_workers w WHERE w.run_id = r.run_id \
                 AND w.status IN ('starting', 'ready'))))"
            ),
        );
    }

    /// Wait until the run has no live runner epoch (a waiting run keeps no runner).
    pub fn wait_runner_gone(&self, run_id: &str) {
        self.wait_for_count(
            "the run's runner exits",
            &format!(
                "SELECT count(*) = 0 FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready')"
            ),
        );
    }

    pub fn server_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.dir().join("server/server.lock")).expect("server.lock");
        text.split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .expect("pid in server.lock")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.cli(&["server", "stop"]);
    }
}

/// The one JSON document a `--json` command prints on stdout.
pub fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}"))
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn run_id_of(out: &Output) -> String {
    json_of(out)["runId"].as_str().expect("runId").to_string()
}

/// Start the merge-approval example, followed until it waits for a person (exit 5); returns
/// the followed status.
pub fn start_merge_approval(env: &Env) -> Value {
    let input = r#"{"branch":"fix-1","commit":"abc123def"}"#;
    let out = env.cli(&[
        "run",
        "start",
        &example("merge-approval"),
        "--input-json",
        input,
        "--follow",
        "--json",
    ]);
    env.expect_code(&out, 5, "run start merge-approval --follow (waits for a person)");
    json_of(&out)
}
