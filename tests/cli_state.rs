//! The real `pi-workflows` binary on a temporary state directory.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

fn pi_workflows(state_dir: &std::path::Path, args: &[&str]) -> Output {
    pi_workflows_with(state_dir, args, &[])
}

fn pi_workflows_with(state_dir: &std::path::Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
    command.arg("--state-dir").arg(state_dir).args(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run pi-workflows")
}

/// `state` commands start the server on demand; stop it (the test may write the file next).
struct StopsServer<'a>(&'a std::path::Path);

impl Drop for StopsServer<'_> {
    fn drop(&mut self) {
        common::stop_server(self.0);
    }
}

#[test]
fn init_creates_private_state_and_status_prints_no_path() {
    let root = tempfile::tempdir().expect("dir");
    let state_dir = root.path().join("workflows");
    let _server = StopsServer(&state_dir);
    let init = pi_workflows(&state_dir, &["state", "init"]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let dir_mode = std::fs::metadata(&state_dir).expect("dir").permissions().mode() & 0o777;
    let db_mode = std::fs::metadata(state_dir.join("state.sqlite"))
        .expect("db")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!((dir_mode, db_mode), (0o700, 0o600));

    let status = pi_workflows(&state_dir, &["state", "status", "--json"]);
    assert!(status.status.success());
    let text = String::from_utf8(status.stdout).expect("utf-8");
    let counts: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    assert_eq!(counts["queued"], 0);
    assert!(
        !text.contains(root.path().to_str().expect("path")),
        "status leaked a path: {text}"
    );
}

#[test]
fn verify_reports_a_broken_invariant_with_exit_code_3() {
    let root = tempfile::tempdir().expect("dir");
    let _server = StopsServer(root.path());
    assert!(pi_workflows(root.path(), &["state", "verify"]).status.success());
    // Break an invariant with no server running (only the server opens the live database).
    assert!(pi_workflows(root.path(), &["server", "stop"]).status.success());
    let conn = rusqlite::Connection::open(root.path().join("state.sqlite")).expect("open");
    conn.execute_batch(
        "INSERT INTO runs (run_id, workflow_name, project_path, root_run_id, definition_digest, input_hash, status,
                           revision, created_at, updated_at)
           VALUES ('r', 'w', '/p', 'r', 'd', 'i', 'queued', 1, 0, 0);
         INSERT INTO run_queue (run_id, status, available_at, updated_at) VALUES ('r', 'done', 0, 0);",
    )
    .expect("break an invariant");
    drop(conn);
    let verify = pi_workflows(root.path(), &["state", "verify"]);
    assert_eq!(verify.status.code(), Some(3));
    let text = String::from_utf8_lossy(&verify.stdout);
    assert!(text.contains("terminal queue row with a nonterminal run"), "{text}");
}

#[test]
fn a_refused_database_is_a_clear_error_with_exit_code_1() {
    let root = tempfile::tempdir().expect("dir");
    std::fs::write(root.path().join("state.sqlite"), b"not a database").expect("write");
    let out = pi_workflows(root.path(), &["state", "status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a pi-workflows state database") && err.contains(".bak"),
        "{err}"
    );
}

#[test]
fn protocol_check_marks_invalid_lines() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("protocol-check")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(
            b"{\"connectionId\":\"c1\",\"packageVersion\":\"0.1.0\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"hello\"}\n{\"type\": \"hello\"}\n",
        )
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("line 1: valid") && text.contains("line 2: invalid (not_canonical"),
        "{text}"
    );
}

mod common;

/// Two finished runs from long ago (the test clock starts on 2026-01-01) and one queued run.
fn old_runs(dir: &std::path::Path) {
    queue_at(dir, common::START_MS, &["old-1", "old-2"], &["waiting-1"]);
}

