//! The real `pi-workflows` server on a temporary state directory: ownership, permissions,
//! takeover after SIGKILL, idle exit, the front door, status privacy, and its allocator
//! settings.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

struct StateDir {
    dir: tempfile::TempDir,
}

impl StateDir {
    fn new() -> Self {
        // Short paths: a Unix socket path holds at most 107 bytes.
        Self {
            dir: tempfile::Builder::new()
                .prefix("piw")
                .tempdir_in("/tmp")
                .expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.path().join("server/server.sock")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run pi-workflows")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
        command.arg("--state-dir").arg(self.path()).args(args);
        command
    }

    fn start(&self) -> String {
        let out = self.run(&["server", "start"]);
        assert!(
            out.status.success(),
            "server start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn status_json(&self) -> serde_json::Value {
        let out = self.run(&["server", "status", "--json"]);
        serde_json::from_slice(&out.stdout).expect("status is one JSON document")
    }

    fn server_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.path().join("server/server.lock")).expect("lock file");
        text.trim().parse().expect("pid in the lock file")
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = self.run(&["server", "stop"]);
    }
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // A zombie (state Z) has exited; only its parent has not reaped it yet.
    !stat.is_empty()
        && !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with('Z')
}

fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("exists").permissions().mode() & 0o777
}

/// A raw client: connects, returns the hello line.
fn connect(socket: &Path) -> (BufReader<UnixStream>, UnixStream, String) {
    let stream = UnixStream::connect(socket).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut hello = String::new();
    reader.read_line(&mut hello).expect("hello");
    (reader, stream, hello)
}

fn status_request(request_id: &str) -> String {
    format!(
        "{{\"clientId\":\"test-client\",\"operation\":\"server.status\",\"payload\":{{}},\"requestId\":\"{request_id}\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}}\n"
    )
}

#[test]
fn start_creates_user_only_files_and_status_reports_counts() {
    let state = StateDir::new();
    let started = state.start();
    assert!(started.contains("epoch 1"), "{started}");
    assert_eq!(mode(state.path()), 0o700);
    assert_eq!(mode(&state.path().join("server")), 0o700);
    assert_eq!(mode(&state.socket()), 0o600);
    assert_eq!(mode(&state.path().join("server/server.lock")), 0o600);
    assert_eq!(mode(&state.path().join("state.sqlite")), 0o600);
    assert_eq!(mode(&state.path().join("logs/server.log")), 0o600);
    let status = state.status_json();
    assert_eq!(status["state"], "running");
    assert_eq!(status["epoch"], 1);
    assert_eq!(status["queued"], 0);
    // A second start succeeds quietly.
    let again = state.run(&["server", "start"]);
    assert!(again.status.success());
    assert!(again.stdout.is_empty(), "{}", String::from_utf8_lossy(&again.stdout));
}

#[test]
fn a_second_live_server_refuses_with_a_clear_message() {
    let state = StateDir::new();
    state.start();
    let second = state.run(&["server", "run"]);
    assert_eq!(second.status.code(), Some(1));
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(message.contains("already running"), "{message}");
    assert_eq!(
        state.status_json()["state"],
        "running",
        "the first server must be unaffected"
    );
}

