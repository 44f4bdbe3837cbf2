//! The fuzz targets of pi-workflows, as plain functions of one input: libFuzzer calls them
//! from `fuzz_targets/*.rs`, the stable `smoke` driver (`examples/smoke.rs`) from seeds and
//! their mutations (`mutator`). Each one must never panic, whatever the bytes; a panic is a finding.
//! Besides "no panic" each checks the properties its code promises:
//!
//! - `frame_reader`: the client frame reader (`FrameReader`) and the server's async line
//!   reader (`server::frames::read_line`) split any byte stream into the same lines, every
//!   read makes progress, and a line `decode_frame` accepts is byte-equal to its canonical
//!   re-encoding (`encode_frame` of the parsed object gives the same bytes back).
//! - `canonical`: RFC 8785 encoding of any JSON value is idempotent and decodes as a frame;
//!   a frame is accepted iff its bytes are the canonical ones; `json_text_depth` never
//!   reports less nesting than the parsed value has.
//! - `envelope`: a line `decode_client_message` accepts re-encodes (`encode_client_message`)
//!   to exactly the same bytes, a request has a fingerprint, and every refusal is short.
//! - `runner_message`: the server's runner-channel decoding: pong, fencing fields, the fence
//!   (`RunnerFence::admit` admits exactly the issued stamp, run and runner epoch), and a
//!   message that decodes as `Message` carries the fencing fields that were checked first.
//! - `settings_patch`: settings JSON Patch (`parse_patch` + `Declaration::change`): an
//!   accepted change is an object within the size and depth limits, deny by default, only
//!   granted pointers change, a patch of tests changes nothing, the result is deterministic.

use std::io::BufReader;

pub mod mutator;

use pi_workflows::protocol::runner::{Command, Launch, Message, Response, fencing_of, pong_of};
use pi_workflows::protocol::{
    ClientMessage, FRAME_BYTES_MAX, FrameError, FrameReadError, FrameReader, decode_client_message, decode_frame,
    encode_client_message, encode_frame, json_text_depth, request_fingerprint, to_canonical_vec,
};
use pi_workflows::server::runners::state::RunnerFence;
use pi_workflows::settings::{Declaration, PatchOp, SETTINGS_BYTES_MAX, SETTINGS_DEPTH_MAX, parse_patch};
use serde_json::{Value, json};

/// Longest error message any decoder may produce for hostile input (they quote at most
/// short prefixes; the frame tests hold them under 400 bytes).
const ERROR_TEXT_MAX: usize = 1024;

/// A fuzz target: one input, no result; a panic is a finding.
pub type Target = fn(&[u8]);

/// Every target, by name (the smoke driver and the seed generator use this list).
pub const TARGETS: &[(&str, Target)] = &[
    ("frame_reader", frame_reader),
    ("canonical", canonical),
    ("envelope", envelope),
    ("runner_message", runner_message),
    ("settings_patch", settings_patch),
];

// ---------------------------------------------------------------------------------------
// frame_reader

/// The first byte picks the reader's buffer capacity (1..=256 bytes, so lines straddle
/// buffer refills); the rest is the stream.
pub fn frame_reader(data: &[u8]) {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let capacity = usize::from(first) + 1;
    let client = client_lines(stream, capacity);
    let server = server_lines(stream, capacity);
    assert_eq!(client, server, "the client and server line readers disagree");
}

/// What one reader made of a stream: each complete line, or the end/error that stopped it.
#[derive(Debug, PartialEq, Eq)]
enum Piece {
    Line(Vec<u8>),
    /// Ended mid-line (client: `missing_newline`; server: `Closed` with a partial line).
    Partial,
    TooLarge,
}

fn client_lines(stream: &[u8], capacity: usize) -> Vec<Piece> {
    let mut reader = FrameReader::new(BufReader::with_capacity(capacity, stream));
    let mut pieces = Vec::new();
    // Every read consumes at least one byte or ends the stream.
    for _ in 0..=stream.len() + 1 {
        let line = match reader.read_line() {
            Ok(None) => return pieces,
            Ok(Some(line)) => line.to_vec(),
            Err(FrameReadError::Frame(FrameError::MissingNewline { bytes })) => {
                assert!(bytes > 0 && bytes <= FRAME_BYTES_MAX);
                pieces.push(Piece::Partial);
                continue;
            }
            Err(FrameReadError::Frame(FrameError::TooLarge { .. })) => {
                pieces.push(Piece::TooLarge);
                // The client closes its connection here; the server stops reading too.
                return pieces;
            }
            Err(other) => panic!("unexpected reader error {other}"),
        };
        assert!(line.len() <= FRAME_BYTES_MAX && line.ends_with(b"\n"));
        check_frame(&line);
        pieces.push(Piece::Line(line));
    }
    panic!("the frame reader made no progress");
}

