//! `pi-workflows run start|status|restart`, `runs` and `checkpoint answer`: run workflows
//! through the server (started on demand), with `--follow` live progress.
//!
//! Exit codes (stable): 0 success (with `--follow`: the run completed); 1 the command failed
//! or was refused; 2 usage; 4 the followed run failed, timed out or was cancelled; 5 the
//! followed run waits for input (`checkpoint answer`); 6 the followed run parked for review or
//! was paused (`run resume` or `run cancel`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::client::Client;
use crate::printable::printable;
use crate::protocol::{JsonObject, Operation, Outcome, Response};
use crate::server::ownership::ServerPaths;

pub const EXIT_RUN_FAILED: u8 = 4;
pub const EXIT_RUN_WAITING: u8 = 5;
pub const EXIT_RUN_PARKED: u8 = 6;
/// How often `--follow` reads the run's status.
/// How long `--follow` waits for a view change before waiting again.
const FOLLOW_EVENT_WAIT_MS: u64 = 1_000;

/// Options of `run start`.
pub struct StartOptions {
    pub target: String,
    pub input_json: Option<String>,
    pub project: Option<PathBuf>,
    pub follow: bool,
    pub json: bool,
}

/// `run start`: the server resolves the workflow (source identity, definition, input) with
/// its warm resolver child and queues it as a headless run.
pub fn start(state_dir: &Path, options: StartOptions) -> anyhow::Result<ExitCode> {
    let project = match options.project {
        Some(dir) => dir,
        None => std::env::current_dir().context("the current directory is not readable")?,
    };
    let project = project
        .canonicalize()
        .with_context(|| format!("the project directory {} does not exist", project.display()))?;
    // A path is relative to where the user typed it, not to --project.
    let target = if looks_like_path(&options.target) {
        std::path::absolute(&options.target)?.to_string_lossy().into_owned()
    } else {
        options.target.clone()
    };
    if let Some(input) = options.input_json.as_deref() {
        let depth_max = crate::protocol::INPUT_DEPTH_MAX;
        if crate::protocol::json_text_depth(input) > depth_max {
            anyhow::bail!("--input-json nests deeper than {depth_max} levels; flatten it");
        }
        serde_json::from_str::<Value>(input).context("--input-json is not JSON")?;
    }
    let run_id = new_run_id();
    let mut payload = JsonObject::new();
    payload.insert("workflow".into(), Value::String(target));
    payload.insert(
        "projectPath".into(),
        Value::String(project.to_string_lossy().into_owned()),
    );
    if let Some(input) = options.input_json {
        payload.insert("inputJson".into(), Value::String(input));
    }
    payload.insert("executionMode".into(), Value::String("headless".into()));
    let mut client = connect(state_dir)?;
    let response = client.request_for(Operation::RunStart, Some(&run_id), payload)?;
    let receipt = accepted(&response)?;
    let name = receipt
        .get("workflowName")
        .and_then(Value::as_str)
        .unwrap_or("workflow")
        .to_string();
    if options.follow {
        return follow(&mut client, &run_id, options.json);
    }
    if options.json {
        println!("{}", json!({"runId": run_id, "workflowName": name, "status": "queued"}));
    } else {
        println!("run {run_id} started: {name} (headless); follow it with `pi-workflows run status {run_id}`");
    }
    Ok(ExitCode::SUCCESS)
}

/// A workflow is named by its file stem or given as a path (anything with a `/` or an
/// extension).
fn looks_like_path(target: &str) -> bool {
    target.contains('/') || target.ends_with(".ts") || target.ends_with(".js") || target.ends_with(".mjs")
}

fn new_run_id() -> String {
    let random = crate::digest::random_hex(6).unwrap_or_else(|| format!("{:012x}", std::process::id()));
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    format!("run-{seconds:x}-{random}")
}

