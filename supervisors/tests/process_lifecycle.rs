//! Real-process tests of spawn, capture, limits, fd inheritance, termination and reaping.
//! Bounds are generous (seconds) and nothing asserts that an operation is fast.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use supervisors::process::{
    CAPTURE_TRUNCATION_MARKER_PREFIX, CaptureReport, ExitOutcome, ProcessChild, ProcessError, ProcessSpec,
    ResourceLimit, RlimitResource, adopt_limits, spawn,
};

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const WAIT_BOUND: Duration = Duration::from_secs(30);

fn sh(script: &str) -> ProcessSpec {
    ProcessSpec::new("/bin/sh").arg("-c").arg(script)
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

/// Wait for a child that ends on its own, clean it up and return its capture report.
async fn run_to_end(mut child: ProcessChild) -> CaptureReport {
    tokio::time::timeout(WAIT_BOUND, child.wait_exit())
        .await
        .expect("bound")
        .expect("wait");
    child.terminate(Duration::from_secs(5)).await.expect("terminate");
    child.wait_capture(WAIT_BOUND).await
}

async fn wait_for_file(path: &Path) {
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn normal_exit_code_and_output_captured_to_private_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("logs/nested/out.log");
    let err = dir.path().join("logs/nested/err.log");
    let spec = sh("echo to-stdout; echo to-stderr >&2; exit 7")
        .stdout_to(&out)
        .stderr_to(&err);
    let mut child = spawn(spec).expect("spawn");
    let exit = tokio::time::timeout(WAIT_BOUND, child.wait_exit())
        .await
        .expect("bound")
        .expect("wait");
    assert_eq!(exit, ExitOutcome::Exited(7));
    let done = child.terminate(Duration::from_secs(5)).await.expect("terminate");
    assert_eq!(done.outcome, ExitOutcome::Exited(7));
    assert!(!done.escalated);
    let report = child.wait_capture(WAIT_BOUND).await;
    assert!(report.stdout.expect("stdout captured").complete);
    assert!(report.stderr.expect("stderr captured").complete);
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "to-stdout\n");
    assert_eq!(std::fs::read_to_string(&err).expect("read"), "to-stderr\n");
    assert_eq!(mode_of(&out), 0o600);
    assert_eq!(mode_of(&err), 0o600);
    assert_eq!(mode_of(&dir.path().join("logs")), 0o700);
    assert_eq!(mode_of(&dir.path().join("logs/nested")), 0o700);
}

#[tokio::test]
async fn existing_capture_file_is_truncated_and_made_private() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.log");
    std::fs::write(&out, "old content that must disappear\n").expect("write");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    run_to_end(spawn(sh("echo new").stdout_to(&out)).expect("spawn")).await;
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "new\n");
    assert_eq!(mode_of(&out), 0o600);
}

#[tokio::test]
async fn a_child_that_prints_nothing_leaves_no_capture_file_and_no_stale_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("logs/quiet.out");
    let err = dir.path().join("logs/quiet.err");
    std::fs::create_dir_all(dir.path().join("logs")).expect("mkdir");
    std::fs::write(&err, "an earlier child's output\n").expect("write");
    let child = spawn(sh("sleep 0.1").stdout_to(&out).stderr_to(&err)).expect("spawn");
    // Moved (as a warm process is at its hand-over) onto a path an earlier child used.
    let moved = dir.path().join("logs/moved.out");
    std::fs::write(&moved, "an earlier child's output\n").expect("write");
    child.move_captures(&moved, &err).expect("move");
    let report = run_to_end(child).await;
    let stdout = report.stdout.expect("stdout captured");
    assert!(stdout.complete && !stdout.write_failed && stdout.bytes_written == 0);
    assert!(!out.exists() && !moved.exists(), "no output, no file");
    assert!(
        !err.exists(),
        "an earlier file at the path never passes for this child's output"
    );
}

