//! Client identity and reconnects against the real server: a Unix-socket proxy between the
//! CLI's client and the server drops connections at chosen moments (after the server
//! committed a command and before its answer reached the client; while a submission is
//! still validating; while a subscription is live). The client reconnects, resends with the
//! same client ID and idempotency key under a new request ID, and adopts the stored receipt;
//! the operation is applied once. The client ID is stable across clients and processes and
//! stored user-only.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pi_workflows::client::{Client, ClientError, RETRIES_MAX};
use pi_workflows::protocol::{EventKind, JsonObject, Operation, Outcome};
use serde_json::{Value, json};

use common::{SERVER_WAIT, pi_workflows, query_db, wait_for_db};

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    /// Queue `runs` runs (with a stored definition of `nodes` nodes, so views work), then
    /// start a server whose runners follow `script`.
    fn start(runs: usize, nodes: usize, script: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("piwr").tempdir_in("/tmp").expect("dir");
        common::queue_with_definition(dir.path(), runs, nodes);
        let out = pi_workflows(dir.path(), &["server", "start"], script);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.path().join("server").join("server.sock")
    }

    fn count(&self, sql: &str) -> i64 {
        query_db(self.path(), sql)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        common::stop_server(self.dir.path());
    }
}

// ---------------------------------------------------------------------------------------
// The proxy
// ---------------------------------------------------------------------------------------

/// What the proxy does to one client connection.
#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Forward both ways until either side closes.
    Forward,
    /// Forward `hello` and the first request, read the server's answer (so it has committed
    /// and answered), then close the client's side without forwarding it.
    DropAnswer,
    /// Forward `hello` and the first request, wait, then close the client's side while the
    /// server still works on the answer.
    DropAfter(Duration),
    /// Forward both ways until the server sent this many lines (`hello` included), then
    /// close both sides.
    DropAfterLines(usize),
}

#[derive(Default)]
struct ProxyLog {
    /// Every request line a client sent, in order.
    requests: Vec<Value>,
    /// Answers the proxy swallowed.
    dropped: Vec<Value>,
    /// What `probe` read from the database at each drop.
    probes: Vec<String>,
    connections: usize,
}

struct Proxy {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    log: Arc<Mutex<ProxyLog>>,
}

impl Proxy {
    /// A proxy to `upstream`: the n-th connection follows `plans[n]`, later ones `then`.
    /// `probe` (state dir, SQL returning text) is read at each drop.
    fn start(upstream: PathBuf, plans: Vec<Plan>, then: Plan, probe: Option<(PathBuf, &'static str)>) -> Self {
        let dir = tempfile::Builder::new().prefix("piwx").tempdir_in("/tmp").expect("dir");
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).expect("bind proxy");
        let log = Arc::new(Mutex::new(ProxyLog::default()));
        let shared = Arc::clone(&log);
        std::thread::spawn(move || {
            for (index, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { break };
                let plan = plans.get(index).copied().unwrap_or(then);
                shared.lock().expect("log").connections += 1;
                let (upstream, log, probe) = (upstream.clone(), Arc::clone(&shared), probe.clone());
                std::thread::spawn(move || serve(client, &upstream, plan, &log, probe));
            }
        });
        Self { _dir: dir, socket, log }
    }

    fn requests(&self) -> Vec<Value> {
        self.log.lock().expect("log").requests.clone()
    }
}

