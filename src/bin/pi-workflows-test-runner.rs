//! A scripted runner child for deterministic supervision tests (never used in production).
//! It speaks the runner protocol on fd 3 and follows `PI_WORKFLOWS_TEST_SCRIPT`, a
//! comma-separated list of directives:
//!
//! - `steps=N`            run N compute nodes, then finish the run (default 2)
//! - `fail`               finish the run as failed instead of completed
//! - `crash-after=N`      exit with code 70 right after sending N messages (ready included)
//! - `hang-before-ready`  never send `runner.ready`
//! - `garbage`            after ready, send a line that is not JSON
//! - `oversized`          after ready, send a line above the 1 MiB frame limit
//! - `stale-generation`   stamp messages after ready with the previous generation
//! - `grandchildren`      start two `sleep 300` children in its process group first
//! - `ignore-sigterm`     ignore SIGTERM
//! - `step-delay-ms=N`    sleep N ms before each node
//! - `effect-file=PATH`   step 1 performs one managed effect: reserve it, append a line
//!   to PATH (the "external system"), settle it as applied
//! - `effect-ms=N`        sleep N ms after applying the effect, before settling it
//! - `crash-in-effect`    exit with code 70 after applying the effect, before settling it
//! - `hang-at=N`          step N, after `node.started`, spins forever without reading its
//!   channel (busy, never answers a ping), until the server kills it
//! - `crash-first-only`   `crash-after`, `crash-in-effect` and `hang-at` apply only in
//!   generation 1
//! - `work-ms=N`          sleep N ms inside each node (between `node.started` and
//!   `node.finished`), so a crash can find an attempt running. Without it (and without an
//!   effect) a step is a pure compute node: one `node.finished` with its start fields
//! - `checkpoint-at=N`    step N asks for input (`interaction.requested`, kind checkpoint)
//!   and the runner exits; a later `resume` whose run state carries the answer finishes it
//! - `request-kind=K`     the kind of the checkpoint-at request (default checkpoint)
//! - `verdict=accept|reject` how to judge a `validating` submission in the run state
//!   (`interaction.accepted` / `interaction.rejected`); a rejection ends the runner
//! - `verdict-delay-ms=N` sleep N ms before judging a submission (a slow step check, so a
//!   client can lose its connection while the submission is validating)
//! - `output-bytes=N`     every node output is a string of N bytes (large run states)
//! - `pipeline=N`         send up to N pure-node results before reading their answers
//!   (answers still arrive in order, each after its commit); timings then measure each
//!   step from its send to its answer
//! - `finish-ahead`       send `run.finished` behind the results still unanswered, as the
//!   Node runner does, then read every answer
//! - `batch`              send the pure steps' results together, as one `nodes.finished`
//!   after the last step (as the Node runner gathers the results of one tick)
//! - `bad-node-type-at=N` (with `batch`) step N's result names a node type other than
//!   compute, which a batch may not carry: the whole batch is refused
//! - `fenced`             carry `expectedRevision` as the Node runner does: the ready answer
//!   gives the revision, each state-changing message sent expects one more (a
//!   `nodes.finished` one more per result)
//! - `bad-revision-at=N`  (with `fenced`) step N's result expects a revision the run never
//!   had, so it is refused; what was sent after it still expects what it would have led to
//! - `reuse-id`           at step 1 send a `node.update`, then another one under the same
//!   message ID, then the first again; log `reuse|repeat <outcome> <code>` to the ack file
//! - `bad-reads`          before reading its run state, send bad `content.read` requests
//!   (unknown digest, wrong media type, zero length, a part above 512 KiB, an offset past
//!   the end) and log `read <case> <outcome> <code>` to the ack file
//! - `updates`            send one `node.update` and one `notification.requested` per run
//! - `register-child`     before step 1 start `sleep 300` in its own process group and
//!   register it (`runner.progress`); `register-foreign` registers the runner's parent
//!   instead, which the server must refuse
//! - `timing-file=PATH`   append one line per completed step to PATH:
//!   `<runner epoch> <start, µs since the Unix epoch> <wall time in µs>`, the wall time
//!   running from sending `node.started` until the response to `node.finished` (benchmarks)
//! - `ack-file=PATH`      append one line per response to PATH:
//!   `<runner epoch> <message ID> <kind> <outcome>` (what the server acknowledged, for
//!   crash tests that check no acknowledged message is lost)
//!
//! Attempt IDs are `attempt-<run ID>-<generation>-<step>`: unique across runs and
//! generations, as the store requires.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pi_workflows::protocol::runner::{
    LAUNCH_SCHEMA, Launch, MESSAGE_SCHEMA, Message, MessageKind, Response, ResponseOutcome,
};
use pi_workflows::protocol::{decode_frame, encode_frame};
use serde_json::{Map, Value, json};

