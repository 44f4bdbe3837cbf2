//! `--live`: real runs on a real server. A workflow whose compute node loops back to itself
//! runs to 10,000 attempts (and to 10, the baseline) in a temporary state directory; then
//! the client path piw takes is timed to its first frame (connect, `view.run.watch`
//! snapshot, the definition through `view.content`, the first attempts page, the frame),
//! frames are timed on the real view with every attempt paged in, and a live `piw <runId>`
//! process is started in tmux and its RSS read from /proc once its first view is on screen.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pi_workflows::protocol::{EventKind, JsonObject, Operation};
use piw::connection::client::{Client, accepted, new_id};
use piw::connection::content::ContentRef;
use piw::connection::session::{self, ATTEMPTS_PAGE_LIMIT, ContentState, Link, Update};
use piw::connection::transport::Endpoint;
use piw::ui::app::App;
use piw::ui::theme::Theme;
use serde_json::{Value, json};

use super::{COLUMNS, Figures, ROWS, frame_times, rss_kib};

/// How long a run may take to finish (10,000 attempts take well under a minute).
const RUN_WAIT: Duration = Duration::from_secs(600);
/// How long the live piw may take to show its first view.
const SCREEN_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(10);
/// tmux session of the live piw.
const TMUX_SOCKET: &str = "piw-bench-live";

/// The looping workflow: `tick` runs `rounds` times, then `done` once.
fn workflow(rounds: usize) -> String {
    format!(
        r#"import {{ compute, defineWorkflow }} from "pi-workflows";
export default defineWorkflow({{
  name: "bench-loops-{rounds}",
  startAt: "tick",
  maxSteps: {max_steps},
  nodes: {{
    tick: compute({{
      title: "Tick",
      run: ({{ outputs }}) => {{
        const n = ((outputs.tick as {{ n?: number }} | undefined)?.n ?? 0) + 1;
        return {{ n, again: n < {rounds} }};
      }},
    }}),
    done: compute({{ title: "Done", run: () => ({{ done: true }}) }}),
  }},
  edges: [{{ from: "tick", switch: {{ on: "$.again", cases: {{ true: "tick", false: "done" }} }} }}],
}});
"#,
        max_steps = rounds * 2 + 10
    )
}

/// The binaries beside this example (`target/<profile>/examples/..`).
fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the example's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    dir.join(name)
}

fn server_bin() -> PathBuf {
    std::env::var_os("PI_WORKFLOWS_BIN").map_or_else(|| sibling("pi-workflows"), PathBuf::from)
}

struct Server {
    state: tempfile::TempDir,
    agent: tempfile::TempDir,
}