/// Runs queued at `at_ms`: `finished` are cancelled at once, `queued` stay queued.
fn queue_at(dir: &std::path::Path, at_ms: i64, finished: &[&str], queued: &[&str]) {
    use pi_workflows::store::{ManualClock, Store, runs};
    use std::sync::Arc;
    let store = Store::open(&dir.join("state.sqlite"), Arc::new(ManualClock::new(at_ms))).expect("store");
    for run_id in finished.iter().chain(queued) {
        let run = common::new_run(run_id);
        store.write(move |tx| runs::queue_run(tx, &run)).expect("queue");
    }
    for run_id in finished {
        let run_id = run_id.to_string();
        store
            .write(move |tx| runs::cancel_unclaimed(tx, &run_id, None))
            .expect("cancel");
    }
}

#[test]
fn prune_reports_first_then_deletes_only_after_a_verified_backup() {
    let root = tempfile::tempdir().expect("dir");
    let state = root.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    old_runs(&state);
    let _server = StopsServer(&state);
    // The server this starts keeps every run (no automatic sweep), so the prune sees them.
    let report = pi_workflows_with(
        &state,
        &["state", "prune", "--json"],
        &[("PI_WORKFLOWS_RETENTION_DAYS", "off")],
    );
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("JSON");
    assert_eq!(
        (report["applied"].clone(), report["trees"].clone()),
        (false.into(), 2.into())
    );
    assert_eq!(
        common::query_db::<i64>(&state, "SELECT count(*) FROM runs"),
        3,
        "a report deletes nothing"
    );

    let no_backup = pi_workflows(&state, &["state", "prune", "--apply"]);
    assert_eq!(no_backup.status.code(), Some(2), "--apply needs --backup");

    let backup = root.path().join("before-prune.sqlite");
    let backup_arg = backup.to_str().expect("path");
    let applied = pi_workflows(&state, &["state", "prune", "--apply", "--backup", backup_arg, "--json"]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let applied: serde_json::Value = serde_json::from_slice(&applied.stdout).expect("JSON");
    assert_eq!(applied["trees"], 2);
    assert_eq!(applied["backup"]["runs"], 3, "the backup was taken before the deletion");
    assert_eq!(
        std::fs::metadata(&backup).expect("backup").permissions().mode() & 0o777,
        0o600
    );
    let remaining: String = common::query_db(&state, "SELECT group_concat(run_id) FROM runs");
    assert_eq!(remaining, "waiting-1");
    let verify = pi_workflows(&state, &["state", "verify"]);
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));

    let again = pi_workflows(&state, &["state", "backup", backup_arg]);
    assert_eq!(again.status.code(), Some(1), "an existing file is never overwritten");
    assert!(String::from_utf8_lossy(&again.stderr).contains("name a new file"));
    let relative = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .current_dir(root.path())
        .arg("--state-dir")
        .arg(&state)
        .args(["state", "backup", "relative.sqlite"])
        .output()
        .expect("backup");
    assert!(
        relative.status.success(),
        "{}",
        String::from_utf8_lossy(&relative.stderr)
    );
    assert!(
        root.path().join("relative.sqlite").is_file(),
        "a relative path is taken from the working directory"
    );
}

#[test]
fn a_backup_retried_with_its_key_adopts_the_receipt_and_copies_once() {
    use pi_workflows::protocol::{JsonObject, Operation, Outcome};
    let root = tempfile::tempdir().expect("dir");
    let state = root.path().join("state");
    let _server = StopsServer(&state);
    assert!(pi_workflows(&state, &["server", "start"]).status.success());
    let backup = root.path().join("once.sqlite");
    let mut payload = JsonObject::new();
    payload.insert("path".into(), backup.to_str().expect("path").into());
    let socket = state.join("server").join("server.sock");
    let mut first = pi_workflows::client::Client::connect(&socket).expect("connect");
    let key = Some("backup-key-1".to_string());
    let made = first
        .request_keyed(Operation::StateBackup, None, payload.clone(), key.clone())
        .expect("backup");
    assert_eq!(made.outcome, Outcome::Accepted, "{:?}", made.error);
    let modified = std::fs::metadata(&backup).expect("backup").modified().expect("mtime");
    // The same client retries (say, after a reconnect): same key, new request ID.
    let retried = first
        .request_keyed(Operation::StateBackup, None, payload.clone(), key)
        .expect("retry");
    assert_eq!(retried.outcome, Outcome::Adopted);
    assert_eq!(retried.receipt, made.receipt, "the stored receipt, unchanged");
    assert_eq!(
        std::fs::metadata(&backup).expect("backup").modified().expect("mtime"),
        modified
    );
    payload.insert(
        "path".into(),
        root.path().join("other.sqlite").to_str().expect("path").into(),
    );
    let conflict = first
        .request_keyed(Operation::StateBackup, None, payload, Some("backup-key-1".to_string()))
        .expect("conflict");
    assert_eq!(conflict.outcome, Outcome::Conflict, "one key never names two payloads");
    assert!(!root.path().join("other.sqlite").exists());
}