const EXIT_CRASH: i32 = 70;
const EXIT_CLAIM_LOST: i32 = 75;
const EXIT_PROTOCOL: i32 = 76;

#[derive(Default)]
struct Script {
    steps: u64,
    fail: bool,
    crash_after: Option<u64>,
    /// Crash only in the run's first generation (so a resumed runner can finish).
    crash_first_only: bool,
    hang_before_ready: bool,
    hang_at: Option<u64>,
    garbage: bool,
    oversized: bool,
    stale_generation: bool,
    grandchildren: bool,
    ignore_sigterm: bool,
    step_delay_ms: u64,
    work_ms: u64,
    timing_file: Option<String>,
    ack_file: Option<String>,
    effect_file: Option<String>,
    crash_in_effect: bool,
    effect_ms: u64,
    checkpoint_at: Option<u64>,
    reject_submissions: bool,
    verdict_delay_ms: u64,
    /// `checkpoint` (answered directly) or `agent` (answers are validated by a runner).
    request_kind: String,
    output_bytes: usize,
    updates: bool,
    bad_reads: bool,
    reuse_id: bool,
    pipeline: usize,
    batch: bool,
    bad_node_type_at: Option<u64>,
    finish_ahead: bool,
    fenced: bool,
    bad_revision_at: Option<u64>,
    register_child: bool,
    register_foreign: bool,
}

fn parse_script() -> Script {
    let mut script = Script {
        steps: 2,
        request_kind: "checkpoint".to_string(),
        ..Script::default()
    };
    let text = std::env::var("PI_WORKFLOWS_TEST_SCRIPT").unwrap_or_default();
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (name, value) = directive.split_once('=').unwrap_or((directive, ""));
        let number = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "bad number in script"))
        };
        match name {
            "steps" => script.steps = number(),
            "fail" => script.fail = true,
            "crash-after" => script.crash_after = Some(number()),
            "crash-first-only" => script.crash_first_only = true,
            "hang-before-ready" => script.hang_before_ready = true,
            "hang-at" => script.hang_at = Some(number()),
            "garbage" => script.garbage = true,
            "oversized" => script.oversized = true,
            "stale-generation" => script.stale_generation = true,
            "grandchildren" => script.grandchildren = true,
            "ignore-sigterm" => script.ignore_sigterm = true,
            "step-delay-ms" => script.step_delay_ms = number(),
            "work-ms" => script.work_ms = number(),
            "timing-file" if !value.is_empty() => script.timing_file = Some(value.to_string()),
            "ack-file" if !value.is_empty() => script.ack_file = Some(value.to_string()),
            "effect-file" if !value.is_empty() => script.effect_file = Some(value.to_string()),
            "crash-in-effect" => script.crash_in_effect = true,
            "effect-ms" => script.effect_ms = number(),
            "checkpoint-at" => script.checkpoint_at = Some(number()),
            "verdict" => script.reject_submissions = value == "reject",
            "verdict-delay-ms" => script.verdict_delay_ms = number(),
            "request-kind" if !value.is_empty() => script.request_kind = value.to_string(),
            "output-bytes" => script.output_bytes = number() as usize,
            "updates" => script.updates = true,
            "reuse-id" => script.reuse_id = true,
            "bad-reads" => script.bad_reads = true,
            "pipeline" => script.pipeline = number() as usize,
            "finish-ahead" => script.finish_ahead = true,
            "batch" => script.batch = true,
            "bad-node-type-at" => script.bad_node_type_at = Some(number()),
            "fenced" => script.fenced = true,
            "bad-revision-at" => script.bad_revision_at = Some(number()),
            "register-child" => script.register_child = true,
            "register-foreign" => script.register_foreign = true,
            _ => exit_with(EXIT_PROTOCOL, "unknown script directive"),
        }
    }
    script
}