/// Found by `examples/torture.rs`: of two CLI commands that start the server on demand at
/// once, the one whose server lost the lock used to fail ("another pi-workflows server is
/// already running") while the winner was still starting; both must succeed on one server.
#[test]
fn concurrent_starts_on_demand_all_succeed_on_one_server() {
    let state = StateDir::new();
    state.start();
    state.run(&["server", "stop"]);
    for round in 0..5 {
        let commands: Vec<_> = [
            &["server", "start"][..],
            &["runs", "--json"][..],
            &["server", "start"][..],
        ]
        .iter()
        .map(|args| {
            state
                .command(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
        for child in commands {
            let out = child.wait_with_output().expect("wait");
            assert!(
                out.status.success(),
                "round {round}: a concurrent start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            state.status_json()["epoch"],
            round + 2,
            "round {round}: exactly one new server (epoch)"
        );
        state.run(&["server", "stop"]);
    }
}

/// What the two cases above come down to: this start's server exits because another process
/// holds the lock (here the test, as a killed server's exiting threads would); the start waits
/// while it is held and starts a server once it is free, instead of failing at once.
#[test]
fn a_start_waits_while_the_lock_is_held_and_starts_once_it_is_free() {
    let state = StateDir::new();
    state.start();
    state.run(&["server", "stop"]);
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(state.path().join("server/server.lock"))
        .expect("lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).expect("hold the lock");
    let start = state
        .command(&["server", "start"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(500));
    drop(lock);
    let out = start.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "the start gave up while the lock was held: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(state.status_json()["epoch"], 2);
}

/// Also found by `examples/torture.rs`: a SIGKILLed server's main thread is a zombie at
/// once, but its other threads hold its files, the lock among them, for a few more ms. A
/// start in that window used to fail ("already running"); it must wait for the lock instead.
#[test]
fn a_start_right_after_a_sigkill_succeeds() {
    let state = StateDir::new();
    for round in 0..10 {
        state.start();
        let pid = state.server_pid();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
        let out = state.run(&["server", "start"]);
        assert!(
            out.status.success(),
            "round {round}: a start right after the SIGKILL failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the killed server is gone", || !alive(pid));
    }
}

#[test]
fn after_sigkill_a_new_server_takes_over_with_the_next_epoch() {
    let state = StateDir::new();
    state.start();
    let pid = state.server_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
    wait_until("the killed server is gone", || !alive(pid));
    // The old lease is still unexpired (30 s); the lock proves the old server is gone.
    let started_at = Instant::now();
    let output = state.start();
    assert!(output.contains("epoch 2"), "{output}");
    assert!(
        started_at.elapsed() < Duration::from_secs(15),
        "the takeover waited for the old lease"
    );
    assert_eq!(state.status_json()["epoch"], 2);
}

#[test]
fn the_server_exits_when_idle_and_starts_again() {
    let state = StateDir::new();
    let out = state
        .command(&["server", "start"])
        .env("PI_WORKFLOWS_IDLE_EXIT_MS", "300")
        .output()
        .expect("start");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pid = state.server_pid();
    wait_until("the idle server exits", || !alive(pid));
    assert!(!state.socket().exists(), "an idle exit removes the socket");
    assert!(state.start().contains("epoch 2"));
}

#[test]
fn a_bad_frame_closes_only_its_own_connection() {
    let state = StateDir::new();
    state.start();
    let (mut good_reader, mut good, hello) = connect(&state.socket());
    assert!(
        hello.contains("\"type\":\"hello\"") && hello.contains("packageVersion"),
        "{hello}"
    );
    let (mut bad_reader, mut bad, _) = connect(&state.socket());
    bad.write_all(b"{\"type\": \"request\"}\n").expect("send garbage");
    let mut rest = String::new();
    assert_eq!(
        bad_reader.read_line(&mut rest).expect("read"),
        0,
        "the bad connection must be closed: {rest}"
    );

    good.write_all(status_request("req-1").as_bytes()).expect("send");
    let mut response = String::new();
    good_reader.read_line(&mut response).expect("response");
    assert!(
        response.contains("\"outcome\":\"accepted\"") && response.contains("\"requestId\":\"req-1\""),
        "{response}"
    );

    // An oversized frame is refused the same way, and the good client still works.
    let (mut big_reader, mut big, _) = connect(&state.socket());
    let _ = big.write_all(&vec![b'x'; 1024 * 1024 + 16]);
    let mut rest = String::new();
    assert_eq!(big_reader.read_line(&mut rest).unwrap_or(0), 0);
    good.write_all(status_request("req-2").as_bytes()).expect("send");
    response.clear();
    good_reader.read_line(&mut response).expect("response");
    assert!(response.contains("\"requestId\":\"req-2\""), "{response}");
}

#[test]
fn status_output_contains_no_path_or_id_of_the_test() {
    let state = StateDir::new();
    state.start();
    let (_reader, _client, _) = connect(&state.socket());
    let json = state.run(&["server", "status", "--json", "--tree"]);
    let text = state.run(&["server", "status", "--tree"]);
    for output in [&json, &text] {
        assert!(output.status.success());
        let out = String::from_utf8_lossy(&output.stdout);
        assert!(
            out.contains("runners") && out.contains("scheduler"),
            "tree missing: {out}"
        );
        let root = state.path().to_string_lossy().into_owned();
        let pid = state.server_pid().to_string();
        for secret in [root.as_str(), "piw", "test-client", pid.as_str(), "/tmp", "/root"] {
            assert!(!out.contains(secret), "status printed {secret:?}: {out}");
        }
    }
}

#[test]
fn stop_and_sigterm_shut_down_gracefully() {
    let state = StateDir::new();
    state.start();
    let pid = state.server_pid();
    let stop = state.run(&["server", "stop"]);
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    assert!(!alive(pid));
    assert!(!state.socket().exists());

    state.start();
    let pid = state.server_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).expect("term");
    wait_until("SIGTERM stops the server", || !alive(pid));
    let log = std::fs::read_to_string(state.path().join("logs/server.log")).expect("log");
    assert!(log.contains("reason=\"signal\""), "{log}");
    assert_eq!(
        state.run(&["server", "status"]).status.code(),
        Some(3),
        "status of a stopped server exits 3"
    );
}

#[test]
fn a_socket_path_that_is_too_long_is_a_clear_error() {
    let root = tempfile::Builder::new().prefix("piw").tempdir_in("/tmp").expect("dir");
    let long = root.path().join("d".repeat(100));
    let out = Command::new(env!("CARGO_BIN_EXE_pi-workflows"))
        .arg("--state-dir")
        .arg(&long)
        .args(["server", "start"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains("107-byte limit") && message.contains("shorter"),
        "{message}"
    );
}

#[test]
fn a_server_whose_state_directory_is_removed_stops_and_a_new_one_runs_alone() {
    let state = StateDir::new();
    state.start();
    let old = state.server_pid();
    std::fs::remove_dir_all(state.path()).expect("rm -rf the state directory");
    // At once: the new server waits for the old one (which stops within a second), so the
    // two never run side by side.
    state.start();
    assert!(!alive(old), "the old server still runs next to the new one");
    let new = state.server_pid();
    assert_ne!(old, new);
    assert_eq!(state.status_json()["epoch"], 1, "a fresh directory starts at epoch 1");
}

#[test]
fn a_server_whose_socket_is_removed_stops() {
    let state = StateDir::new();
    state.start();
    let pid = state.server_pid();
    std::fs::remove_file(state.socket()).expect("remove the socket");
    wait_until("the server notices and exits", || !alive(pid));
    let log = std::fs::read_to_string(state.path().join("logs/server.log")).unwrap_or_default();
    assert!(log.contains("socket was removed or replaced"), "{log}");
    assert!(log.contains("stateRemoved"), "{log}");
}

/// A setting out of its bounds stops the start with what is wrong, and leaves nothing behind.
#[test]
fn a_warm_demand_window_out_of_bounds_is_refused_at_start() {
    let state = StateDir::new();
    for bad in ["50", "600001", "soon"] {
        let out = state
            .command(&["server", "start"])
            .env("PI_WORKFLOWS_WARM_DEMAND_MS", bad)
            .output()
            .expect("run pi-workflows");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: the start succeeded");
        assert!(
            stderr.contains("PI_WORKFLOWS_WARM_DEMAND_MS"),
            "{bad}: the error names the variable: {stderr}"
        );
    }
    // Nothing was left behind: a start with the default window succeeds.
    state.start();
}

/// glibc's malloc arenas of a thread (not the main heap) in a process's memory map: a
/// read-write mapping that starts on a 64 MiB boundary, followed at once by the reserved rest
/// (`---p`) up to the next. Each such heap is an arena's.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn thread_arenas(pid: i32) -> usize {
    const HEAP_BYTES_MAX: u64 = 64 * 1024 * 1024;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mappings: Vec<(u64, u64, String, bool)> = maps
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields[0].split_once('-').expect("an address range");
            let address = |hex: &str| u64::from_str_radix(hex, 16).expect("a hex address");
            (address(start), address(end), fields[1].to_owned(), fields.len() == 5)
        })
        .collect();
    mappings
        .windows(2)
        .filter(|pair| {
            let (start, end, perms, anonymous) = &pair[0];
            let (next_start, next_end, next_perms, next_anonymous) = &pair[1];
            start % HEAP_BYTES_MAX == 0
                && perms == "rw-p"
                && next_perms == "---p"
                && *anonymous
                && *next_anonymous
                && next_start == end
                && next_end - start == HEAP_BYTES_MAX
        })
        .count()
}

/// The server's allocator settings (docs/PERFORMANCE.md, thirty-fourth and thirty-fifth
/// rounds): one arena for all its threads and no per-thread cache of freed chunks, which
/// glibc reads only when a process starts, so the server starts itself again with them, under
/// its own name. A user's own settings win, and then it starts once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_server_runs_with_one_allocator_arena_and_no_thread_cache_unless_the_user_sets_them() {
    let users = [
        ("MALLOC_ARENA_MAX", "8"),
        ("GLIBC_TUNABLES", "glibc.malloc.tcache_count=7"),
    ];
    for (user_settings, thread_arenas_expected, tuned_expected) in
        [(&users[..0], 0..=0, true), (&users[..], 1..=8, false)]
    {
        let state = StateDir::new();
        let mut start = state.command(&["server", "start"]);
        start
            .env_remove("MALLOC_ARENA_MAX")
            .env_remove("GLIBC_TUNABLES")
            .envs(user_settings.iter().copied());
        let out = start.output().expect("run pi-workflows");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // The async worker answers a request and the store writer has opened the database:
        // both threads have allocated.
        assert_eq!(state.status_json()["state"], "running");
        let pid = state.server_pid();
        let found = thread_arenas(pid);
        assert!(
            thread_arenas_expected.contains(&found),
            "{user_settings:?}: {found} thread arenas, expected {thread_arenas_expected:?}"
        );
        // /proc keeps the environment the process started with; glibc ends each tunable
        // there with a NUL as it reads them.
        let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("read the server's environ");
        let started_with: Vec<String> = environ
            .split(|&byte| byte == 0)
            .map(|entry| String::from_utf8_lossy(entry).into_owned())
            .collect();
        assert_eq!(
            started_with.iter().any(|entry| entry == "glibc.malloc.tcache_count=0"),
            tuned_expected,
            "{user_settings:?}: the server started with {:?}",
            started_with
                .iter()
                .filter(|entry| entry.contains("glibc"))
                .collect::<Vec<_>>()
        );
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("read the server's name");
        assert_eq!(name.trim_end(), "pi-workflows", "{user_settings:?}");
    }
}