fn read_line(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    match reader.read_until(b'\n', &mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

fn parsed(line: &[u8]) -> Value {
    serde_json::from_slice(line).expect("a JSON line")
}

fn serve(client: UnixStream, upstream: &Path, plan: Plan, log: &Mutex<ProxyLog>, probe: Option<(PathBuf, &str)>) {
    let Ok(server) = UnixStream::connect(upstream) else {
        return;
    };
    let mut from_server = BufReader::new(server.try_clone().expect("clone"));
    let mut from_client = BufReader::new(client.try_clone().expect("clone"));
    let (mut to_client, mut to_server) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
    let drop_both = |log: &Mutex<ProxyLog>| {
        if let Some((state_dir, sql)) = &probe {
            let found: String = query_db(state_dir, sql);
            log.lock().expect("log").probes.push(found);
        }
        let _ = client.shutdown(std::net::Shutdown::Both);
        let _ = server.shutdown(std::net::Shutdown::Both);
    };
    let Some(hello) = read_line(&mut from_server) else {
        return;
    };
    if to_client.write_all(&hello).is_err() {
        return;
    }
    let mut forward_first_request = || {
        let request = read_line(&mut from_client)?;
        log.lock().expect("log").requests.push(parsed(&request));
        to_server.write_all(&request).ok()
    };
    match plan {
        Plan::DropAnswer => {
            if forward_first_request().is_none() {
                return;
            }
            if let Some(answer) = read_line(&mut from_server) {
                log.lock().expect("log").dropped.push(parsed(&answer));
            }
            drop_both(log);
        }
        Plan::DropAfter(wait) => {
            if forward_first_request().is_none() {
                return;
            }
            std::thread::sleep(wait);
            drop_both(log);
        }
        Plan::Forward | Plan::DropAfterLines(_) => {
            let limit = match plan {
                Plan::DropAfterLines(lines) => lines.saturating_sub(1),
                _ => usize::MAX,
            };
            // Whichever side ends first ends both: the client sees its connection lost.
            let (client_side, server_side) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
            let downstream = std::thread::spawn(move || {
                for _ in 0..limit {
                    let Some(line) = read_line(&mut from_server) else { break };
                    if to_client.write_all(&line).is_err() {
                        break;
                    }
                }
                let _ = client_side.shutdown(std::net::Shutdown::Both);
                let _ = server_side.shutdown(std::net::Shutdown::Both);
            });
            while let Some(request) = read_line(&mut from_client) {
                log.lock().expect("log").requests.push(parsed(&request));
                if to_server.write_all(&request).is_err() {
                    break;
                }
            }
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = server.shutdown(std::net::Shutdown::Both);
            let _ = downstream.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn object(value: Value) -> JsonObject {
    serde_json::from_value(value).expect("object")
}

fn wait_running(server: &Server) {
    wait_for_db(
        server.path(),
        "the run is running",
        "SELECT count(*) FROM runs WHERE status = 'running'",
    );
}

/// The requests the proxy saw for one idempotency key: same client ID and key, distinct
/// request IDs.
fn assert_one_identity_new_request_ids(requests: &[Value], key: &str, client_id: &str, expected: usize) {
    let keyed: Vec<&Value> = requests.iter().filter(|r| r["idempotencyKey"] == key).collect();
    assert_eq!(keyed.len(), expected, "{requests:#?}");
    assert!(keyed.iter().all(|r| r["clientId"] == client_id), "{keyed:#?}");
    let mut ids: Vec<&str> = keyed.iter().map(|r| r["requestId"].as_str().expect("id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), expected, "every attempt has a new request ID: {keyed:#?}");
    assert!(
        keyed.windows(2).all(|pair| pair[0]["payload"] == pair[1]["payload"]),
        "the same payload"
    );
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn a_command_whose_answer_was_lost_after_commit_adopts_its_receipt_on_reconnect() {
    let server = Server::start(1, 1000, "steps=1000,step-delay-ms=50");
    wait_running(&server);
    let proxy = Proxy::start(server.socket(), vec![Plan::DropAnswer], Plan::Forward, None);
    let mut client = Client::connect(&proxy.socket).expect("connect through the proxy");
    let key = "pause-once";
    let answer = client
        .request_keyed(
            Operation::RunPause,
            Some("run-0"),
            JsonObject::new(),
            Some(key.to_string()),
        )
        .expect("the client reconnects and gets an answer");

    let log = proxy.log.lock().expect("log");
    assert_eq!(log.dropped.len(), 1, "the proxy swallowed the first answer");
    let dropped = &log.dropped[0];
    assert_eq!(dropped["outcome"], "accepted", "the first attempt committed: {dropped}");
    assert_eq!(log.connections, 2, "one reconnect");
    assert_eq!(answer.outcome, Outcome::Adopted, "{:?}", answer.error);
    assert_eq!(
        json!(answer.receipt.expect("receipt")),
        dropped["receipt"],
        "the stored receipt, unchanged"
    );
    assert_one_identity_new_request_ids(&log.requests, key, client.client_id(), 2);
    drop(log);

    // Applied once: one command under this identity, reached by both request IDs; the run
    // paused by one event.
    assert_eq!(
        server.count(&format!(
            "SELECT count(*) FROM host_commands WHERE idempotency_key = '{key}'"
        )),
        1
    );
    assert_eq!(
        server.count(&format!(
            "SELECT count(*) FROM host_command_requests r JOIN host_commands c ON c.request_id = r.command_request_id
             WHERE c.idempotency_key = '{key}'"
        )),
        2
    );
    assert_eq!(server.count("SELECT paused FROM runs WHERE run_id = 'run-0'"), 1);
    assert_eq!(
        server.count("SELECT count(*) FROM events WHERE run_id = 'run-0' AND event_type = 'run.paused'"),
        1
    );
}

#[test]
fn a_submission_stays_pending_across_a_reconnect_and_answers_its_one_verdict() {
    // The step's checks take 1.5 s: the connection is lost while the submission validates.
    let server = Server::start(
        1,
        3,
        "steps=3,checkpoint-at=2,request-kind=agent,verdict=accept,verdict-delay-ms=1500",
    );
    wait_for_db(
        server.path(),
        "the run waits for the agent's output",
        "SELECT count(*) FROM runs WHERE status = 'waiting'",
    );
    let probe = (
        server.path().to_path_buf(),
        "SELECT coalesce((SELECT group_concat(outcome) FROM interactive_submissions), 'none')",
    );
    let proxy = Proxy::start(
        server.socket(),
        vec![Plan::DropAfter(Duration::from_millis(400))],
        Plan::Forward,
        Some(probe),
    );
    let mut client = Client::connect(&proxy.socket).expect("connect through the proxy");
    let key = "submit-once";
    let payload = object(json!({"output": {"summary": "done"}}));
    let answer = client
        .request_keyed(
            Operation::InteractionSubmit,
            Some("run-0"),
            payload,
            Some(key.to_string()),
        )
        .expect("an answer after the reconnect");

    let log = proxy.log.lock().expect("log");
    assert_eq!(
        log.probes,
        vec!["validating".to_string()],
        "the connection was lost while the submission validated"
    );
    assert!(
        matches!(answer.outcome, Outcome::Accepted | Outcome::Adopted),
        "{:?} {:?}",
        answer.outcome,
        answer.error
    );
    let receipt = answer.receipt.expect("receipt");
    assert_eq!(receipt["outcome"], "accepted", "answered with the runner's verdict");
    assert_one_identity_new_request_ids(&log.requests, key, client.client_id(), 2);
    drop(log);
    assert_eq!(
        server.count("SELECT count(*) FROM interactive_submissions"),
        1,
        "the resend recorded no second candidate"
    );
    assert_eq!(
        server.count(&format!(
            "SELECT count(*) FROM host_commands WHERE idempotency_key = '{key}'"
        )),
        1
    );
    wait_for_db(
        server.path(),
        "the run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
}

#[test]
fn a_subscription_is_restored_after_a_reconnect_under_the_id_the_caller_holds() {
    let server = Server::start(1, 400, "steps=400,step-delay-ms=20");
    // hello, the watch's answer and two events; then the connection is gone.
    let proxy = Proxy::start(server.socket(), vec![Plan::DropAfterLines(4)], Plan::Forward, None);
    let mut client = Client::connect(&proxy.socket).expect("connect through the proxy");
    let watched = client
        .request_for(Operation::ViewRunWatch, Some("run-0"), JsonObject::new())
        .expect("watch");
    let subscription = watched.receipt.expect("receipt")["subscriptionId"]
        .as_str()
        .expect("subscription ID")
        .to_string();
    let deadline = Instant::now() + SERVER_WAIT;
    let mut revisions = Vec::new();
    // Events keep coming past the loss, all under the subscription ID the caller got.
    while proxy.log.lock().expect("log").connections < 2 || revisions.len() < 6 {
        assert!(
            Instant::now() < deadline,
            "events stopped: {revisions:?}, {:#?}",
            proxy.requests()
        );
        let Some(event) = client.next_event(Duration::from_millis(200)).expect("events") else {
            continue;
        };
        assert_eq!(event.subscription_id.as_str(), subscription);
        assert!(
            matches!(event.event, EventKind::RunSnapshot | EventKind::RunPatch),
            "{:?}",
            event.event
        );
        revisions.push(event.revision.expect("revision").get());
    }
    let requests = proxy.requests();
    let watches: Vec<&Value> = requests.iter().filter(|r| r["operation"] == "view.run.watch").collect();
    assert_eq!(watches.len(), 2, "one restore: {requests:#?}");
    assert!(
        watches[1]["payload"]["sinceRevision"].as_u64().is_some(),
        "restored from the newest revision seen: {}",
        watches[1]
    );
    // The caller's unwatch reaches the restored subscription.
    let unwatched = client
        .request(
            Operation::ViewRunUnwatch,
            object(json!({"subscriptionId": subscription})),
        )
        .expect("unwatch");
    let receipt = unwatched.receipt.expect("receipt");
    assert_eq!(receipt["removed"], true, "{receipt:?}");
    assert_eq!(receipt["subscriptionId"], subscription.as_str());
}

#[test]
fn retries_are_bounded_and_end_with_what_happened_and_what_to_do() {
    let server = Server::start(1, 3, "steps=3");
    // Every answer is swallowed.
    let proxy = Proxy::start(server.socket(), vec![], Plan::DropAnswer, None);
    let mut client = Client::connect(&proxy.socket).expect("connect through the proxy");
    let started = Instant::now();
    let err = client
        .request_for(Operation::RunPause, Some("run-0"), JsonObject::new())
        .expect_err("no answer ever arrives");
    let elapsed = started.elapsed();
    let ClientError::ConnectionLost { attempts, .. } = &err else {
        panic!("expected a lost connection, got {err:?}");
    };
    assert_eq!(*attempts, RETRIES_MAX);
    let message = err.to_string();
    assert!(message.contains("waiting for the answer to run.pause"), "{message}");
    assert!(message.contains("may have been applied"), "{message}");
    assert_eq!(
        proxy.requests().len(),
        1 + RETRIES_MAX,
        "the first send and its resends"
    );
    assert!(
        elapsed >= Duration::from_millis(1_400),
        "the backoff waits: {elapsed:?}"
    );
    assert!(elapsed < SERVER_WAIT, "{elapsed:?}");

    // A refusal is an answer: never resent.
    let proxy = Proxy::start(server.socket(), vec![], Plan::Forward, None);
    let mut client = Client::connect(&proxy.socket).expect("connect through the proxy");
    let refused = client
        .request_for(Operation::RunPause, Some("run-none"), JsonObject::new())
        .expect("an answer");
    assert_eq!(refused.outcome, Outcome::NotFound);
    assert_eq!(proxy.requests().len(), 1);
}

#[test]
fn the_client_id_is_stable_across_clients_and_processes_and_stored_user_only() {
    let server = Server::start(0, 1, "");
    let first = Client::connect(&server.socket()).expect("connect");
    let second = Client::connect(&server.socket()).expect("connect");
    assert_eq!(first.client_id(), second.client_id());
    assert!(first.client_id().starts_with("cli-"), "{}", first.client_id());
    let file = server.path().join("clients").join("cli.id");
    assert_eq!(
        std::fs::read_to_string(&file).expect("the ID file"),
        format!("{}\n", first.client_id())
    );
    let mode = |path: &Path| std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().expect("dir")), 0o700);

    // Another process (the CLI) sends the same ID: its command row names it.
    let out = pi_workflows(server.path(), &["run", "pause", "run-none"], "");
    assert!(!out.status.success(), "pausing a run that does not exist is refused");
    let recorded: String = query_db(
        server.path(),
        "SELECT group_concat(DISTINCT client_id) FROM host_commands",
    );
    assert_eq!(recorded, first.client_id());

    // A corrupt file is replaced (with a warning), never a failure.
    std::fs::write(&file, "not a valid id\n").expect("corrupt");
    let out = pi_workflows(server.path(), &["runs", "--json"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("was unusable"), "{stderr}");
    let replaced = std::fs::read_to_string(&file).expect("the ID file");
    assert!(replaced.starts_with("cli-") && replaced != format!("{}\n", first.client_id()));
    assert_eq!(mode(&file), 0o600);
}

/// A second submission (another key) while the first is being checked is told the run is
/// busy — a retryable refusal, stored nowhere — and the first one's verdict stands.
#[test]
fn a_second_submission_while_one_is_checked_is_refused_as_busy_and_stores_nothing() {
    let server = Server::start(
        1,
        3,
        "steps=3,checkpoint-at=2,request-kind=agent,verdict=accept,verdict-delay-ms=1500",
    );
    wait_for_db(
        server.path(),
        "the run waits for the agent's output",
        "SELECT count(*) FROM runs WHERE status = 'waiting'",
    );
    let socket = server.socket();
    let first = std::thread::spawn(move || {
        let mut client = Client::connect(&socket).expect("connect");
        let payload = object(json!({"output": {"summary": "first"}}));
        client
            .request_keyed(
                Operation::InteractionSubmit,
                Some("run-0"),
                payload,
                Some("first".to_string()),
            )
            .expect("the first answer")
    });
    wait_for_db(
        server.path(),
        "the first submission is being checked",
        "SELECT count(*) FROM interactive_submissions WHERE outcome = 'validating'",
    );
    let mut client = Client::connect(&server.socket()).expect("connect");
    let payload = object(json!({"output": {"summary": "second"}}));
    let second = client
        .request_keyed(
            Operation::InteractionSubmit,
            Some("run-0"),
            payload,
            Some("second".to_string()),
        )
        .expect("the second answer");
    assert_eq!(second.outcome, Outcome::Rejected, "{:?}", second.error);
    assert_eq!(second.error.as_ref().map(|error| error.code.as_str()), Some("runBusy"));
    assert_eq!(
        server.count("SELECT count(*) FROM host_commands WHERE idempotency_key = 'second'"),
        0,
        "a busy refusal is not the command's final answer"
    );
    let first = first.join().expect("first");
    assert_eq!(first.receipt.expect("receipt")["outcome"], "accepted");
    assert_eq!(server.count("SELECT count(*) FROM interactive_submissions"), 1);
}