fn exit_with(code: i32, why: &str) -> ! {
    eprintln!("test runner: {why}");
    std::process::exit(code)
}

/// A file opened for appending whole lines (one `write` each, so concurrent runners
/// appending to the same file never interleave within a line).
fn open_log(path: Option<&str>) -> Option<File> {
    let path = path?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "could not open a script log file"));
    Some(file)
}

fn append_line(file: &mut Option<File>, line: String) {
    if let Some(file) = file
        && file.write_all(line.as_bytes()).is_err()
    {
        exit_with(EXIT_PROTOCOL, "could not append to a script log file");
    }
}

/// A message written but not yet answered.
struct Sent {
    message_id: String,
    kind: MessageKind,
}

struct Channel {
    reader: BufReader<std::fs::File>,
    writer: std::fs::File,
    launch: Launch,
    sent: u64,
    next_id: u64,
    generation: u64,
    acks: Option<File>,
    /// The revision the next state-changing message expects (`fenced`; from the ready answer).
    revision: Option<u64>,
    /// The next state-changing message expects a revision the run never had.
    spoil_next: bool,
}

impl Channel {
    fn open(acks: Option<File>) -> Self {
        // SAFETY: the server passes the runner channel as fd 3 and nothing else uses it.
        let file = unsafe { std::fs::File::from_raw_fd(3) };
        let writer = file
            .try_clone()
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "fd 3 is not usable"));
        let mut reader = BufReader::new(file);
        let launch: Launch = serde_json::from_value(Value::Object(read_frame(&mut reader)))
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "bad launch envelope"));
        if launch.schema != LAUNCH_SCHEMA {
            exit_with(EXIT_PROTOCOL, "unexpected launch schema");
        }
        let generation = launch.generation;
        Self {
            reader,
            writer,
            launch,
            sent: 0,
            next_id: 0,
            generation,
            acks,
            revision: None,
            spoil_next: false,
        }
    }

    fn send(&mut self, kind: MessageKind, attempt_id: Option<String>, payload: Value, script: &Script) -> Response {
        let sent = self.send_only(kind, attempt_id, payload, script);
        self.receive(sent)
    }

    /// Write one message without waiting for its answer (pipelining); `receive` it later,
    /// in order.
    fn send_only(&mut self, kind: MessageKind, attempt_id: Option<String>, payload: Value, script: &Script) -> Sent {
        self.next_id += 1;
        let changes = payload.get("results").and_then(Value::as_array).map_or(1, Vec::len) as u64;
        let message = Message {
            schema: MESSAGE_SCHEMA.to_string(),
            launch_schema: LAUNCH_SCHEMA.to_string(),
            message_id: format!("m{}", self.next_id),
            kind,
            run_id: self.launch.run_id.clone(),
            generation: self.generation,
            runner_epoch: self.launch.runner_epoch.clone(),
            expected_revision: self.expect(kind, changes, script),
            attempt_id,
            payload: match payload {
                Value::Object(map) => map,
                _ => Map::new(),
            },
        };
        self.write_line(&encode_frame(&message).unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "encode")));
        self.sent += 1;
        let crash_allowed = !script.crash_first_only || self.launch.generation == 1;
        if crash_allowed && script.crash_after == Some(self.sent) {
            exit_with(EXIT_CRASH, "crashing as scripted");
        }
        Sent {
            message_id: message.message_id,
            kind,
        }
    }

    /// The revision a message expects under `fenced` (advancing the next one's by the
    /// `changes` it makes), else none.
    fn expect(&mut self, kind: MessageKind, changes: u64, script: &Script) -> Option<u64> {
        let changes_revision = !matches!(
            kind,
            MessageKind::RunnerReady
                | MessageKind::RunnerProgress
                | MessageKind::RunnerExiting
                | MessageKind::ContentRead
        );
        let expected = self.revision.filter(|_| script.fenced && changes_revision)?;
        self.revision = Some(expected + changes);
        let spoiled = std::mem::take(&mut self.spoil_next);
        Some(if spoiled { expected + 1_000_000 } else { expected })
    }

    fn receive(&mut self, sent: Sent) -> Response {
        let response: Response = serde_json::from_value(Value::Object(self.next_frame()))
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "bad response"));
        if response.message_id != sent.message_id {
            exit_with(EXIT_PROTOCOL, "a response out of order");
        }
        let ack = format!(
            "{} {} {} {}\n",
            self.launch.runner_epoch,
            sent.message_id,
            sent.kind.as_str(),
            response.outcome.as_str()
        );
        append_line(&mut self.acks, ack);
        if response.outcome == ResponseOutcome::ClaimLost {
            exit_with(EXIT_CLAIM_LOST, "claim lost; exiting as the protocol requires");
        }
        response
    }

    /// The next frame that is not a liveness ping; pings met on the way are answered
    /// (so a runner that sleeps answers late, as a busy one would).
    fn next_frame(&mut self) -> Map<String, Value> {
        loop {
            let frame = read_frame(&mut self.reader);
            let Some(ping) = frame.get("ping").cloned() else {
                return frame;
            };
            let pong = json!({"pong": ping, "schema": "pi-workflows.runner-pong.v1"});
            self.write_line(&encode_frame(&pong).unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "encode")));
        }
    }

    fn write_line(&mut self, bytes: &[u8]) {
        if self.writer.write_all(bytes).is_err() {
            exit_with(EXIT_PROTOCOL, "the server closed the channel");
        }
    }
}