fn server_lines(stream: &[u8], capacity: usize) -> Vec<Piece> {
    use pi_workflows::server::frames::{LineRead, read_line};
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let mut reader = tokio::io::BufReader::with_capacity(capacity, stream);
            let mut pieces = Vec::new();
            let mut line = Vec::new();
            let mut consumed = 0usize;
            for _ in 0..=stream.len() + 1 {
                match read_line(&mut reader, &mut line)
                    .await
                    .expect("reading a slice cannot fail")
                {
                    LineRead::Line => {
                        consumed += line.len();
                        pieces.push(Piece::Line(std::mem::take(&mut line)));
                    }
                    LineRead::Closed => {
                        if consumed < stream.len() {
                            pieces.push(Piece::Partial);
                        }
                        return pieces;
                    }
                    LineRead::TooLarge => {
                        pieces.push(Piece::TooLarge);
                        return pieces;
                    }
                }
            }
            panic!("the server line reader made no progress");
        })
    })
}

/// A frame `decode_frame` accepts is exactly the canonical encoding of what it parsed.
fn check_frame(line: &[u8]) {
    match decode_frame(line) {
        Ok(object) => {
            let again = encode_frame(&object).expect("an accepted frame re-encodes");
            assert_eq!(again, line, "an accepted frame is not its own canonical encoding");
        }
        Err(error) => check_error_text(&error.to_string(), error.code()),
    }
}

fn check_error_text(text: &str, code: &str) {
    assert!(!code.is_empty());
    assert!(
        text.len() <= ERROR_TEXT_MAX,
        "a {code} error is {} bytes long: {}",
        text.len(),
        &text[..text.floor_char_boundary(200)]
    );
}

// ---------------------------------------------------------------------------------------
// canonical

/// Any bytes: as a frame (with a newline), and as JSON text to canonicalize.
pub fn canonical(data: &[u8]) {
    let mut line = data.to_vec();
    line.push(b'\n');
    let frame = decode_frame(&line);
    if let Err(error) = &frame {
        check_error_text(&error.to_string(), error.code());
    }
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(frame.is_err(), "a frame that is not UTF-8 was accepted");
        return;
    };
    let depth = json_text_depth(text);
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        assert!(frame.is_err(), "a frame that is not JSON was accepted");
        return;
    };
    // The text's nesting bounds the value's (a duplicate key may drop a deeper member), so
    // a depth limit checked on the text is never looser than one on the value.
    assert!(
        depth >= value_depth(&value),
        "json_text_depth is below the parsed value's depth"
    );
    let bytes = to_canonical_vec(&value).expect("a parsed value always encodes");
    let reparsed: Value = serde_json::from_slice(&bytes).expect("canonical bytes parse");
    let twice = to_canonical_vec(&reparsed).expect("encodes again");
    assert_eq!(twice, bytes, "canonicalization is not idempotent");
    let mut canonical_line = bytes.clone();
    canonical_line.push(b'\n');
    match (&value, decode_frame(&canonical_line)) {
        (Value::Object(_), Ok(object)) => {
            assert_eq!(
                Value::Object(object),
                reparsed,
                "the canonical frame decodes to another value"
            );
        }
        (Value::Object(_), Err(error)) => {
            // Only the size limit may refuse a canonical object.
            assert_eq!(error.code(), "too_large", "a canonical object was refused: {error}");
        }
        (_, result) => assert!(result.is_err(), "a non-object frame was accepted"),
    }
    // Accepted iff the bytes are the canonical ones (for an object within the limit).
    match frame {
        Ok(_) => assert_eq!(bytes, data, "a non-canonical frame was accepted"),
        Err(error) if value.is_object() && bytes == data => {
            assert_eq!(error.code(), "too_large", "a canonical frame was refused: {error}")
        }
        Err(_) => {}
    }
}