/// Send one request on a fresh connection and hang up without reading the answer.
fn send_and_hang_up(socket: &std::path::Path, request: &pi_workflows::protocol::Request) {
    use std::io::{BufRead, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    let mut hello = String::new();
    std::io::BufReader::new(stream.try_clone().expect("clone"))
        .read_line(&mut hello)
        .expect("hello");
    let message = pi_workflows::protocol::ClientMessage::Request(request.clone());
    stream
        .write_all(&pi_workflows::protocol::encode_client_message(&message).expect("encode"))
        .expect("send");
    drop(stream);
}

#[test]
fn a_command_whose_client_hung_up_still_finishes_and_a_retry_adopts_it() {
    use pi_workflows::protocol::{ClientMessage, ClientSchema, OpaqueId, Operation, Outcome, Request};
    use std::io::{BufRead, Write};
    let root = tempfile::tempdir().expect("dir");
    let state = root.path().join("state");
    let _server = StopsServer(&state);
    assert!(pi_workflows(&state, &["server", "start"]).status.success());
    let socket = state.join("server").join("server.sock");
    let backup = root.path().join("hung-up.sqlite");
    let id = |text: &str| OpaqueId::new(text.to_string()).expect("id");
    let mut request = Request {
        schema: ClientSchema::V1,
        request_id: id("req-1"),
        client_id: id("client-hangs-up"),
        operation: Operation::StateBackup,
        idempotency_key: Some(id("key-1")),
        run_id: None,
        expected_revision: None,
        payload: serde_json::from_value(serde_json::json!({"path": backup.to_str().expect("path")})).expect("payload"),
    };
    send_and_hang_up(&socket, &request);
    // The retry: a new connection, a new request ID, the same client, key and payload.
    request.request_id = id("req-2");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut attempt = 2;
    let response = loop {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
        let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
        let mut line = String::new();
        reader.read_line(&mut line).expect("hello");
        let message = ClientMessage::Request(request.clone());
        stream
            .write_all(&pi_workflows::protocol::encode_client_message(&message).expect("encode"))
            .expect("send");
        line.clear();
        reader.read_line(&mut line).expect("response");
        let ClientMessage::Response(response) =
            pi_workflows::protocol::decode_client_message(line.as_bytes()).expect("decode")
        else {
            panic!("expected a response: {line}");
        };
        // Until the first attempt committed, the retry itself may be the one that runs (and
        // then finds the file made by the first): only an adoption proves the first finished.
        if response.outcome == Outcome::Adopted || std::time::Instant::now() > deadline {
            break response;
        }
        attempt += 1;
        request.request_id = id(&format!("req-{attempt}"));
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(response.outcome, Outcome::Adopted, "{:?}", response.error);
    assert!(backup.is_file(), "the hung-up command made its backup");
}

#[test]
fn the_server_sweeps_expired_run_trees_after_startup_and_keeps_recent_ones() {
    let root = tempfile::tempdir().expect("dir");
    let state = root.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    queue_at(&state, common::START_MS, &["old-1", "old-2"], &[]);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    queue_at(&state, now_ms, &["recent-1"], &[]);
    let _server = StopsServer(&state);
    assert!(pi_workflows(&state, &["server", "start"]).status.success());
    common::wait_for_db(
        &state,
        "the sweep deleted the expired trees",
        "SELECT count(*) = 1 FROM runs",
    );
    let remaining: String = common::query_db(&state, "SELECT group_concat(run_id) FROM runs");
    assert_eq!(remaining, "recent-1");
    let verify = pi_workflows(&state, &["state", "verify"]);
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}
