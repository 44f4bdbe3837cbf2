//! `pi-workflows view <runId> [--once]` and `runs --watch`: readable live views drawn only
//! from the server's `run-view.v1` and run-list documents (snapshots, then merge patches).
//! On a terminal the screen is redrawn in place; otherwise each change is printed once.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::workflow::{accepted, connect};
use crate::client::Client;
use crate::protocol::{EventKind, JsonObject, Operation};
use crate::view::patch;

/// Rows of history a terminal view shows (the newest).
const HISTORY_ROWS_MAX: usize = 20;
/// How long `view` waits for an event before redrawing (elapsed times keep moving).
const REDRAW_MS: u64 = 1_000;

/// `view <runId>`: draw the run until it ends (`--once`: draw it now and exit).
pub fn view(state_dir: &Path, run_id: &str, once: bool, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(state_dir)?;
    if once {
        let response = client.request_for(Operation::ViewRunGet, Some(run_id), JsonObject::new())?;
        let document = accepted(&response)?
            .get("view")
            .cloned()
            .context("the server sent no view")?;
        print_view(&document, json, false)?;
        return Ok(ExitCode::SUCCESS);
    }
    let response = client.request_for(Operation::ViewRunWatch, Some(run_id), JsonObject::new())?;
    accepted(&response)?;
    let redraw = std::io::stdout().is_terminal() && !json;
    let mut document = Value::Null;
    loop {
        match client.next_event(Duration::from_millis(REDRAW_MS))? {
            Some(event) => {
                if !apply_event(&mut client, run_id, &mut document, &event)? {
                    continue;
                }
            }
            None if redraw && !document.is_null() => {}
            None => continue,
        }
        print_view(&document, json, redraw)?;
        if finished(&document) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Bring `document` up to an event of its run's subscription; false when the event
/// changes nothing. A patch that does not start from the held view (an event was missed)
/// is replaced by a fresh read of the whole view.
pub(super) fn apply_event(
    client: &mut Client,
    run_id: &str,
    document: &mut Value,
    event: &crate::protocol::Event,
) -> anyhow::Result<bool> {
    match event.event {
        EventKind::RunSnapshot => *document = event.payload.get("view").cloned().unwrap_or_default(),
        EventKind::RunPatch if !document.is_null() && event.payload["fromRevision"] == document["revision"] => {
            patch::apply(document, &event.payload["patch"]);
        }
        EventKind::RunPatch => {
            let response = client.request_for(Operation::ViewRunGet, Some(run_id), JsonObject::new())?;
            *document = accepted(&response)?
                .get("view")
                .cloned()
                .context("the server sent no view")?;
        }
        EventKind::Unavailable => bail!("run {run_id} is no longer available"),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Terminal, and its runner gone (nothing about it will change any more).
fn finished(document: &Value) -> bool {
    let status = document["display"]["status"].as_str().unwrap_or_default();
    let terminal = matches!(status, "completed" | "failed" | "timed_out" | "cancelled");
    terminal && document["display"]["activity"]["kind"] == "none"
}

fn print_view(document: &Value, json: bool, redraw: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{document}")?;
    } else {
        if redraw {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        writeln!(out, "{}", render_view(document, now_ms()))?;
    }
    out.flush()?;
    Ok(())
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A string of the view as printed: control characters escaped, `-` when absent.
fn text(value: &Value) -> std::borrow::Cow<'_, str> {
    crate::printable::printable(value.as_str().unwrap_or("-"))
}

/// The readable form of one run view.
pub fn render_view(view: &Value, now_ms: i64) -> String {
    let mut lines = summary_lines(view, now_ms);
    lines.extend(history_lines(&view["history"], now_ms));
    lines.join("\n")
}

/// The view's status lines without the node history (`run status`).
pub fn render_summary(view: &Value, now_ms: i64) -> String {
    summary_lines(view, now_ms).join("\n")
}

fn summary_lines(view: &Value, now_ms: i64) -> Vec<String> {
    let (display, run) = (&view["display"], &view["run"]);
    let mut lines = vec![format!(
        "run {}  {}  {}{}",
        text(&view["runId"]),
        text(&view["workflow"]["name"]),
        text(&display["status"]),
        activity_suffix(&display["activity"]),
    )];
    let end = run["finishedAt"].as_i64().unwrap_or(now_ms);
    lines.push(format!(
        "{} of {} steps completed · elapsed {} · revision {}",
        run["completedSteps"].as_i64().unwrap_or(0),
        view["workflow"]["nodes"]["total"]
            .as_i64()
            .map_or("?".to_string(), |n| n.to_string()),
        duration(end - run["createdAt"].as_i64().unwrap_or(end)),
        view["revision"],
    ));
    if let Some(next) = run["continuedAs"].as_str() {
        lines.push(format!(
            "its checkpoint was answered; the workflow continues as run {next} (`pi-workflows view {next}`)"
        ));
    }
    if let Some(node) = display.get("currentNode") {
        lines.push(format!(
            "current: {} ({}, {})",
            text(&node["nodePath"]),
            text(&node["nodeType"]),
            duration(now_ms - node["startedAt"].as_i64().unwrap_or(now_ms))
        ));
    }
    if let Some(node) = display.get("waitingOn") {
        let kind = text(&display["request"]["kind"]);
        lines.push(format!("waiting on: {} ({kind})", text(&node["nodePath"])));
    }
    if let Some(reason) = display.get("reason") {
        lines.push(format!(
            "reason: {}: {}",
            text(&reason["code"]),
            text(&reason["message"])
        ));
    }
    if let Some(change) = run["settingsChangeNumber"].as_i64() {
        let how = if change == 0 { "as declared" } else { "changed" };
        lines.push(format!(
            "settings: change {change} ({how}; `pi-workflows run settings {}`)",
            text(&view["runId"])
        ));
    }
    let controls: Vec<_> = display["controls"].as_array().into_iter().flatten().map(text).collect();
    lines.push(format!("controls: {}", controls.join(", ")));
    lines
}

fn activity_suffix(activity: &Value) -> String {
    match activity["kind"].as_str() {
        Some("worker") => format!("  (runner {})", text(&activity["state"])),
        _ => String::new(),
    }
}

fn history_lines(history: &Value, now_ms: i64) -> Vec<String> {
    let mut items: Vec<&Value> = history["items"]
        .as_object()
        .into_iter()
        .flat_map(|items| items.values())
        .collect();
    items.sort_by_key(|item| item["seq"].as_i64().unwrap_or(0));
    let shown = &items[items.len().saturating_sub(HISTORY_ROWS_MAX)..];
    let mut lines = vec![format!("nodes (last {} of {}):", shown.len(), history["total"])];
    for item in shown.iter().copied() {
        let (mark, timing) = match item["finishedAt"].as_i64() {
            Some(end) => (
                status_mark(&text(&item["status"])),
                duration(end - item["startedAt"].as_i64().unwrap_or(end)),
            ),
            None => (
                "▶",
                format!(
                    "{} for {}",
                    text(&item["status"]),
                    duration(now_ms - item["startedAt"].as_i64().unwrap_or(now_ms))
                ),
            ),
        };
        lines.push(format!(
            "  {mark} {:<32} {:<12} {timing}",
            text(&item["nodePath"]),
            text(&item["nodeType"])
        ));
    }
    lines
}

fn status_mark(status: &str) -> &'static str {
    match status {
        "completed" => "✓",
        "failed" | "timed_out" => "✗",
        "cancelled" | "interrupted" => "○",
        _ => "·",
    }
}

fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// `runs --watch`: the newest runs, redrawn whenever one changes (until interrupted).
pub fn watch_runs(state_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let mut client: Client = connect(state_dir)?;
    let response = client.request(Operation::ViewRunsWatch, JsonObject::new())?;
    accepted(&response)?;
    let redraw = std::io::stdout().is_terminal() && !json;
    loop {
        let Some(event) = client.next_event(Duration::from_secs(60))? else {
            continue;
        };
        if event.event != EventKind::Runs {
            continue;
        }
        let mut out = std::io::stdout().lock();
        if json {
            writeln!(out, "{}", json!(event.payload))?;
        } else {
            if redraw {
                write!(out, "\x1b[H\x1b[2J")?;
            }
            writeln!(out, "{}", render_runs(&event.payload))?;
        }
        out.flush()?;
    }
}

pub fn render_runs(page: &JsonObject) -> String {
    let items = page
        .get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if items.is_empty() {
        return "no runs yet; start one with `pi-workflows run start <workflow>`".to_string();
    }
    let mut lines = vec![format!(
        "{:<28} {:<24} {:<10} {}",
        "RUN", "WORKFLOW", "STATUS", "CURRENT"
    )];
    for item in items {
        lines.push(format!(
            "{:<28} {:<24} {:<10} {}",
            text(&item["runId"]),
            text(&item["workflowName"]),
            text(&item["display"]["status"]),
            item["currentNodeId"].as_str().unwrap_or("")
        ));
    }
    lines.join("\n")
}