#[tokio::test]
async fn moved_captures_land_at_the_new_path_before_and_after_the_first_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("warm.out"), dir.path().join("warm.err"));
    let (out_moved, err_moved) = (dir.path().join("run.out"), dir.path().join("run.err"));
    // stderr prints at once (its file exists before the move); stdout only after it.
    let script = "echo early >&2; while [ ! -e go ]; do sleep 0.01; done; echo late; echo later >&2";
    let child = spawn(sh(script).stdout_to(&out).stderr_to(&err).cwd(dir.path())).expect("spawn");
    wait_for_file(&err).await;
    assert!(!out.exists(), "only the stream that printed has a file");
    child.move_captures(&out_moved, &err_moved).expect("move");
    std::fs::write(dir.path().join("go"), "").expect("go");
    run_to_end(child).await;
    assert!(!out.exists() && !err.exists(), "nothing is left at the old paths");
    assert_eq!(std::fs::read_to_string(&out_moved).expect("read"), "late\n");
    assert_eq!(std::fs::read_to_string(&err_moved).expect("read"), "early\nlater\n");
    assert_eq!(mode_of(&out_moved), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_beyond_bound_is_truncated_with_marker_and_child_completes() {
    const TOTAL_BYTES: u64 = 5_000_000;
    const BOUND_BYTES: u64 = 64 * 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.log");
    let spec = sh(&format!("head -c {TOTAL_BYTES} /dev/zero; echo finished >&2"))
        .stdout_to(&out)
        .stderr_to(dir.path().join("err.log"))
        .capture_bytes_max(BOUND_BYTES);
    let mut child = spawn(spec).expect("spawn");
    let exit = tokio::time::timeout(WAIT_BOUND, child.wait_exit())
        .await
        .expect("child blocked?")
        .expect("wait");
    assert_eq!(exit, ExitOutcome::Exited(0));
    child.terminate(Duration::from_secs(5)).await.expect("terminate");
    let report = child.wait_capture(WAIT_BOUND).await;
    let stdout = report.stdout.expect("stdout captured");
    assert!(stdout.complete && stdout.truncated && !stdout.write_failed);
    assert_eq!(stdout.bytes_written, BOUND_BYTES);
    assert_eq!(stdout.bytes_discarded, TOTAL_BYTES - BOUND_BYTES);
    let bytes = std::fs::read(&out).expect("read");
    let (data, marker) = bytes.split_at(usize::try_from(BOUND_BYTES).expect("fits"));
    assert!(data.iter().all(|&b| b == 0));
    let marker = std::str::from_utf8(marker).expect("utf8 marker");
    assert_eq!(
        marker,
        format!("\n{CAPTURE_TRUNCATION_MARKER_PREFIX}{BOUND_BYTES} bytes]\n")
    );
    let stderr = std::fs::read_to_string(dir.path().join("err.log")).expect("read");
    assert_eq!(stderr, "finished\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_ignoring_sigterm_is_killed_after_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let spec = sh(r#"trap "" TERM; : > "$1"; sleep 60"#).arg("sh").arg(&ready);
    let mut child = spawn(spec).expect("spawn");
    wait_for_file(&ready).await;
    let done = child.terminate(Duration::from_millis(300)).await.expect("terminate");
    assert_eq!(done.outcome, ExitOutcome::Signaled(SIGKILL));
    assert!(done.escalated, "SIGKILL escalation must be reported");
    assert!(!Path::new(&format!("/proc/{}", child.pid())).exists());
}

#[tokio::test]
async fn sigterm_ends_cooperative_child_without_escalation_and_leaves_no_zombie() {
    let mut child = spawn(ProcessSpec::new("sleep").arg("60")).expect("spawn");
    let pid = child.pid();
    assert_eq!(child.pgid(), pid);
    let done = child.terminate(Duration::from_secs(20)).await.expect("terminate");
    assert_eq!(done.outcome, ExitOutcome::Signaled(SIGTERM));
    assert!(!done.escalated);
    assert!(child.is_reaped());
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "leader left as zombie");
    // Idempotent.
    assert_eq!(child.terminate(Duration::from_secs(1)).await.expect("again"), done);
}

#[tokio::test]
async fn brutal_kill_reaps_immediately() {
    let mut child = spawn(ProcessSpec::new("sleep").arg("60")).expect("spawn");
    let pid = child.pid();
    let done = child.kill().await.expect("kill");
    assert_eq!(done.outcome, ExitOutcome::Signaled(SIGKILL));
    assert!(done.escalated);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[tokio::test]
async fn wait_exit_leaves_leader_unreaped_until_cleanup() {
    for polling in [false, true] {
        let mut child = spawn(sh("exit 3")).expect("spawn");
        if polling {
            child.use_polling();
        }
        let exit = tokio::time::timeout(WAIT_BOUND, child.wait_exit())
            .await
            .expect("bound")
            .expect("wait");
        assert_eq!(exit, ExitOutcome::Exited(3));
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.pid())).expect("zombie still present");
        let state = stat[stat.rfind(')').expect("comm") + 2..].chars().next();
        assert_eq!(
            state,
            Some('Z'),
            "leader must stay a zombie until reaped (polling={polling})"
        );
        child.terminate(Duration::from_secs(5)).await.expect("terminate");
        assert!(!Path::new(&format!("/proc/{}", child.pid())).exists());
    }
}