fn read_frame(reader: &mut BufReader<std::fs::File>) -> Map<String, Value> {
    let mut line = Vec::new();
    match reader.read_until(b'\n', &mut line) {
        Ok(0) | Err(_) => exit_with(EXIT_PROTOCOL, "the server closed the channel"),
        Ok(_) => {
            decode_frame(&line).unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "non-canonical frame from the server"))
        }
    }
}

/// One managed effect: the key comes from run ID, effect type, node path and visit (as the
/// engine derives it), the external system is a file that must never get two lines.
fn perform_effect(channel: &mut Channel, attempt: Option<String>, path: &str, script: &Script) {
    let key = format!("{}:append:root/step1:1", channel.launch.run_id);
    let request = json!({
        "effectType": "append", "idempotencyKey": key, "requestFingerprint": "f".repeat(64), "recovery": "manual",
        "requestSummary": "append a line",
    });
    let response = channel.send(MessageKind::EffectReserve, attempt.clone(), request, script);
    let Some(reservation) = response.result else {
        exit_with(EXIT_PROTOCOL, "reserve without a result")
    };
    if reservation.get("execute") != Some(&Value::Bool(true)) {
        // Applied before (adopt), or ambiguous: never execute again.
        return;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "effect file"));
    let _ = writeln!(file, "applied {key}");
    if script.crash_in_effect {
        exit_with(EXIT_CRASH, "crashing inside the effect as scripted");
    }
    std::thread::sleep(Duration::from_millis(script.effect_ms));
    let effect_id = reservation.get("effectId").cloned().unwrap_or(Value::Null);
    channel.send(
        MessageKind::EffectSettle,
        attempt,
        json!({"effectId": effect_id, "outcome": "applied"}),
        script,
    );
}