pub(super) fn connect(state_dir: &Path) -> anyhow::Result<Client> {
    let paths = ServerPaths::new(state_dir);
    if let Some(epoch) = super::server::ensure_started(&paths, state_dir)? {
        eprintln!("pi-workflows server started (epoch {epoch})");
    }
    Ok(Client::connect(&paths.socket)?)
}

pub(super) fn accepted(response: &Response) -> anyhow::Result<&JsonObject> {
    match (response.outcome, response.receipt.as_ref()) {
        (Outcome::Accepted | Outcome::Adopted, Some(receipt)) => Ok(receipt),
        (outcome, _) => match response.error.as_ref() {
            Some(error) => bail!("{} ({})", error.message, error.code),
            None => bail!("the server answered {}", outcome.as_str()),
        },
    }
}

/// Show progress until the run ends, waits for input or parks: drawn from the server's live
/// run view (snapshot, then patches), the same document every renderer uses; the final
/// summary and result are one explicit read at the end.
fn follow(client: &mut Client, run_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let response = client.request_for(Operation::ViewRunWatch, Some(run_id), JsonObject::new())?;
    accepted(&response)?;
    let mut view = Value::Null;
    let mut last_line = String::new();
    loop {
        let Some(event) = client.next_event(Duration::from_millis(FOLLOW_EVENT_WAIT_MS))? else {
            continue;
        };
        let first = view.is_null();
        if !super::view::apply_event(client, run_id, &mut view, &event)? {
            continue;
        }
        if first && !json {
            println!("{}", header(&view));
        }
        let line = progress_line(&view, started.elapsed());
        if !json && line != last_line {
            println!("{line}");
            last_line = line;
        }
        if let Some(code) = settled_exit_code(&view) {
            let status = status_of(client, run_id, true)?;
            if json {
                println!("{}", Value::Object(status));
            } else {
                print_ending(&status, started.elapsed());
            }
            return Ok(ExitCode::from(code));
        }
    }
}

fn header(view: &Value) -> String {
    format!(
        "run {}: {} ({})",
        view["runId"].as_str().unwrap_or("-"),
        view["workflow"]["name"].as_str().unwrap_or("workflow"),
        view["run"]["executionMode"].as_str().unwrap_or("headless")
    )
}

/// The exit code once the run needs nothing more from the follower, else `None`, from the
/// view's `display` (never from raw durable rows).
fn settled_exit_code(view: &Value) -> Option<u8> {
    let display = &view["display"];
    let parked_for_review = view["queue"]["status"] == "parked"
        && display["reason"]["code"]
            .as_str()
            .is_some_and(|code| code != "boundary");
    match display["status"].as_str().unwrap_or_default() {
        "completed" => Some(0),
        "failed" | "timed_out" | "cancelled" => Some(EXIT_RUN_FAILED),
        "waiting" => Some(EXIT_RUN_WAITING),
        // Nothing moves until someone acts: review, or resume a pause.
        "ambiguous" | "paused" => Some(EXIT_RUN_PARKED),
        "queued" if parked_for_review => Some(EXIT_RUN_PARKED),
        _ => None,
    }
}

fn progress_line(view: &Value, elapsed: Duration) -> String {
    let display = &view["display"];
    let steps = view["run"]["completedSteps"].as_i64().unwrap_or(0);
    let state = display["status"].as_str().unwrap_or("unknown");
    let node = display["currentNode"]["nodePath"]
        .as_str()
        .or(display["waitingOn"]["nodePath"].as_str());
    match node {
        Some(node) => format!(
            "  [{:>7.2} s] {state}: {node} · {steps} steps done",
            elapsed.as_secs_f64()
        ),
        None => format!("  [{:>7.2} s] {state} · {steps} steps done", elapsed.as_secs_f64()),
    }
}

fn status_of(client: &mut Client, run_id: &str, include_result: bool) -> anyhow::Result<JsonObject> {
    let mut payload = JsonObject::new();
    if include_result {
        payload.insert("includeResult".into(), Value::Bool(true));
    }
    let response = client.request_for(Operation::RunStatus, Some(run_id), payload)?;
    accepted(&response).cloned()
}