#[tokio::test]
async fn polling_fallback_terminates_group() {
    let mut child = spawn(ProcessSpec::new("sleep").arg("60")).expect("spawn");
    child.use_polling();
    assert!(!child.uses_pidfd());
    let done = child.terminate(Duration::from_secs(20)).await.expect("terminate");
    assert_eq!(done.outcome, ExitOutcome::Signaled(SIGTERM));
}

#[tokio::test]
async fn rlimits_are_applied_before_exec() {
    let spec = sh("ulimit -n; ulimit -c; ulimit -Hn")
        .rlimit(RlimitResource::Nofile, Some(64), Some(128))
        .rlimit(RlimitResource::Core, Some(0), Some(0));
    assert_eq!(stdout_of(spec).await, "64\n0\n128\n");
}

#[tokio::test]
async fn environment_is_explicit_and_cwd_applies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = ProcessSpec::new("/bin/sh")
        .args(["-c", r#"printf '%s|%s|%s\n' "$KEEP" "${HOME-unset}" "$(pwd)""#])
        .env_clear(true)
        .env("KEEP", "value")
        .cwd(dir.path());
    let cwd = dir.path().canonicalize().expect("canonical");
    assert_eq!(stdout_of(spec).await, format!("value|unset|{}\n", cwd.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inherited_fd_appears_as_fd3_in_child() {
    let (parent_end, child_end) = UnixStream::pair().expect("socketpair");
    let spec = sh("echo hello-over-fd3 >&3").inherit_fd(OwnedFd::from(child_end), 3);
    let mut child = spawn(spec).expect("spawn");
    let received = tokio::task::spawn_blocking(move || {
        let mut parent_end = parent_end;
        parent_end.set_read_timeout(Some(WAIT_BOUND)).expect("timeout");
        let mut text = String::new();
        parent_end.read_to_string(&mut text).map(|_| text)
    })
    .await
    .expect("join")
    .expect("read until the child closed fd 3");
    assert_eq!(received, "hello-over-fd3\n");
    let done = child.terminate(Duration::from_secs(5)).await.expect("terminate");
    assert_eq!(done.outcome, ExitOutcome::Exited(0));
}

#[tokio::test]
async fn missing_program_reports_not_found_clearly() {
    let err = spawn(ProcessSpec::new("/nonexistent/pi-no-such-program")).expect_err("must fail");
    assert!(matches!(err, ProcessError::NotFound { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("could not start /nonexistent/pi-no-such-program: not found"),
        "{message}"
    );
    assert!(message.contains("check PATH"), "{message}");
}

#[tokio::test]
async fn invalid_specs_are_rejected_before_spawning() {
    let (_a, b) = UnixStream::pair().expect("socketpair");
    let cases = [
        ProcessSpec::new(""),
        ProcessSpec::new("true").inherit_fd(OwnedFd::from(b), 1),
        ProcessSpec::new("true").cwd("/nonexistent/dir/for/pi"),
        ProcessSpec::new("true").rlimit(RlimitResource::Nofile, Some(10), Some(5)),
        ProcessSpec::new("true").rlimit(RlimitResource::Nofile, None, Some(5)),
        ProcessSpec::new("true").grace(Duration::from_secs(3600)),
        ProcessSpec::new("true").capture_bytes_max(u64::MAX),
    ];
    for spec in cases {
        let err = spawn(spec).expect_err("must be rejected");
        assert!(matches!(err, ProcessError::InvalidSpec(_)), "{err:?}");
    }
}

#[test]
fn spawn_outside_runtime_is_an_error_not_a_panic() {
    let err = spawn(ProcessSpec::new("true")).expect_err("no runtime");
    assert!(matches!(err, ProcessError::NoRuntime), "{err:?}");
}

#[test]
fn owner_types_can_live_in_actors() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<supervisors::process::ProcessChild>();
    assert_send_sync::<ProcessSpec>();
    assert_send_sync::<ProcessError>();
}

/// The exit watch an actor waits on: pending while the leader lives (its exit is what ends
/// it, never a timer), resolved once it exits, and the leader is still unreaped then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_watch_resolves_when_the_leader_exits_and_leaves_it_unreaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.02; done; exit 3", go.display());
    let mut child = spawn(sh(&script)).expect("spawn");
    let Some(exited) = child.exit_watch() else {
        // No pidfd on this kernel: the actor polls instead, and there is no watch to test.
        assert!(!child.uses_pidfd());
        return;
    };
    let mut exited = Box::pin(exited);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut exited).await;
    assert!(early.is_err(), "the watch resolved while the leader was alive");
    assert_eq!(child.try_exit().expect("try_exit"), None);
    std::fs::write(&go, b"").expect("go");
    tokio::time::timeout(WAIT_BOUND, exited)
        .await
        .expect("the exit was watched");
    assert_eq!(child.try_exit().expect("try_exit"), Some(ExitOutcome::Exited(3)));
    assert!(!child.is_reaped(), "the watch never reaps");
    child.terminate(Duration::ZERO).await.expect("reap");
}

/// Runs `spec` to its end and returns what it printed on stdout.
async fn stdout_of(spec: ProcessSpec) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.log");
    let mut child = spawn(spec.stdout_to(&out)).expect("spawn");
    let exit = tokio::time::timeout(WAIT_BOUND, child.wait_exit())
        .await
        .expect("bound")
        .expect("wait");
    assert_eq!(exit, ExitOutcome::Exited(0));
    child.terminate(Duration::from_secs(5)).await.expect("terminate");
    child.wait_capture(WAIT_BOUND).await;
    std::fs::read_to_string(&out).expect("read")
}

/// The hexadecimal signal set `field` (`SigIgn`, `SigBlk`) of a `/proc/<pid>/status` text.
fn signal_set(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} missing from {status}"));
    u64::from_str_radix(line.trim(), 16).expect("hex signal set")
}

#[tokio::test]
async fn a_child_starts_with_sigpipe_at_its_default_no_signal_blocked_and_stdin_null() {
    // The test harness, like every Rust program, ignores SIGPIPE; an ignored signal would stay
    // ignored across exec, and a shell pipeline in the child would then see EPIPE errors.
    let status = stdout_of(ProcessSpec::new("/bin/cat").arg("/proc/self/status")).await;
    let sigpipe_bit = 1u64 << (13 - 1);
    assert_eq!(signal_set(&status, "SigIgn") & sigpipe_bit, 0, "{status}");
    assert_eq!(signal_set(&status, "SigBlk"), 0, "{status}");
    let stdin = stdout_of(ProcessSpec::new("/bin/readlink").arg("/proc/self/fd/0")).await;
    assert_eq!(stdin, "/dev/null\n");
}

#[tokio::test]
async fn a_bare_program_name_is_looked_up_on_the_childs_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join("piw-path-probe");
    std::fs::write(&probe, "#!/bin/sh\necho found-on-child-path\n").expect("write");
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let spec = ProcessSpec::new("piw-path-probe").env("PATH", &path);
    assert_eq!(stdout_of(spec).await, "found-on-child-path\n");
    let err = spawn(ProcessSpec::new("piw-path-probe-absent").env("PATH", &path)).expect_err("must fail");
    assert!(matches!(err, ProcessError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn limits_the_parent_already_holds_reach_the_child() {
    // Core dumps off in this test process too: harmless, and what a server adopts at start so its
    // children need no limit set between fork and exec.
    let core_off = ResourceLimit {
        resource: RlimitResource::Core,
        soft: Some(0),
        hard: Some(0),
    };
    adopt_limits(&[core_off]).expect("adopt");
    let spec = sh("ulimit -c; ulimit -Hc").rlimit(RlimitResource::Core, Some(0), Some(0));
    assert_eq!(stdout_of(spec).await, "0\n0\n");
}