impl Server {
    fn new() -> Self {
        let temp = |prefix| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in("/tmp")
                .expect("temp dir")
        };
        Self {
            state: temp("piwb"),
            agent: temp("piwba"),
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        // The server finds the TypeScript package beside its binary; this one may be built
        // into another target directory.
        let package = std::env::var_os("PI_WORKFLOWS_PACKAGE_DIR")
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../packages/pi-workflows").into());
        let out = Command::new(server_bin())
            .env("PI_WORKFLOWS_PACKAGE_DIR", package)
            .arg("--state-dir")
            .arg(self.state.path())
            .args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .env_remove("PI_WORKFLOWS_RUNNER")
            .env("PI_CODING_AGENT_DIR", self.agent.path())
            .output()
            .expect("run pi-workflows");
        assert!(
            out.status.success(),
            "pi-workflows {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Start a run of `rounds` ticks and wait until it completes; its ID.
    fn completed_run(&self, rounds: usize) -> String {
        let file = self.state.path().join(format!("loops{rounds}.workflow.ts"));
        std::fs::write(&file, workflow(rounds)).expect("write the workflow");
        let started = self.cli(&["run", "start", &file.display().to_string(), "--json"]);
        let line = started.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        let run_id = serde_json::from_str::<Value>(line).expect("run start --json")["runId"]
            .as_str()
            .expect("runId")
            .to_string();
        let deadline = Instant::now() + RUN_WAIT;
        loop {
            let status: Value =
                serde_json::from_str(&self.cli(&["run", "status", &run_id, "--json"])).expect("status JSON");
            match status["status"].as_str() {
                Some("completed") => return run_id,
                Some("running" | "queued") => {}
                other => panic!("run {run_id} ended {other:?}"),
            }
            assert!(Instant::now() < deadline, "run {run_id} did not complete");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::Unix(self.state.path().join("server/server.sock"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(server_bin())
            .arg("--state-dir")
            .arg(self.state.path())
            .args(["server", "stop"])
            .output();
    }
}

/// One attempts page as the session reads it.
async fn attempts_page(client: &Client, run_id: &str, after: Option<i64>) -> (Vec<Value>, Option<i64>) {
    let mut payload = JsonObject::new();
    payload.insert("kind".into(), json!("attempts"));
    payload.insert("limit".into(), json!(ATTEMPTS_PAGE_LIMIT));
    if let Some(after) = after {
        payload.insert("after".into(), json!(after));
    }
    let response = client
        .read(Operation::ViewPage, Some(run_id), payload)
        .await
        .expect("view.page");
    let receipt = accepted(&response).expect("a page");
    let items = receipt["items"].as_array().cloned().unwrap_or_default();
    (items, receipt.get("nextAfter").and_then(Value::as_i64))
}

/// The client path to the first frame, then every older page, then timed frames.
async fn client_figures(server: &Server, run_id: &str) -> (Figures, Duration, usize) {
    let started = Instant::now();
    let (client, mut events) = Client::connect(&server.endpoint(), new_id("piw-bench"))
        .await
        .expect("connect");
    let watch = client
        .read(Operation::ViewRunWatch, Some(run_id), JsonObject::new())
        .await
        .expect("view.run.watch");
    accepted(&watch).expect("watched");
    let document = loop {
        let event = events.recv().await.expect("an event");
        if event.event == EventKind::RunSnapshot {
            break event.payload["view"].clone();
        }
    };
    let reference = ContentRef::from_value(&document["workflow"]["definition"]).expect("a definition");
    let definition = session::hydrate(&client, run_id, &reference, &mut None)
        .await
        .expect("view.content");
    assert!(matches!(definition, ContentState::Ready(_)), "{definition:?}");
    let mut app = App::new(Theme::default(), Some(run_id));
    app.apply(Update::Link(Link::Connected));
    app.apply(Update::View {
        document,
        definition,
        full_reason: None,
    });
    let (items, mut next_after) = attempts_page(&client, run_id, None).await;
    let paged = |items, next_after| Update::Attempts {
        run_id: run_id.to_string(),
        items,
        next_after,
    };
    app.apply(paged(items, next_after));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(COLUMNS, ROWS)).expect("backend");
    terminal.draw(|frame| piw::ui::draw::draw(frame, &app)).expect("draw");
    let first_frame = started.elapsed();
    let paging = Instant::now();
    while next_after.is_some() {
        let (items, next) = attempts_page(&client, run_id, next_after).await;
        next_after = next;
        app.apply(paged(items, next_after));
    }
    let all_pages = paging.elapsed();
    let attempts = app.selected.as_ref().map_or(0, |selected| selected.attempts.len());
    let (p99, median) = frame_times(&mut app, &mut terminal);
    let figures = Figures {
        first_frame,
        p99,
        median,
        rss_kib: rss_kib(),
    };
    (figures, all_pages, attempts)
}

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", TMUX_SOCKET, "-f", "/dev/null"])
        .args(args)
        .output()
        .expect("run tmux")
}

/// A live `piw <runId>` in tmux: launch to its first view on screen, and its RSS then (KiB).
fn live_piw(server: &Server, run_id: &str) -> (Duration, u64) {
    let piw = sibling("piw");
    let started = Instant::now();
    let columns = COLUMNS.to_string();
    let rows = ROWS.to_string();
    let command = format!(
        "env XDG_CONFIG_HOME=/nonexistent {} --state-dir {} {run_id}",
        piw.display(),
        server.state.path().display()
    );
    let created = tmux(&["new-session", "-d", "-x", &columns, "-y", &rows, "-s", "piw", &command]);
    assert!(
        created.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let deadline = Instant::now() + SCREEN_WAIT;
    loop {
        let screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "piw"]).stdout).into_owned();
        if screen.contains("attempts loaded") && screen.contains("Tick") {
            break;
        }
        assert!(Instant::now() < deadline, "piw showed no view:\n{screen}");
        std::thread::sleep(POLL);
    }
    let first_view = started.elapsed();
    let pid = String::from_utf8_lossy(&tmux(&["display-message", "-p", "-t", "piw", "#{pane_pid}"]).stdout)
        .trim()
        .to_string();
    // The pane's process is `env`, which execs piw: the same PID.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("piw's /proc status");
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let _ = tmux(&["kill-server"]);
    (first_view, rss)
}

pub struct LiveCase {
    pub figures: Figures,
    pub all_pages: Duration,
    pub piw_first_view: Duration,
    pub piw_rss_kib: u64,
    pub run_seconds: f64,
    /// Attempts piw held after paging (the run's own count).
    pub attempts: usize,
}

/// Both runs on one server; the client figures of both in this process, baseline first.
pub fn measure(attempts: [usize; 2]) -> [LiveCase; 2] {
    let server = Server::new();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    attempts.map(|count| {
        let started = Instant::now();
        // `count - 1` ticks and one `done`.
        let run_id = server.completed_run(count - 1);
        let run_seconds = started.elapsed().as_secs_f64();
        let (figures, all_pages, held) = runtime.block_on(client_figures(&server, &run_id));
        assert_eq!(held, count, "run {run_id} has {held} attempts, not {count}");
        let (piw_first_view, piw_rss_kib) = live_piw(&server, &run_id);
        LiveCase {
            figures,
            all_pages,
            piw_first_view,
            piw_rss_kib,
            run_seconds,
            attempts: held,
        }
    })
}