fn print_ending(status: &JsonObject, elapsed: Duration) {
    let text = |key: &str| status.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let steps = status.get("completedSteps").and_then(Value::as_i64).unwrap_or(0);
    let run_id = text("runId");
    let paused = status.get("paused").and_then(Value::as_bool) == Some(true);
    let continued_as = text("continuedAs");
    match text("status").as_str() {
        _ if paused => println!("run {run_id} is paused; continue it with `pi-workflows run resume {run_id}`"),
        _ if !continued_as.is_empty() => println!(
            "run {run_id}'s checkpoint was answered; it continues as run {continued_as} (`pi-workflows view {continued_as}`)"
        ),
        "waiting" => print_waiting(&run_id, status.get("request")),
        "running" | "queued" => println!(
            "run {run_id} parked ({}); after checking, `pi-workflows run resume {run_id}` or `run cancel {run_id}`",
            text("detail")
        ),
        outcome => println!(
            "run {run_id} {outcome} after {:.2} s ({steps} steps)",
            elapsed.as_secs_f64()
        ),
    }
    if let Some(result) = status.get("result") {
        println!("{}", serde_json::to_string_pretty(result).unwrap_or_default());
    }
}

/// What a waiting run asks and the command that answers it: a protected decision's title,
/// summary and choices (with the text each takes, the deadline and its default), or a
/// checkpoint's summary.
fn print_waiting(run_id: &str, request: Option<&Value>) {
    let request = request.cloned().unwrap_or(Value::Null);
    let Some(decision) = request.get("decision").filter(|decision| decision.is_object()) else {
        if let Some(summary) = request.get("summary") {
            let summary = summary.as_str().map_or_else(|| summary.to_string(), str::to_string);
            println!("  checkpoint: {}", crate::printable::printable(&summary));
        }
        println!("run {run_id} waits for input; answer with `pi-workflows checkpoint answer {run_id} '<json>'`");
        return;
    };
    let text = |value: &Value| crate::printable::printable(value.as_str().unwrap_or_default()).into_owned();
    println!("  decision: {}", text(&decision["title"]));
    println!("  {}", text(&decision["presentation"]["summary"]));
    for choice in decision["choices"].as_array().into_iter().flatten() {
        let input = match choice["input"]["label"].as_str() {
            Some(label) => format!(" (with text: {})", crate::printable::printable(label)),
            None => String::new(),
        };
        println!("    {}: {}{input}", text(&choice["id"]), text(&choice["label"]));
    }
    if let Some(default) = decision["onTimeout"]["choice"].as_str() {
        println!(
            "  if nobody answers in time, {} applies",
            crate::printable::printable(default)
        );
    }
    println!("run {run_id} waits for a person; answer with `pi-workflows decision answer {run_id} <choice> [text]`");
}