/// Nesting depth of arrays and objects (a scalar is 0), without recursion.
fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

// ---------------------------------------------------------------------------------------
// envelope

/// One client line (the newline is added when missing, so most inputs reach validation).
pub fn envelope(data: &[u8]) {
    let mut line = data.to_vec();
    if !line.ends_with(b"\n") {
        line.push(b'\n');
    }
    match decode_client_message(&line) {
        Ok(message) => {
            let again = encode_client_message(&message).expect("an accepted message re-encodes");
            assert_eq!(again, line, "an accepted message does not re-encode to its own bytes");
            if let ClientMessage::Request(request) = &message {
                let fingerprint = request_fingerprint(request).expect("a request has a fingerprint");
                assert_eq!(fingerprint.len(), 64);
                // The fingerprint ignores the transport attempt.
                let mut retry = request.clone();
                retry.request_id = pi_workflows::protocol::OpaqueId::new("retry-1").expect("id");
                assert_eq!(request_fingerprint(&retry).expect("fingerprint"), fingerprint);
            }
        }
        Err(error) => {
            check_error_text(&error.to_string(), error.code());
            // The frame layer decides first: an envelope error implies an acceptable frame.
            if !error.is_frame_error() {
                assert!(decode_frame(&line).is_ok(), "an envelope error on a bad frame");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// runner_message

const FENCE_SERVER_EPOCH: i64 = 7;
const FENCE_RUN: &str = "run-1";
const FENCE_GENERATION: i64 = 3;
const FENCE_RUNNER_EPOCH: &str = "e7-abc";

/// One runner-channel line (newline added when missing), decoded as the server does in
/// `server::runners::messages::parse`, plus the other frames of the channel.
pub fn runner_message(data: &[u8]) {
    let mut line = data.to_vec();
    if !line.ends_with(b"\n") {
        line.push(b'\n');
    }
    let Ok(frame) = decode_frame(&line) else {
        return;
    };
    let _ = pong_of(&frame);
    let fencing = fencing_of(&frame);
    if let Some(fencing) = &fencing {
        let fence = RunnerFence::new(FENCE_SERVER_EPOCH, FENCE_RUN, FENCE_GENERATION, FENCE_RUNNER_EPOCH);
        let issued = fencing.run_id == FENCE_RUN
            && fencing.generation == FENCE_GENERATION as u64
            && fencing.runner_epoch == FENCE_RUNNER_EPOCH;
        assert_eq!(
            fence.admit(fencing).is_ok(),
            issued,
            "the fence admitted {fencing:?} wrongly"
        );
        // A fence issued for exactly this message's stamp admits it.
        if let (Some(epoch), Ok(generation)) = (
            server_epoch_of(&fencing.runner_epoch),
            i64::try_from(fencing.generation),
        ) {
            let own = RunnerFence::new(epoch, &fencing.run_id, generation, &fencing.runner_epoch);
            assert!(own.admit(fencing).is_ok(), "a fence refused its own stamp {fencing:?}");
        }
    }
    let object = Value::Object(frame);
    if let Ok(message) = serde_json::from_value::<Message>(object.clone()) {
        let fencing = fencing.expect("a decodable message has fencing fields");
        assert_eq!(fencing.run_id, message.run_id);
        assert_eq!(fencing.generation, message.generation);
        assert_eq!(fencing.runner_epoch, message.runner_epoch);
        assert_eq!(fencing.message_id, message.message_id);
        let bytes = encode_frame(&message).expect("a message re-encodes");
        let back = decode_frame(&bytes).expect("its frame decodes");
        let again: Message = serde_json::from_value(Value::Object(back)).expect("and is a message");
        assert_eq!(again, message, "a runner message does not survive a round trip");
    }
    if let Ok(response) = serde_json::from_value::<Response>(object.clone())
        && let Ok(bytes) = encode_frame(&response)
    {
        let back = decode_frame(&bytes).expect("a response frame decodes");
        let again: Response = serde_json::from_value(Value::Object(back)).expect("and is a response");
        assert_eq!(again, response, "a runner response does not survive a round trip");
    }
    let _ = serde_json::from_value::<Command>(object.clone());
    let _ = serde_json::from_value::<Launch>(object);
}

/// `e<server epoch>-<suffix>`, as `server::runners::state` reads a runner epoch.
fn server_epoch_of(runner_epoch: &str) -> Option<i64> {
    let (epoch, suffix) = runner_epoch.strip_prefix('e')?.split_once('-')?;
    if suffix.is_empty() {
        return None;
    }
    let epoch: u64 = epoch.parse().ok()?;
    i64::try_from(epoch).ok()
}

// ---------------------------------------------------------------------------------------
// settings_patch

/// JSON text: `[declaration, current settings, patch]`, or any other JSON value as the patch
/// of a fixed declaration (the one of `src/settings/tests.rs`) on its initial settings.
pub fn settings_patch(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let (declared, current, patch) = match input {
        Value::Array(mut parts) if parts.len() == 3 && parts[0].is_object() => {
            let patch = parts.pop().unwrap_or_default();
            let current = parts.pop().unwrap_or_default();
            (parts.pop().unwrap_or_default(), Some(current), patch)
        }
        patch => (fixed_declaration(), None, patch),
    };
    let Ok(declaration) = Declaration::parse(&declared) else {
        return;
    };
    let snapshot = json!({"settings": declared});
    assert_eq!(
        Declaration::of_snapshot(&snapshot).ok().flatten().as_ref(),
        Some(&declaration)
    );
    let current = current.unwrap_or_else(|| declaration.initial.clone());
    let ops = match parse_patch(&patch) {
        Ok(ops) => ops,
        Err(error) => {
            check_error_text(&error.to_string(), error.code());
            return;
        }
    };
    let result = declaration.change(&current, &ops);
    assert_eq!(
        result,
        declaration.change(&current, &ops),
        "a change is not deterministic"
    );
    let changed = match result {
        Ok(changed) => changed,
        Err(error) => {
            // Pointers are at most 1 KiB, so a refusal names one and stays short.
            assert!(error.to_string().len() <= 4 * ERROR_TEXT_MAX, "{}", error.code());
            return;
        }
    };
    assert!(changed.is_object(), "the settings stopped being an object");
    let bytes = to_canonical_vec(&changed).expect("encodes").len();
    assert!(bytes <= SETTINGS_BYTES_MAX, "changed settings of {bytes} bytes");
    assert!(
        value_depth(&changed) <= SETTINGS_DEPTH_MAX + 1,
        "changed settings nest too deep"
    );
    let paths = declaration.paths_json();
    let grants: Vec<(Vec<String>, Vec<&str>)> = paths
        .as_array()
        .into_iter()
        .flatten()
        .map(|grant| {
            let tokens = pointer_tokens(grant["path"].as_str().unwrap_or_default());
            let allow = grant["allow"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            (tokens, allow)
        })
        .collect();
    let mut only_tests = true;
    for op in &ops {
        let needs: &[&str] = match op {
            PatchOp::Test { .. } => continue,
            PatchOp::Add { .. } => &["add", "replace"],
            PatchOp::Remove { .. } => &["remove"],
            PatchOp::Replace { .. } => &["replace"],
        };
        only_tests = false;
        let tokens = op.tokens();
        let granted = grants
            .iter()
            .any(|(prefix, allow)| tokens.starts_with(prefix) && needs.iter().any(|need| allow.contains(need)));
        assert!(granted, "{} {} applied without a grant", op.name(), op.pointer());
    }
    if only_tests {
        assert_eq!(changed, current, "a patch of tests changed the settings");
    }
}

fn fixed_declaration() -> Value {
    json!({
        "initial": {"reviewers": ["ann"], "limits": {"retries": 2}, "mode": "fast"},
        "paths": [
            {"path": "/reviewers", "allow": ["add", "remove"]},
            {"path": "/limits/retries", "allow": ["replace"]},
        ],
    })
}

/// RFC 6901 tokens of a pointer the declaration already accepted.
fn pointer_tokens(pointer: &str) -> Vec<String> {
    match pointer.strip_prefix('/') {
        None => Vec::new(),
        Some(rest) => rest
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    }
}

// ---------------------------------------------------------------------------------------
// seeds

/// The starting inputs of `target`, built from `protocol/fixtures/` (`repo` is the
/// repository root) and from the shapes the runner channel and settings tests use.
pub fn fixture_seeds(target: &str, repo: &std::path::Path) -> Vec<Vec<u8>> {
    let lines = fixture_lines(repo);
    let runner = runner_seeds();
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    match target {
        "frame_reader" => {
            for (index, line) in lines.iter().enumerate() {
                let mut seed = vec![(index % 17) as u8];
                seed.extend_from_slice(line);
                seeds.push(seed);
            }
            // Whole streams: every fixture line, then every runner frame, in one input.
            let mut stream = vec![6u8];
            lines.iter().take(40).for_each(|line| stream.extend_from_slice(line));
            seeds.push(stream);
            let mut stream = vec![0u8];
            runner.iter().for_each(|line| stream.extend_from_slice(line));
            seeds.push(stream);
        }
        "canonical" => {
            for dir in ["input", "output"] {
                let dir = repo.join("protocol/fixtures/rfc8785").join(dir);
                let mut paths: Vec<_> = std::fs::read_dir(dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                paths.sort();
                seeds.extend(paths.iter().filter_map(|path| std::fs::read(path).ok()));
            }
            seeds.extend(
                lines
                    .iter()
                    .map(|line| line.strip_suffix(b"\n").unwrap_or(line).to_vec()),
            );
        }
        "envelope" => seeds.extend(lines),
        "runner_message" => seeds.extend(runner),
        "settings_patch" => seeds.extend(settings_seeds()),
        _ => {}
    }
    seeds
}

/// Every fixture case of `client.v1.json` as its raw line (newline included unless the case
/// says otherwise; `repeat` padding kept below 8 KiB so inputs stay small).
fn fixture_lines(repo: &std::path::Path) -> Vec<Vec<u8>> {
    let Ok(text) = std::fs::read_to_string(repo.join("protocol/fixtures/client.v1.json")) else {
        return Vec::new();
    };
    let Ok(fixtures) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    let cases = fixtures["cases"].as_array().cloned().unwrap_or_default();
    cases
        .iter()
        .filter_map(|case| {
            let mut line = match (case["line"].as_str(), case["lineHex"].as_str()) {
                (Some(line), _) => line.as_bytes().to_vec(),
                (None, Some(hex)) => (0..hex.len() / 2)
                    .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                    .collect(),
                _ => return None,
            };
            if let Some(repeat) = case.get("repeat") {
                let pad = repeat["pad"].as_str().unwrap_or("x");
                let to = repeat["toBytes"].as_u64().unwrap_or(0).min(8 * 1024) as usize;
                let fill = to.saturating_sub(line.len() + 1) / pad.len().max(1);
                let text = String::from_utf8_lossy(&line).replacen("\"\"", &format!("\"{}\"", pad.repeat(fill)), 1);
                line = text.into_bytes();
            }
            if case["noNewline"] != Value::Bool(true) {
                line.push(b'\n');
            }
            Some(line)
        })
        .collect()
}

fn frame(value: &Value) -> Vec<u8> {
    encode_frame(value).expect("seed frames are canonical objects")
}

/// Runner-channel frames: every message kind under the fence's stamp, a stale one, a pong,
/// a response, a command and a launch envelope.
fn runner_seeds() -> Vec<Vec<u8>> {
    let message = |kind: &str, payload: Value| {
        json!({
            "schema": pi_workflows::protocol::runner::MESSAGE_SCHEMA,
            "launchSchema": pi_workflows::protocol::runner::LAUNCH_SCHEMA,
            "messageId": format!("m-{kind}"), "kind": kind, "runId": FENCE_RUN,
            "generation": FENCE_GENERATION, "runnerEpoch": FENCE_RUNNER_EPOCH,
            "attemptId": "attempt-run-1-3-1", "expectedRevision": 4, "payload": payload,
        })
    };
    let kinds = [
        ("runner.ready", json!({"protocolVersion": 1})),
        (
            "node.started",
            json!({"nodePath": "root/step1", "visit": 1, "settingsChangeNumber": 0}),
        ),
        (
            "node.update",
            json!({"nodePath": "root/step1", "update": {"type": "log", "key": "k", "data": {}}}),
        ),
        (
            "node.finished",
            json!({"nodePath": "root/step1", "output": {"value": [1, 2.5, "x", null, true]}}),
        ),
        (
            "node.failed",
            json!({"nodePath": "root/step1", "error": {"code": "boom", "message": "m"}}),
        ),
        ("run.parked", json!({"reason": "paused"})),
        ("run.finished", json!({"status": "completed", "result": {}})),
        ("interaction.requested", json!({"kind": "checkpoint", "prompt": "?"})),
        (
            "effect.reserve",
            json!({"effectKey": "k", "fingerprint": "f", "recovery": "manual"}),
        ),
        ("effect.settle", json!({"effectKey": "k", "status": "applied"})),
        ("runner.progress", json!({"processes": [{"pid": 1, "startTime": 2}]})),
        ("runner.exiting", json!({})),
        (
            "content.read",
            json!({"digest": "sha256:00", "offset": 0, "length": 16}),
        ),
    ];
    let mut seeds: Vec<Vec<u8>> = kinds
        .iter()
        .map(|(kind, payload)| frame(&message(kind, payload.clone())))
        .collect();
    let mut stale = message("node.finished", json!({}));
    stale["generation"] = json!(2);
    seeds.push(frame(&stale));
    let mut foreign = message("node.update", json!({}));
    foreign["runnerEpoch"] = json!("e6-abc");
    seeds.push(frame(&foreign));
    seeds.push(frame(
        &json!({"pong": 9, "schema": pi_workflows::protocol::runner::PONG_SCHEMA}),
    ));
    seeds.push(frame(&json!({
        "schema": pi_workflows::protocol::runner::RESPONSE_SCHEMA, "messageId": "m-1", "outcome": "rejected",
        "revision": 5, "error": {"code": "notReady", "message": "send runner.ready first"},
        "settings": {"changeNumber": 1, "value": {}},
    })));
    seeds.push(frame(&json!({
        "schema": pi_workflows::protocol::runner::COMMAND_SCHEMA, "command": "resume",
        "parentAttemptId": "a-1", "payload": {"runState": {}},
    })));
    seeds.push(frame(&json!({
        "schema": pi_workflows::protocol::runner::LAUNCH_SCHEMA, "runId": FENCE_RUN, "generation": 3,
        "runnerEpoch": FENCE_RUNNER_EPOCH, "projectPath": "/p", "workflowSource": {"kind": "file"},
        "definitionDigest": "sha256:d", "inputHash": "e", "protocolVersion": 1,
    })));
    seeds
}

/// The patches of `src/settings/tests.rs` (on the fixed declaration) and a few whole
/// `[declaration, current, patch]` inputs.
fn settings_seeds() -> Vec<Vec<u8>> {
    let patches = [
        json!([
            {"op": "test", "path": "/limits/retries", "value": 2},
            {"op": "replace", "path": "/limits/retries", "value": 5},
            {"op": "add", "path": "/reviewers/-", "value": "bob"},
            {"op": "add", "path": "/reviewers/0", "value": "cy"},
            {"op": "remove", "path": "/reviewers/1"},
        ]),
        json!([{"op": "replace", "path": "/mode", "value": "slow"}]),
        json!([{"op": "add", "path": "/reviewers", "value": []}]),
        json!([{"op": "move", "from": "/mode", "path": "/x"}]),
        json!([{"op": "test", "path": "/limits/retries", "value": 2.0}]),
        json!([{"op": "remove", "path": "/reviewers/00"}]),
        json!([{"op": "add", "path": "/reviewers/~1x~0", "value": {"a": [[[]]]}}]),
        json!([{"op": "replace", "path": "", "value": {}}]),
    ];
    let mut seeds: Vec<Vec<u8>> = patches.iter().map(|patch| patch.to_string().into_bytes()).collect();
    let deep = (0..32).fold(json!(1), |inner, _| json!([inner]));
    let wholes = [
        json!([
            {"initial": {"a": {"b": [1, 2]}, "c": "x"}, "paths": [{"path": "", "allow": ["add", "remove", "replace"]}]},
            {"a": {"b": [1, 2]}, "c": "x"},
            [{"op": "add", "path": "/a/b/1", "value": 9}, {"op": "remove", "path": "/c"}, {"op": "replace", "path": "", "value": {"z": 1}}],
        ]),
        json!([
            {"initial": {"list": []}, "paths": [{"path": "/list", "allow": ["add"]}, {"path": "/a~1b", "allow": ["replace"]}]},
            {"list": [], "a/b": 1},
            [{"op": "add", "path": "/list/-", "value": deep}],
        ]),
        json!([{"paths": []}, {}, [{"op": "test", "path": "", "value": {}}]]),
    ];
    seeds.extend(wholes.iter().map(|whole| whole.to_string().into_bytes()));
    seeds
}
