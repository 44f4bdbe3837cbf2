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
//! - `crash-in-effect`    exit with code 70 after applying the effect, before settling it
//! - `crash-first-only`   `crash-after` and `crash-in-effect` apply only in generation 1
//! - `work-ms=N`          sleep N ms inside each node (between `node.started` and
//!   `node.finished`), so a crash can find an attempt running
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
}

fn parse_script() -> Script {
    let mut script = Script {
        steps: 2,
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

struct Channel {
    reader: BufReader<std::fs::File>,
    writer: std::fs::File,
    launch: Launch,
    sent: u64,
    next_id: u64,
    generation: u64,
    acks: Option<File>,
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
        }
    }

    fn send(&mut self, kind: MessageKind, attempt_id: Option<String>, payload: Value, script: &Script) -> Response {
        self.next_id += 1;
        let message = Message {
            schema: MESSAGE_SCHEMA.to_string(),
            launch_schema: LAUNCH_SCHEMA.to_string(),
            message_id: format!("m{}", self.next_id),
            kind,
            run_id: self.launch.run_id.clone(),
            generation: self.generation,
            runner_epoch: self.launch.runner_epoch.clone(),
            expected_revision: None,
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
        let response: Response = serde_json::from_value(Value::Object(read_frame(&mut self.reader)))
            .unwrap_or_else(|_| exit_with(EXIT_PROTOCOL, "bad response"));
        let ack = format!(
            "{} {} {} {}\n",
            self.launch.runner_epoch,
            message.message_id,
            kind.as_str(),
            response.outcome.as_str()
        );
        append_line(&mut self.acks, ack);
        if response.outcome == ResponseOutcome::ClaimLost {
            exit_with(EXIT_CLAIM_LOST, "claim lost; exiting as the protocol requires");
        }
        response
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
    let request = json!({"effectType": "append", "idempotencyKey": key, "requestFingerprint": "f".repeat(64)});
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
    let effect_id = reservation.get("effectId").cloned().unwrap_or(Value::Null);
    channel.send(
        MessageKind::EffectSettle,
        attempt,
        json!({"effectId": effect_id, "outcome": "applied"}),
        script,
    );
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
    channel.send(MessageKind::RunnerReady, None, json!({}), &script);
    let _command = read_frame(&mut channel.reader);
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
    for step in 1..=script.steps {
        std::thread::sleep(Duration::from_millis(script.step_delay_ms));
        let attempt = Some(format!(
            "attempt-{}-{}-{step}",
            channel.launch.run_id, channel.launch.generation
        ));
        let node = json!({"nodeId": format!("step{step}"), "nodePath": format!("root/step{step}"), "visit": 1, "nodeType": "compute"});
        let (wall_start, started) = (SystemTime::now(), Instant::now());
        channel.send(MessageKind::NodeStarted, attempt.clone(), node, &script);
        if step == 1
            && let Some(path) = script.effect_file.as_deref()
        {
            perform_effect(&mut channel, attempt.clone(), path, &script);
        }
        std::thread::sleep(Duration::from_millis(script.work_ms));
        channel.send(MessageKind::NodeFinished, attempt, json!({"outputHash": null}), &script);
        if timings.is_some() {
            let elapsed = started.elapsed().as_micros();
            let start_us = wall_start
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_micros());
            let line = format!("{} {start_us} {elapsed}\n", channel.launch.runner_epoch);
            append_line(&mut timings, line);
        }
    }
    let outcome = if script.fail { "failed" } else { "completed" };
    channel.send(MessageKind::RunFinished, None, json!({"outcome": outcome}), &script);
    channel.send(MessageKind::RunnerExiting, None, json!({}), &script);
}