/// `run status <id>`: the live run view's status lines (`--json`: the run summary).
pub fn status(state_dir: &Path, run_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = Client::connect(&ServerPaths::new(state_dir).socket)?;
    let response = client.request_for(Operation::ViewRunGet, Some(run_id), JsonObject::new())?;
    let view = accepted(&response)?
        .get("view")
        .cloned()
        .context("the server sent no view")?;
    if json {
        // The summary, plus the view's `display` (the status renderers show, its reason and
        // controls), so a script sees `ambiguous` where a person does.
        let mut status = status_of(&mut client, run_id, false)?;
        status.insert("display".into(), view["display"].clone());
        println!("{}", Value::Object(status));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", super::view::render_summary(&view, super::view::now_ms()));
    Ok(ExitCode::SUCCESS)
}

fn describe(status: &JsonObject) -> String {
    let text = |key: &str| status.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let paused = if status.get("paused").and_then(Value::as_bool) == Some(true) {
        ", paused"
    } else {
        ""
    };
    match (text("status").as_str(), text("detail")) {
        ("running", detail) if text("queueStatus") == "parked" => format!("parked ({detail}){paused}"),
        (state, detail) if !detail.is_empty() => format!("{state} ({detail}){paused}"),
        (state, _) => format!("{state}{paused}"),
    }
}

/// `runs`: the newest runs first.
pub fn list(state_dir: &Path, limit: u64, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(state_dir)?;
    let mut payload = JsonObject::new();
    payload.insert("limit".into(), Value::from(limit));
    let response = client.request(Operation::RunList, payload)?;
    let receipt = accepted(&response)?;
    let runs = receipt
        .get("runs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if json {
        println!("{}", Value::Array(runs));
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no runs yet; start one with `pi-workflows run start <workflow>`");
    }
    for run in runs {
        let summary = run.as_object().cloned().unwrap_or_default();
        let field = |name: &str| printable(summary.get(name).and_then(Value::as_str).unwrap_or("-")).into_owned();
        println!(
            "{:<28} {:<24} {:<28} {} steps",
            field("runId"),
            field("workflowName"),
            printable(&describe(&summary)),
            summary.get("completedSteps").and_then(Value::as_i64).unwrap_or(0)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `run restart <id>`: a new run of the same workflow, source and input, from the start.
pub fn restart(state_dir: &Path, run_id: &str, follow_run: bool, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(state_dir)?;
    let new_run_id = new_run_id();
    let mut payload = JsonObject::new();
    payload.insert("newRunId".into(), Value::String(new_run_id.clone()));
    let response = client.request_for(Operation::RunRestart, Some(run_id), payload)?;
    accepted(&response)?;
    if follow_run {
        return follow(&mut client, &new_run_id, json);
    }
    if json {
        println!("{}", json!({"runId": new_run_id, "restartedRunId": run_id}));
    } else {
        println!("run {new_run_id} started as a restart of {run_id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `checkpoint answer <id> <json>`: answer the run's pending checkpoint.
pub fn answer(
    state_dir: &Path,
    run_id: &str,
    answer_json: &str,
    follow_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let answer: Value = serde_json::from_str(answer_json)
        .context("the answer must be JSON, e.g. '{\"approved\": true}' or '\"yes\"'")?;
    send_answer(state_dir, Operation::CheckpointAnswer, run_id, answer, follow_run, json)
}

/// `decision answer <id> <choice> [text]`: a person's answer to the run's protected decision,
/// checked by the server against its choices and deadline.
pub fn decide(
    state_dir: &Path,
    run_id: &str,
    choice: &str,
    text: Option<String>,
    follow_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut answer = json!({ "choice": choice });
    if let Some(text) = text {
        answer["text"] = Value::String(text);
    }
    send_answer(state_dir, Operation::DecisionAnswer, run_id, answer, follow_run, json)
}

fn send_answer(
    state_dir: &Path,
    operation: Operation,
    run_id: &str,
    answer: Value,
    follow_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut client = connect(state_dir)?;
    let mut payload = JsonObject::new();
    payload.insert("answer".into(), answer);
    let response = client.request_for(operation, Some(run_id), payload)?;
    accepted(&response)?;
    // An answered checkpoint settles the run by a continuation run, which goes on from it.
    let continuation = response
        .receipt
        .as_ref()
        .and_then(|receipt| receipt.get("continuationRunId"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let next = continuation.as_deref().unwrap_or(run_id);
    if follow_run {
        return follow(&mut client, next, json);
    }
    match (json, &continuation) {
        (true, _) => println!(
            "{}",
            json!({"runId": run_id, "answered": true, "continuationRunId": continuation})
        ),
        (false, Some(continued)) => println!("run {run_id} answered; it continues as run {continued}"),
        (false, None) => println!("run {run_id} answered; it continues"),
    }
    Ok(ExitCode::SUCCESS)
}
