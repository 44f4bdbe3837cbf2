//! The real `pi-workflows` binary on a temporary state directory.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

fn pi_workflows(state_dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .output()
        .expect("run pi-workflows")
}

/// `state` commands start the server on demand; stop it (the test may write the file next).
struct StopsServer<'a>(&'a std::path::Path);

impl Drop for StopsServer<'_> {
    fn drop(&mut self) {
        let _ = pi_workflows(self.0, &["server", "stop"]);
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
