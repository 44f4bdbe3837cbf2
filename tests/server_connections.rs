//! Connection limits on the real server: a slot is given back on every path a connection
//! ends by (a peer gone before `hello` included); silent connections are closed by the
//! first-request and idle deadlines; the reserve past the normal limit still lets
//! `server status` and `server stop` in; refusals are logged rate-limited.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);
/// The server's normal limit and its reserve (`clients/listener.rs`).
const CONNECTIONS_MAX: usize = 256;
const CONNECTIONS_RESERVE: usize = 8;

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    fn start(env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new().prefix("piwc").tempdir_in("/tmp").expect("dir");
        let server = Self { dir };
        let mut command = server.command(&["server", "start"]);
        for (name, value) in env {
            command.env(name, value);
        }
        let out = command.output().expect("server start");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        server
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
        command.arg("--state-dir").arg(self.dir.path()).args(args);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run pi-workflows")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("server/server.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/server.log")).unwrap_or_default()
    }

    /// `server status --json`, once it answers.
    fn status(&self) -> serde_json::Value {
        let out = self.run(&["server", "status", "--json"]);
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }

    /// Wait until `server status` answers and `check` holds for it.
    fn wait_status(&self, what: &str, check: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.run(&["server", "status", "--json"]);
            if out.status.success() {
                let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status is JSON");
                if check(&status) {
                    return status;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.run(&["server", "stop"]);
    }
}

fn clients(status: &serde_json::Value) -> u64 {
    status["clients"].as_u64().expect("clients count")
}

/// Connect and read `hello`; `None` when the server closed the connection at once.
fn hello(socket: &Path) -> Option<(BufReader<UnixStream>, UnixStream)> {
    let stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(n) if n > 0 && line.contains("\"type\":\"hello\"") => Some((reader, stream)),
        _ => None,
    }
}

fn request(operation: &str, request_id: &str) -> String {
    format!(
        "{{\"clientId\":\"test-client\",\"operation\":\"{operation}\",\"payload\":{{}},\"requestId\":\"{request_id}\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}}\n"
    )
}

/// True once the server has closed `stream` (end of file on read).
fn closed_by_server(stream: &mut UnixStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let mut buffer = [0_u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn peers_that_close_before_hello_give_their_slots_back() {
    let server = Server::start(&[]);
    for _ in 0..300 {
        // Connect and close without reading anything: the server's `hello` finds no peer.
        drop(UnixStream::connect(server.socket()).expect("connect"));
    }
    // Only the asking client itself stays counted, and every client still gets in.
    let status = server.wait_status("only the status client is counted", |status| clients(status) == 1);
    assert_eq!(clients(&status), 1);
    let out = server.run(&["runs", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn silent_connections_cannot_lock_status_or_stop_out() {
    // Normal connections may stay silent for 20 s; the reserve's for 2 s at most.
    let server = Server::start(&[("PI_WORKFLOWS_CONNECTION_FIRST_REQUEST_MS", "20000")]);
    let silent: Vec<UnixStream> = (0..300)
        .filter_map(|_| UnixStream::connect(server.socket()).ok())
        .collect();
    // The normal slots are full of silent clients: an ordinary command is refused...
    let deadline = Instant::now() + WAIT;
    let refused = loop {
        let out = server.run(&["runs", "--json"]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        assert!(Instant::now() < deadline, "runs kept succeeding with every slot taken");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!refused.is_empty());
    // ...but `server status` gets in through the reserve once its silent holders time out.
    let status = server.wait_status("status answers from the reserve", |_| true);
    assert!(
        clients(&status) as usize > CONNECTIONS_MAX,
        "status counted {}",
        clients(&status)
    );
    assert!(clients(&status) as usize <= CONNECTIONS_MAX + CONNECTIONS_RESERVE);
    // Refusals were logged a few times, not once per refused connection.
    let warnings = server.log().matches("too many client connections").count();
    assert!((1..=3).contains(&warnings), "{warnings} refusal lines in the log");
    drop(silent);
    server.wait_status("the silent connections are gone", |status| clients(status) == 1);
    let stop = server.run(&["server", "stop"]);
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
}

#[test]
fn a_connection_in_the_reserve_may_only_ask_for_status_or_a_stop() {
    let server = Server::start(&[("PI_WORKFLOWS_CONNECTION_FIRST_REQUEST_MS", "20000")]);
    let silent: Vec<UnixStream> = (0..CONNECTIONS_MAX)
        .map(|_| UnixStream::connect(server.socket()).expect("connect"))
        .collect();
    server.wait_status("the normal slots are taken", |status| {
        clients(status) as usize > CONNECTIONS_MAX
    });
    let (mut reader, mut stream) = hello(&server.socket()).expect("a reserve slot");
    stream.write_all(request("run.list", "r1").as_bytes()).expect("send");
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("answer");
    assert!(answer.contains("\"tooManyConnections\""), "{answer}");
    assert!(
        closed_by_server(&mut stream),
        "the reserve connection is closed after the refusal"
    );
    drop(silent);
}

#[test]
fn silent_and_idle_connections_are_closed_but_subscribers_stay() {
    let server = Server::start(&[
        ("PI_WORKFLOWS_CONNECTION_FIRST_REQUEST_MS", "1000"),
        ("PI_WORKFLOWS_CONNECTION_IDLE_MS", "1500"),
    ]);
    let (_, mut silent) = hello(&server.socket()).expect("hello");
    let (mut idle_reader, mut idle) = hello(&server.socket()).expect("hello");
    idle.write_all(request("server.status", "s1").as_bytes()).expect("send");
    let mut line = String::new();
    idle_reader.read_line(&mut line).expect("answer");
    let (mut watch_reader, mut watcher) = hello(&server.socket()).expect("hello");
    watcher
        .write_all(request("view.runs.watch", "w1").as_bytes())
        .expect("send");
    line.clear();
    watch_reader.read_line(&mut line).expect("subscribed");
    assert!(line.contains("\"accepted\""), "{line}");
    let deadline = Instant::now() + WAIT;
    while !closed_by_server(&mut silent) {
        assert!(Instant::now() < deadline, "the silent connection was never closed");
    }
    while !closed_by_server(&mut idle) {
        assert!(Instant::now() < deadline, "the idle connection was never closed");
    }
    // Well past both deadlines, the subscriber is still served.
    std::thread::sleep(Duration::from_millis(2_000));
    assert!(
        !closed_by_server(&mut watcher),
        "a subscriber must not be closed for being idle"
    );
    let status = server.status();
    assert!(clients(&status) >= 2, "the watcher and the status client: {status}");
}
