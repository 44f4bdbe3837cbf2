//! Render benchmark (a program that prints figures, not a timed test): a synthetic run view
//! with 10,000 attempts against one with 10, in the same process. Prints the p99 frame time
//! (target ≤ 16 ms), the time to the first frame and piw's RSS (target ≤ 30 MB), with
//! ratios against the 10-attempt baseline, then the same as one JSON line.
//!
//!     cargo run --release -p piw --example bench_render [-- --live]
//!
//! `--live` (`live.rs`) measures real runs of 10,000 and 10 attempts on a real server in a
//! temporary state directory instead, and the RSS of a live `piw <runId>` (needs the
//! `pi-workflows` and `piw` binaries beside the example, the TypeScript package, and tmux).

use std::time::{Duration, Instant};

use piw::connection::session::{ContentState, Link, Update};
use piw::ui::app::App;
use piw::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::{Value, json};

mod live;

/// Frames timed per case (after the first).
const FRAMES: usize = 500;
/// Nodes of the synthetic workflow.
const NODES: usize = 24;
/// Attempts per page, as the server pages them.
const PAGE: usize = 200;
/// The view's inline history window.
const WINDOW: usize = 50;
const COLUMNS: u16 = 160;
/// The smallest baseline a ratio is computed against.
const RATIO_BASE_MIN: f64 = 0.001;
const ROWS: u16 = 48;

fn definition() -> Value {
    let nodes: Vec<Value> = (0..NODES)
        .map(|i| json!({"path": format!("step{i}"), "type": "compute", "title": format!("Step number {i}")}))
        .collect();
    let mut edges: Vec<Value> = (0..NODES - 1)
        .map(|i| json!({"from": format!("step{i}"), "to": format!("step{}", i + 1)}))
        .collect();
    edges.push(json!({"from": format!("step{}", NODES - 1), "switch": {"on": "$.again", "cases": {"true": "step0"}}}));
    json!({"schema": "pi-workflows.definition-snapshot.v1", "name": "bench", "startAt": "step0", "nodes": nodes, "edges": edges, "includes": []})
}

fn attempt(seq: usize, now: i64) -> Value {
    let finished = seq % 1000 != 999;
    let mut item = json!({
        "seq": seq, "attemptId": format!("att-{seq}"), "nodeId": format!("step{}", seq % NODES),
        "nodePath": format!("step{}", seq % NODES), "nodeType": "compute", "visit": seq / NODES + 1,
        "status": if finished { "completed" } else { "running" }, "startedAt": now - 1_000_000 + seq as i64,
    });
    if finished {
        item["finishedAt"] = json!(now - 1_000_000 + seq as i64 + 5);
    }
    item
}

fn document(attempts: usize, now: i64) -> Value {
    let first = attempts.saturating_sub(WINDOW);
    let items: serde_json::Map<String, Value> = (first..attempts)
        .map(|seq| (seq.to_string(), attempt(seq, now)))
        .collect();
    let current = attempt(attempts - 1, now);
    let mut history = json!({"items": items, "total": attempts});
    if first > 0 {
        history["olderBefore"] = json!(first);
    }
    json!({
        "schema": "pi-workflows.run-view.v1", "runId": "run-bench", "revision": attempts * 3,
        "workflow": {"name": "bench", "definitionDigest": "sha256:00", "definition": {"digest": "sha256:00", "mediaType": "x", "byteLength": 1}},
        "run": {"status": "running", "revision": attempts * 2, "paused": false, "executionMode": "headless",
                "createdAt": now - 1_000_000, "completedSteps": attempts - 1, "attemptCount": attempts},
        "queue": {"status": "running"},
        "display": {"status": "running", "activity": {"kind": "worker", "state": "ready", "since": now},
                    "controls": ["cancel", "pause"], "currentNode": current},
        "history": history,
    })
}

/// Build the app as the session would feed it: the view, then every attempts page.
fn build(attempts: usize, now: i64) -> App {
    let mut app = App::new(Theme::default(), Some("run-bench"));
    app.apply(Update::Link(Link::Connected));
    app.apply(Update::View {
        document: document(attempts, now),
        definition: ContentState::Ready(std::sync::Arc::new(definition())),
        full_reason: None,
    });
    let older = attempts.saturating_sub(WINDOW);
    for start in (0..older).step_by(PAGE) {
        let end = (start + PAGE).min(older);
        let items = (start..end).map(|seq| attempt(seq, now)).collect();
        let next_after = (end < older).then_some(end as i64 - 1);
        app.apply(Update::Attempts {
            run_id: "run-bench".into(),
            items,
            next_after,
        });
    }
    app
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Figures {
    first_frame: Duration,
    p99: Duration,
    median: Duration,
    rss_kib: u64,
}

fn measure(attempts: usize) -> Figures {
    let now = piw::ui::app::now_ms();
    let started = Instant::now();
    let mut app = build(attempts, now);
    let mut terminal = Terminal::new(TestBackend::new(COLUMNS, ROWS)).expect("backend");
    terminal.draw(|frame| piw::ui::draw::draw(frame, &app)).expect("draw");
    let first_frame = started.elapsed();
    let (p99, median) = frame_times(&mut app, &mut terminal);
    Figures {
        first_frame,
        p99,
        median,
        rss_kib: rss_kib(),
    }
}

/// The p99 and median of `FRAMES` keys, each with the frame it causes.
fn frame_times(app: &mut App, terminal: &mut Terminal<TestBackend>) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(FRAMES);
    for frame_index in 0..FRAMES {
        // A key (through the steps and the timeline) and the frame it causes, timed together.
        let start = Instant::now();
        step(app, frame_index);
        terminal.draw(|frame| piw::ui::draw::draw(frame, app)).expect("draw");
        times.push(start.elapsed());
    }
    times.sort();
    (times[(times.len() * 99) / 100 - 1], times[times.len() / 2])
}