/// The run state of the first command, inline or read in parts through `content.read`.
fn run_state(channel: &mut Channel, command: &Map<String, Value>, script: &Script) -> Value {
    let payload = command
        .get("payload")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(state) = payload.get("runState") {
        return state.clone();
    }
    let Some(reference) = payload.get("runStateRef").cloned() else {
        exit_with(EXIT_PROTOCOL, "command without a run state");
    };
    let total = reference.get("byteLength").and_then(Value::as_u64).unwrap_or(0);
    if script.bad_reads {
        send_bad_reads(channel, &reference, total, script);
    }
    let mut content = Vec::new();
    while (content.len() as u64) < total {
        let read = json!({"digest": reference["digest"], "mediaType": reference["mediaType"],
                          "offset": content.len(), "length": 512 * 1024});
        let response = channel.send(MessageKind::ContentRead, None, read, script);
        let data = response
            .result
            .as_ref()
            .and_then(|r| r.get("dataBase64"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| exit_with(EXIT_PROTOCOL, "content.read failed"));
        content.extend(base64_decode(data));
    }
    let digest = pi_workflows::digest::sha256_hex(&content);
    if Some(digest.as_str()) != reference.get("digest").and_then(Value::as_str) {
        exit_with(EXIT_PROTOCOL, "run state does not match its digest");
    }
    serde_json::from_slice(&content).unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "run state is not JSON"))
}

/// Send a node.update, then another message under the same ID, then the first again; log
/// `reuse <outcome> <code>` and `repeat <outcome> <code>` to the ack file.
fn reuse_message_id(channel: &mut Channel, attempt: Option<String>, script: &Script) {
    channel.send(
        MessageKind::NodeUpdate,
        attempt.clone(),
        json!({"message": "first"}),
        script,
    );
    for (case, message) in [("reuse", "second"), ("repeat", "first")] {
        channel.next_id -= 1;
        let response = channel.send(
            MessageKind::NodeUpdate,
            attempt.clone(),
            json!({"message": message}),
            script,
        );
        let code = response.error.map(|error| error.code).unwrap_or_default();
        append_line(
            &mut channel.acks,
            format!("{case} {} {code}\n", response.outcome.as_str()),
        );
    }
}

fn send_bad_reads(channel: &mut Channel, reference: &Value, total: u64, script: &Script) {
    let (digest, media) = (reference["digest"].clone(), reference["mediaType"].clone());
    let cases = [
        (
            "unknown-digest",
            json!({"digest": "0".repeat(64), "mediaType": media, "offset": 0, "length": 10}),
        ),
        (
            "wrong-media-type",
            json!({"digest": digest, "mediaType": "text/plain", "offset": 0, "length": 10}),
        ),
        (
            "zero-length",
            json!({"digest": digest, "mediaType": media, "offset": 0, "length": 0}),
        ),
        (
            "part-too-large",
            json!({"digest": digest, "mediaType": media, "offset": 0, "length": 600 * 1024}),
        ),
        (
            "past-the-end",
            json!({"digest": digest, "mediaType": media, "offset": total + 1, "length": 10}),
        ),
    ];
    for (case, read) in cases {
        let response = channel.send(MessageKind::ContentRead, None, read, script);
        let code = response.error.map(|error| error.code).unwrap_or_default();
        append_line(
            &mut channel.acks,
            format!("read {case} {} {code}\n", response.outcome.as_str()),
        );
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => exit_with(EXIT_PROTOCOL, "bad base64"),
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk.iter().filter(|&&c| c != b'=').map(|&c| value(c)).collect();
        let group = digits
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | (u32::from(*d) << (18 - 6 * i)));
        out.extend(group.to_be_bytes()[1..digits.len()].iter());
    }
    out
}

/// Steps the run already committed (`completed` attempts), and the answer of a settled
/// checkpoint, from the run state.
type Answered = Option<(Option<String>, Value)>;

