//! Live-server fuzzing: envelope-valid requests with generated payloads, sent to the real
//! server binary. Every operation is covered except `server.stop`, `state.backup` and
//! `state.prune`, which would stop the server or write files. Payloads come from a seeded
//! PRNG over the payload field names the server reads, with hostile values: huge and
//! negative numbers, floats, deep nesting, long strings, paths, wrong types.
//!
//!   cargo run --release --example server -- [SECONDS] [SEED]
//!
//! The server is `$PI_WORKFLOWS_BIN`, else `../target/release/pi-workflows`; the scripted
//! runner is `$PI_WORKFLOWS_TEST_RUNNER`, else the one next to it. Checked: every request
//! gets a well-formed response with its request ID within 30 s on its own connection, or the
//! connection is closed; at the end the server still answers `server.status`, its supervision
//! tree has restarted nothing, and `state verify` finds no violation. Exit status 1 otherwise,
//! with the last requests sent (in `fuzz/artifacts/server/`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_workflows::protocol::{
    ClientMessage, ClientSchema, OpaqueId, Operation, Request, decode_client_message, encode_client_message,
};
use pi_workflows::store::{Store, SystemClock, runs};
use pi_workflows_fuzz::mutator::Rng;
use serde_json::{Map, Value, json};

const KEYS: &[&str] = &[
    "actor",
    "after",
    "answer",
    "apply",
    "before",
    "code",
    "continuationRunId",
    "coordinator",
    "data",
    "definitionSnapshot",
    "digest",
    "effectId",
    "epoch",
    "executionMode",
    "expectedChangeNumber",
    "followUpId",
    "includeResult",
    "input",
    "inputJson",
    "key",
    "kind",
    "length",
    "limit",
    "mediaType",
    "messageId",
    "newRunId",
    "note",
    "offset",
    "olderThanDays",
    "output",
    "patch",
    "path",
    "projectPath",
    "prompt",
    "requestId",
    "resolution",
    "responseEntryId",
    "result",
    "runId",
    "sessionId",
    "sinceRevision",
    "subscriptionId",
    "text",
    "tree",
    "type",
    "update",
    "workflow",
    "workflowSource",
];
const RUN_IDS: &[&str] = &["run-0", "run-1", "missing-run", "a", "run-0.x"];
const SKIPPED: &[Operation] = &[Operation::ServerStop, Operation::StateBackup, Operation::StatePrune];
const ANSWER_WAIT: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(30.0);
    let seed: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_5e7e_0000_0001);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = root.parent().unwrap_or(root);
    let server = std::env::var_os("PI_WORKFLOWS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/release/pi-workflows"));
    let runner = std::env::var_os("PI_WORKFLOWS_TEST_RUNNER")
        .map(PathBuf::from)
        .unwrap_or_else(|| server.with_file_name("pi-workflows-test-runner"));
    let dir = std::env::temp_dir().join(format!("piwfuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("state dir");
    queue(&dir);
    let cli = |args: &[&str]| {
        Command::new(&server)
            .arg("--state-dir")
            .arg(&dir)
            .args(args)
            .env("PI_WORKFLOWS_RUNNER", &runner)
            .env("PI_WORKFLOWS_TEST_SCRIPT", "steps=2,step-delay-ms=50")
            .output()
            .expect("run pi-workflows")
    };
    let started = cli(&["server", "start"]);
    assert!(
        started.status.success(),
        "server start: {}",
        String::from_utf8_lossy(&started.stderr)
    );
    let socket = dir.join("server/server.sock");

    let operations: Vec<Operation> = Operation::ALL
        .iter()
        .copied()
        .filter(|op| !SKIPPED.contains(op))
        .collect();
    let mut rng = Rng(seed);
    let mut connection = Connection::open(&socket);
    let (mut sent, mut answered, mut closed) = (0u64, 0u64, 0u64);
    let mut outcomes: std::collections::BTreeMap<String, u64> = Default::default();
    let mut recent: std::collections::VecDeque<Vec<u8>> = Default::default();
    let begin = Instant::now();
    let mut failure = None;
    while begin.elapsed() < Duration::from_secs_f64(seconds) {
        let operation = operations[rng.below(operations.len())];
        sent += 1;
        let line = request_line(&mut rng, operation, sent);
        recent.push_back(line.clone());
        if recent.len() > 20 {
            recent.pop_front();
        }
        match connection.exchange(&line, sent) {
            Exchange::Answered(outcome, code) => {
                answered += 1;
                *outcomes
                    .entry(format!("{} {outcome} {code}", operation.as_str()))
                    .or_default() += 1;
            }
            Exchange::Closed => {
                closed += 1;
                *outcomes.entry(format!("{} closed", operation.as_str())).or_default() += 1;
                connection = Connection::open(&socket);
            }
            Exchange::Failed(why) => {
                failure = Some(why);
                break;
            }
        }
    }
    let status = Connection::open(&socket).exchange(&status_line(), u64::MAX);
    let tree = cli(&["server", "status", "--tree", "--json"]);
    let restarts = restarts_of(&serde_json::from_slice(&tree.stdout).unwrap_or_default());
    let verify = cli(&["state", "verify"]);
    let _ = cli(&["server", "stop"]);
    let rate = sent as f64 / begin.elapsed().as_secs_f64();
    println!("server fuzz: {sent} requests ({rate:.0}/s), {answered} answered, {closed} connections closed");
    for (what, count) in &outcomes {
        println!("  {what:<60} {count}");
    }
    println!(
        "after: server.status {}, tree restarts {restarts}, state verify exit {}",
        matches!(status, Exchange::Answered(..)),
        verify.status
    );
    if failure.is_none() && !matches!(status, Exchange::Answered(..)) {
        failure = Some("the server stopped answering server.status".to_string());
    }
    if failure.is_none() && restarts > 0 {
        failure = Some(format!("the supervision tree restarted {restarts} time(s)"));
    }
    if failure.is_none() && !verify.status.success() {
        failure = Some(format!("state verify: {}", String::from_utf8_lossy(&verify.stdout)));
    }
    if let Some(why) = failure {
        let saved = root.join("artifacts/server");
        let _ = std::fs::create_dir_all(&saved);
        let path = saved.join(format!("recent-{seed}"));
        let _ = std::fs::write(&path, recent.iter().flatten().copied().collect::<Vec<u8>>());
        println!(
            "FAILED: {why}\nlast requests: {}\nserver log: {}",
            path.display(),
            dir.join("logs/server.log").display()
        );
        std::process::exit(1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two runs with a stored definition (one runs, one waits behind it with capacity 1).
fn queue(dir: &Path) {
    let store = Store::open(&dir.join("state.sqlite"), Arc::new(SystemClock)).expect("store");
    for run_id in ["run-0", "run-1"] {
        let run = runs::NewRun {
            run_id: run_id.to_string(),
            workflow_name: "fuzz".to_string(),
            project_path: String::new(),
            parent_run_id: None,
            root_run_id: None,
            definition_digest: format!("sha256:{}", "d".repeat(64)),
            origin: Default::default(),
            workflow_source_json: "{}".to_string(),
            input_hash: "e".repeat(64),
            execution: runs::ExecutionMode::Headless,
        };
        store.write(move |tx| runs::queue_run(tx, &run)).expect("queue");
    }
}

fn request_line(rng: &mut Rng, operation: Operation, number: u64) -> Vec<u8> {
    let mut payload = Map::new();
    for _ in 0..rng.below(5) {
        let key = KEYS[rng.below(KEYS.len())];
        payload.insert(key.to_string(), value(rng, 0));
    }
    let request = Request {
        schema: ClientSchema::V1,
        request_id: OpaqueId::new(format!("r{number}")).expect("id"),
        client_id: OpaqueId::new("fuzz-client").expect("id"),
        operation,
        idempotency_key: operation
            .is_state_changing()
            .then(|| OpaqueId::new(format!("k{}", rng.below(64))).expect("id")),
        run_id: (rng.below(4) != 0).then(|| OpaqueId::new(RUN_IDS[rng.below(RUN_IDS.len())]).expect("id")),
        expected_revision: (rng.below(4) == 0)
            .then(|| pi_workflows::protocol::Revision::new(rng.below(8) as u64).expect("rev")),
        payload,
    };
    // A payload above the 1 MiB frame limit is drawn again.
    encode_client_message(&ClientMessage::Request(request)).unwrap_or_else(|_| request_line(rng, operation, number))
}

fn value(rng: &mut Rng, depth: usize) -> Value {
    let pick = if depth > 3 { rng.below(6) } else { rng.below(10) };
    match pick {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(
            [
                -1,
                0,
                1,
                2,
                50,
                200,
                201,
                1_000_000_000_000_i64,
                9_007_199_254_740_991_i64,
                -9_007_199_254_740_991_i64
            ][rng.below(10)]
        ),
        3 => json!([0.5, -0.0, 1e300, -1e-300, 3.0e10][rng.below(5)]),
        4 => Value::String(
            [
                "",
                "run-0",
                "x",
                "/tmp",
                "/nonexistent/dir",
                "add",
                "replace",
                "remove",
                "test",
                "human",
                "session",
                "applied",
                "retry",
                "failed",
                "settings",
                "attempts",
                "history",
                "headless",
                "interactive",
                "sha256:00",
                "\u{1b}[31m",
                "é",
                "../../etc/passwd",
                "/",
                "~1",
                "-",
            ][rng.below(26)]
            .to_string(),
        ),
        5 => Value::String("x".repeat(rng.below(70_000))),
        6 | 7 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(4) {
                map.insert(KEYS[rng.below(KEYS.len())].to_string(), value(rng, depth + 1));
            }
            if rng.below(3) == 0 {
                map.insert(
                    "op".into(),
                    json!(["add", "remove", "replace", "test", "move"][rng.below(5)]),
                );
                map.insert("path".into(), json!(["", "/a", "/a/-", "/0", "/~2"][rng.below(5)]));
            }
            Value::Object(map)
        }
    }
}

fn status_line() -> Vec<u8> {
    let line = "{\"clientId\":\"fuzz-client\",\"operation\":\"server.status\",\"payload\":{},\"requestId\":\"status\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}\n";
    line.as_bytes().to_vec()
}

/// Restarts anywhere in a `server status --tree --json` document.
fn restarts_of(value: &Value) -> u64 {
    match value {
        Value::Object(map) => {
            map.get("restarts").and_then(Value::as_u64).unwrap_or(0) + map.values().map(restarts_of).sum::<u64>()
        }
        Value::Array(items) => items.iter().map(restarts_of).sum(),
        _ => 0,
    }
}

enum Exchange {
    Answered(String, String),
    Closed,
    Failed(String),
}

struct Connection {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Connection {
    fn open(socket: &Path) -> Self {
        let stream = UnixStream::connect(socket).expect("connect");
        stream.set_read_timeout(Some(ANSWER_WAIT)).expect("timeout");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut hello = Vec::new();
        reader.read_until(b'\n', &mut hello).expect("hello");
        assert!(hello.ends_with(b"\n"), "no hello");
        Self { stream, reader }
    }

    /// Send one request; skip subscription events until its response.
    fn exchange(&mut self, line: &[u8], number: u64) -> Exchange {
        if self.stream.write_all(line).is_err() {
            return Exchange::Closed;
        }
        loop {
            let mut answer = Vec::new();
            match self.reader.read_until(b'\n', &mut answer) {
                Ok(0) => return Exchange::Closed,
                Ok(_) => {}
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Exchange::Failed(format!("no answer within {} s", ANSWER_WAIT.as_secs()));
                }
                Err(_) => return Exchange::Closed,
            }
            match decode_client_message(&answer) {
                Ok(ClientMessage::Event(_)) => continue,
                Ok(ClientMessage::Response(response)) => {
                    let expected = if number == u64::MAX {
                        "status".to_string()
                    } else {
                        format!("r{number}")
                    };
                    if response.request_id.as_str() != expected {
                        return Exchange::Failed(format!("answer for {} instead of {expected}", response.request_id));
                    }
                    let code = response.error.map(|error| error.code).unwrap_or_default();
                    return Exchange::Answered(response.outcome.as_str().to_string(), code);
                }
                Ok(_) => return Exchange::Failed("a hello in the middle of a connection".to_string()),
                Err(err) => return Exchange::Failed(format!("the server sent a bad frame: {err}")),
            }
        }
    }
}