fn step(app: &mut App, frame_index: usize) {
    let key = |code| crossterm::event::KeyEvent::new(code, crossterm::event::KeyModifiers::NONE);
    let code = match frame_index % 4 {
        0 => crossterm::event::KeyCode::Char('['),
        1 => crossterm::event::KeyCode::Up,
        2 => crossterm::event::KeyCode::Char('j'),
        _ => crossterm::event::KeyCode::Tab,
    };
    piw::ui::keys::on_key(app, key(code));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One table row: the baseline, the large case and their ratio.
fn row(name: &str, small: f64, big: f64) {
    // A baseline under a microsecond (nothing to page) makes no meaningful ratio.
    let ratio = if small >= RATIO_BASE_MIN { big / small } else { f64::NAN };
    println!("{name:<30} {small:>12.3} {big:>12.3} {ratio:>8.2}");
}

fn header(title: &str) {
    println!("{title}");
    println!("{:<30} {:>12} {:>12} {:>8}", "", "10 attempts", "10,000", "ratio");
}

fn main() {
    if std::env::args().any(|arg| arg == "--live") {
        return main_live();
    }
    let baseline = measure(10);
    let large = measure(10_000);
    header(&format!(
        "piw render benchmark ({COLUMNS}×{ROWS}, {FRAMES} frames per case, {NODES} nodes)"
    ));
    row("p99 key+frame (ms)", ms(baseline.p99), ms(large.p99));
    row("median key+frame (ms)", ms(baseline.median), ms(large.median));
    row("first frame (ms)*", ms(baseline.first_frame), ms(large.first_frame));
    row("RSS (MiB)", mib(baseline.rss_kib), mib(large.rss_kib));
    println!("* from the first view and every attempts page decoded to the first frame drawn");
    println!("targets: p99 frame ≤ 16 ms, RSS ≤ 30 MiB");
    let case = |f: &Figures| json!({"p99Ms": ms(f.p99), "medianMs": ms(f.median), "firstFrameMs": ms(f.first_frame), "rssKib": f.rss_kib});
    println!(
        "{}",
        json!({"mode": "synthetic", "attempts10": case(&baseline), "attempts10000": case(&large)})
    );
}

fn main_live() {
    let [baseline, large] = live::measure([10, 10_000]);
    header(&format!(
        "piw live benchmark (real runs on a real server; {COLUMNS}×{ROWS}, {FRAMES} frames per case)"
    ));
    row("run to completion (s)", baseline.run_seconds, large.run_seconds);
    row(
        "client: first frame (ms)*",
        ms(baseline.figures.first_frame),
        ms(large.figures.first_frame),
    );
    row("client: all pages (ms)", ms(baseline.all_pages), ms(large.all_pages));
    row("p99 key+frame (ms)", ms(baseline.figures.p99), ms(large.figures.p99));
    row(
        "median key+frame (ms)",
        ms(baseline.figures.median),
        ms(large.figures.median),
    );
    row(
        "bench process RSS (MiB)",
        mib(baseline.figures.rss_kib),
        mib(large.figures.rss_kib),
    );
    row(
        "live piw: first view (ms)**",
        ms(baseline.piw_first_view),
        ms(large.piw_first_view),
    );
    row("live piw: RSS (MiB)", mib(baseline.piw_rss_kib), mib(large.piw_rss_kib));
    println!("* connect, view.run.watch snapshot, definition (view.content), first attempts page, frame");
    println!("** `piw <runId>` launched in tmux until its first view is on screen (10 ms polls)");
    println!("targets: p99 frame ≤ 16 ms, RSS ≤ 30 MiB");
    let case = |c: &live::LiveCase| {
        json!({"attempts": c.attempts, "runSeconds": c.run_seconds, "firstFrameMs": ms(c.figures.first_frame),
               "allPagesMs": ms(c.all_pages), "p99Ms": ms(c.figures.p99), "medianMs": ms(c.figures.median),
               "benchRssKib": c.figures.rss_kib, "piwFirstViewMs": ms(c.piw_first_view), "piwRssKib": c.piw_rss_kib})
    };
    println!(
        "{}",
        json!({"mode": "live", "attempts10": case(&baseline), "attempts10000": case(&large)})
    );
}