fn progress_of(state: &Value) -> (Vec<String>, Answered) {
    // A continuation (command `continue`) goes on after its parent's history: the parent's
    // attempts, its answered checkpoint completed, count as done.
    let inherited = state["continuation"]["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let own = state
        .get("attempts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let attempts: Vec<Value> = inherited.into_iter().chain(own).collect();
    let done = attempts
        .iter()
        .filter(|a| a.get("status").and_then(Value::as_str) == Some("completed"))
        .filter_map(|a| a.get("nodeId").and_then(Value::as_str).map(str::to_string))
        .collect();
    let interaction = state.get("interaction").filter(|i| !i.is_null());
    let answered = interaction
        .filter(|i| i.get("status").and_then(Value::as_str) == Some("settled"))
        .and_then(|i| Some((i.get("attemptId")?.as_str()?.to_string(), i.get("answer")?.clone())));
    // The answered attempt finishes in place while it still waits; otherwise (interrupted)
    // the answer completes a new attempt of the same node.
    let still_waiting = |attempt_id: &str| {
        attempts.iter().any(|a| {
            a.get("attemptId").and_then(Value::as_str) == Some(attempt_id)
                && a.get("status").and_then(Value::as_str) == Some("waiting")
        })
    };
    let answered = answered.map(|(attempt, answer)| (still_waiting(&attempt).then_some(attempt), answer));
    (done, answered)
}

/// The scripted request: a protected decision (choices `ship` and `fix`, the latter taking
/// text) carries its decision and subject; other kinds a summary.
fn interaction_request(run_id: &str, kind: &str) -> Value {
    let mut request = json!({"requestId": format!("req-{run_id}"), "kind": kind, "contract": {"summary": "approve?"}});
    if kind == "decision" {
        request["contract"]["decision"] = json!({
            "audience": "operator", "title": "Ship it?",
            "presentation": {"schema": "pi-workflows.decision-presentation.v1", "summary": "approve?"},
            "choices": [{"id": "ship", "label": "Ship"},
                        {"id": "fix", "label": "Fix first", "input": {"label": "What to fix", "maxLength": 200}}],
        });
        request["subject"] = json!({"scripted": run_id});
    }
    request
}

/// Judge a candidate the run state says is validating; true when the runner must exit.
fn judge(channel: &mut Channel, state: &Value, script: &Script) -> bool {
    let interaction = &state["interaction"];
    let validating = &interaction["validating"];
    if validating.is_null() {
        return false;
    }
    let (request_id, submission_id) = (interaction["requestId"].clone(), validating["submissionId"].clone());
    let attempt = interaction["attemptId"].as_str().map(str::to_string);
    std::thread::sleep(Duration::from_millis(script.verdict_delay_ms));
    if script.reject_submissions {
        let verdict = json!({"requestId": request_id, "submissionId": submission_id,
                             "error": {"code": "invalidAnswer", "message": "scripted rejection"}});
        channel.send(MessageKind::InteractionRejected, attempt, verdict, script);
        channel.send(MessageKind::RunnerExiting, None, json!({}), script);
        return true;
    }
    let verdict = json!({"requestId": request_id, "submissionId": submission_id, "output": validating["payload"]});
    channel.send(MessageKind::InteractionAccepted, attempt, verdict, script);
    false
}

fn record_step(timings: &mut Option<File>, channel: &Channel, wall_start: SystemTime, started: Instant) {
    if timings.is_none() {
        return;
    }
    let elapsed = started.elapsed().as_micros();
    let start_us = wall_start
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros());
    append_line(
        timings,
        format!("{} {start_us} {elapsed}\n", channel.launch.runner_epoch),
    );
}

/// Start `sleep 300` in its own process group and register it with the server.
fn register_child(channel: &mut Channel, script: &Script) {
    use std::os::unix::process::CommandExt;
    let pid = if script.register_foreign {
        i64::from(std::os::unix::process::parent_id())
    } else {
        // Never waited for on purpose: the server must stop and reap this group when the
        // runner dies first.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "could not start the child"));
        i64::from(child.id())
    };
    let register = json!({"operation": "process.register", "pid": pid});
    let response = channel.send(MessageKind::RunnerProgress, None, register, script);
    append_line(
        &mut channel.acks,
        format!("register {pid} {}\n", response.outcome.as_str()),
    );
}

/// Send the gathered pure results (if any) as one `nodes.finished`, ahead of its answer.
fn send_batch(
    channel: &mut Channel,
    batch: &mut Vec<Value>,
    in_flight: &mut std::collections::VecDeque<(Sent, SystemTime, Instant)>,
    script: &Script,
) {
    if batch.is_empty() {
        return;
    }
    let results = json!({"results": std::mem::take(batch)});
    let sent = channel.send_only(MessageKind::NodesFinished, None, results, script);
    in_flight.push_back((sent, SystemTime::now(), Instant::now()));
}

fn main() {
    let script = parse_script();
    if script.ignore_sigterm {
        // SAFETY: setting a signal disposition to SIG_IGN has no handler to be unsafe in.
        unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGTERM, nix::sys::signal::SigHandler::SigIgn) }
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "could not ignore SIGTERM"));
    }
    if script.grandchildren {
        for _ in 0..2 {
            let _ = std::process::Command::new("sleep").arg("300").spawn();
        }
    }
    let mut timings = open_log(script.timing_file.as_deref());
    let mut channel = Channel::open(open_log(script.ack_file.as_deref()));
    if script.hang_before_ready {
        std::thread::sleep(Duration::from_secs(600));
    }
    let ready = channel.send(MessageKind::RunnerReady, None, json!({}), &script);
    channel.revision = ready.revision;
    let command = channel.next_frame();
    let carried = if command["payload"].get("runState").is_some() {
        "inline"
    } else {
        "reference"
    };
    let line = format!("command {} {carried}\n", command["command"].as_str().unwrap_or("?"));
    append_line(&mut channel.acks, line);
    let state = run_state(&mut channel, &command, &script);
    if judge(&mut channel, &state, &script) {
        return;
    }
    let state = if state["interaction"]["validating"].is_null() {
        state
    } else {
        // Accepted just now: the node is complete; continue after it.
        let mut state = state;
        let node = format!("step{}", script.checkpoint_at.unwrap_or(0));
        if let Some(attempts) = state["attempts"].as_array_mut() {
            attempts.push(json!({"nodeId": node, "status": "completed"}));
        }
        state
    };
    let (done, answered) = progress_of(&state);
    if script.garbage {
        channel.write_line(b"this is not a frame\n");
    }
    if script.oversized {
        let mut line = vec![b'x'; 2 * 1024 * 1024];
        line.push(b'\n');
        channel.write_line(&line);
    }
    if script.stale_generation {
        channel.generation = channel.generation.saturating_sub(1);
    }
    if script.register_child || script.register_foreign {
        register_child(&mut channel, &script);
    }
    let output = Value::String("o".repeat(script.output_bytes));
    let mut in_flight = std::collections::VecDeque::new();
    let mut batch = Vec::new();
    for step in 1..=script.steps {
        let node_id = format!("step{step}");
        if done.contains(&node_id) {
            continue;
        }
        std::thread::sleep(Duration::from_millis(script.step_delay_ms));
        let attempt = Some(format!(
            "attempt-{}-{}-{step}",
            channel.launch.run_id, channel.launch.generation
        ));
        let node = json!({"nodeId": node_id, "nodePath": format!("root/{node_id}"), "visit": 1, "nodeType": "compute"});
        let (wall_start, started) = (SystemTime::now(), Instant::now());
        if script.checkpoint_at == Some(step) {
            // Synchronous messages follow: send the gathered results, then answer everything
            // in flight first.
            send_batch(&mut channel, &mut batch, &mut in_flight, &script);
            while let Some((sent, wall_start, started)) = in_flight.pop_front() {
                channel.receive(sent);
                record_step(&mut timings, &channel, wall_start, started);
            }
            match answered.as_ref() {
                Some((Some(waiting), answer)) => {
                    let finished = json!({"output": answer});
                    channel.send(MessageKind::NodeFinished, Some(waiting.clone()), finished, &script);
                    continue;
                }
                Some((None, answer)) => {
                    let mut finished = node;
                    finished["output"] = answer.clone();
                    channel.send(MessageKind::NodeFinished, attempt, finished, &script);
                    continue;
                }
                None => {
                    channel.send(MessageKind::NodeStarted, attempt.clone(), node, &script);
                    let request = interaction_request(&channel.launch.run_id, &script.request_kind);
                    channel.send(MessageKind::InteractionRequested, attempt, request, &script);
                    channel.send(MessageKind::RunnerExiting, None, json!({}), &script);
                    return;
                }
            }
        }
        let effect_step = step == 1 && script.effect_file.is_some();
        let hang = script.hang_at == Some(step) && (!script.crash_first_only || channel.launch.generation == 1);
        let two_phase = effect_step || script.work_ms > 0 || hang;
        if two_phase {
            channel.send(MessageKind::NodeStarted, attempt.clone(), node.clone(), &script);
        }
        if hang {
            loop {
                std::thread::yield_now();
            }
        }
        if let Some(path) = script.effect_file.as_deref().filter(|_| effect_step) {
            perform_effect(&mut channel, attempt.clone(), path, &script);
        }
        if script.updates && step == 1 {
            let update = json!({"message": "halfway", "completed": 1, "total": 2});
            channel.send(MessageKind::NodeUpdate, attempt.clone(), update, &script);
        }
        if script.reuse_id && step == 1 {
            reuse_message_id(&mut channel, attempt.clone(), &script);
        }
        std::thread::sleep(Duration::from_millis(script.work_ms));
        if script.batch && !two_phase {
            let node_type = match script.bad_node_type_at == Some(step) {
                true => "shell",
                false => "compute",
            };
            let mut result = node;
            result["nodeType"] = json!(node_type);
            result["attemptId"] = json!(attempt);
            result["outcome"] = json!("completed");
            result["value"] = output.clone();
            batch.push(result);
            continue;
        }
        let mut finished = if two_phase { json!({}) } else { node };
        finished["output"] = output.clone();
        channel.spoil_next = script.bad_revision_at == Some(step);
        let sent = channel.send_only(MessageKind::NodeFinished, attempt, finished, &script);
        in_flight.push_back((sent, wall_start, started));
        // Pure steps may run ahead of their answers, up to the pipeline window.
        while in_flight.len() > script.pipeline.max(1) - 1 || (two_phase && !in_flight.is_empty()) {
            let (sent, wall_start, started) = in_flight.pop_front().expect("in flight");
            channel.receive(sent);
            record_step(&mut timings, &channel, wall_start, started);
        }
    }
    let finish = if script.fail {
        json!({"outcome": "failed", "error": {"code": "nodeFailed", "message": "scripted failure"}})
    } else {
        json!({"outcome": "completed", "output": {"steps": script.steps}})
    };
    send_batch(&mut channel, &mut batch, &mut in_flight, &script);
    // Sent ahead, the run's end follows the results still unanswered (one group commit).
    let finish_ahead = (script.finish_ahead && !script.updates)
        .then(|| channel.send_only(MessageKind::RunFinished, None, finish.clone(), &script));
    while let Some((sent, wall_start, started)) = in_flight.pop_front() {
        channel.receive(sent);
        record_step(&mut timings, &channel, wall_start, started);
    }
    if script.updates {
        let attempt = format!("attempt-{}-{}-notify", channel.launch.run_id, channel.launch.generation);
        let notify = json!({"nodeId": "notify", "nodePath": "root/notify", "visit": 1, "nodeType": "notify",
                            "output": null, "notification": {"kind": "final", "message": "done"}});
        channel.send(MessageKind::NotificationRequested, Some(attempt), notify, &script);
    }
    let finish = finish_ahead.unwrap_or_else(|| channel.send_only(MessageKind::RunFinished, None, finish, &script));
    channel.receive(finish);
    channel.send(MessageKind::RunnerExiting, None, json!({}), &script);
}
