//! Drives the real adapter binary against the fake Bot API: launch envelope, a 0600 token file
//! in a temp dir, frames on stdin, frames from stdout, stderr collected. Every wait is bounded.

use channel_protocol::launch::LAUNCH_ENV;
use channel_protocol::{ChannelLaunch, Frame, Header, Kind, decode_line, encode_line};
use channel_telegram::fake_api::FakeBotApi;
use serde_json::{Map, Value, json};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The bot token of every test. Its secret part is the canary: it must never leave the adapter.
pub const TOKEN: &str = "123456:CANARY-TOKEN-Zx9Qw8Er7Ty6Ui5Op4As3";
/// The secret part of [`TOKEN`].
pub const TOKEN_SECRET: &str = "CANARY-TOKEN-Zx9Qw8Er7Ty6Ui5Op4As3";
/// The allowed user.
pub const USER: i64 = 70_001;
/// The allowed private chat (the user's own).
pub const CHAT: i64 = 70_001;
/// A second allowed chat (a group).
pub const GROUP: i64 = -1_000_777_000;
/// A user who is not allowed.
pub const STRANGER: i64 = 987_654_321;
/// A chat that is not allowed.
pub const OTHER_CHAT: i64 = 123_456_789_012;
/// The profile of every test.
pub const PROFILE: &str = "ops";
/// The bound of every wait.
pub const WAIT: Duration = Duration::from_secs(20);

/// One frame the adapter wrote.
#[derive(Debug, Clone)]
pub struct Out {
    /// The kind.
    pub kind: Kind,
    /// The fencing fields.
    pub header: Header,
    /// The payload.
    pub payload: Value,
}

/// How to launch.
pub struct LaunchOptions {
    /// The adapter epoch.
    pub adapter_epoch: u64,
    /// The token written to the token file.
    pub token: String,
    /// The token file's mode.
    pub mode: u32,
    /// `apiBaseUrl` (the fake's when `None`).
    pub api_base_url: Option<String>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            adapter_epoch: 1,
            token: TOKEN.to_owned(),
            mode: 0o600,
            api_base_url: None,
        }
    }
}

/// A running adapter child.
pub struct Adapter {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: Receiver<Result<Out, String>>,
    stdout_text: Arc<Mutex<String>>,
    stderr_text: Arc<Mutex<String>>,
    stderr_done: Option<thread::JoinHandle<()>>,
    stdout_done: Option<thread::JoinHandle<()>>,
    pub adapter_epoch: u64,
    sequence: u64,
    _dir: tempfile::TempDir,
    pub token_file: PathBuf,
}

fn launch_json(options: &LaunchOptions, api_base_url: &str, token_file: &str) -> String {
    let launch = ChannelLaunch {
        schema: channel_protocol::launch::LAUNCH_SCHEMA.to_owned(),
        adapter_epoch: options.adapter_epoch,
        profile: PROFILE.to_owned(),
        api_base_url: api_base_url.to_owned(),
        token_file: token_file.to_owned(),
        allowed_user_ids: vec![USER],
        allowed_chat_ids: vec![CHAT, GROUP],
        poll_timeout_s: 1,
    };
    launch.to_json().expect("launch envelope")
}

impl Adapter {
    /// Launches with the default options against `api`.
    pub fn launch(api: &FakeBotApi) -> Self {
        Self::launch_with(api, LaunchOptions::default())
    }

    /// Launches with `options`.
    pub fn launch_with(api: &FakeBotApi, options: LaunchOptions) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("telegram.token");
        fs::write(&token_file, format!("{}\n", options.token)).expect("token file");
        fs::set_permissions(&token_file, fs::Permissions::from_mode(options.mode)).expect("chmod");
        let base_url = options.api_base_url.clone().unwrap_or_else(|| api.base_url());
        let envelope = launch_json(&options, &base_url, token_file.to_str().expect("utf-8 path"));
        Self::spawn(Some(envelope), dir, token_file, options.adapter_epoch)
    }

    /// Launches with a raw (possibly bad) envelope, or none.
    pub fn launch_raw(envelope: Option<String>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("unused");
        Self::spawn(envelope, dir, token_file, 1)
    }

    fn spawn(envelope: Option<String>, dir: tempfile::TempDir, token_file: PathBuf, adapter_epoch: u64) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows-telegram"));
        // Nothing from the test's environment (no proxy settings, no token anywhere).
        command.env_clear();
        if let Some(envelope) = envelope {
            command.env(LAUNCH_ENV, envelope);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the adapter");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let stdout_text = Arc::new(Mutex::new(String::new()));
        let stderr_text = Arc::new(Mutex::new(String::new()));
        let (sender, frames) = mpsc::channel();
        let stdout_done = {
            let text = Arc::clone(&stdout_text);
            thread::spawn(move || read_frames(stdout, &text, &sender))
        };
        let stderr_done = {
            let text = Arc::clone(&stderr_text);
            thread::spawn(move || {
                let mut reader = BufReader::new(stderr);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|bytes| bytes > 0) {
                    text.lock().expect("stderr lock").push_str(&line);
                    line.clear();
                }
            })
        };
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            frames,
            stdout_text,
            stderr_text,
            stderr_done: Some(stderr_done),
            stdout_done: Some(stdout_done),
            adapter_epoch,
            sequence: 0,
            _dir: dir,
            token_file,
        }
    }

    /// The header of the next server frame.
    pub fn next_header(&mut self, channel_revision: u64, attempt_id: Option<&str>) -> Header {
        self.sequence += 1;
        Header {
            adapter_epoch: self.adapter_epoch,
            profile: PROFILE.to_owned(),
            sequence: self.sequence,
            channel_revision,
            attempt_id: attempt_id.map(str::to_owned),
        }
    }

    /// Sends a frame with a correct header.
    pub fn send(&mut self, kind: Kind, payload: Value, channel_revision: u64, attempt_id: Option<&str>) {
        let header = self.next_header(channel_revision, attempt_id);
        self.send_with_header(kind, header, payload);
    }

    /// Sends a frame with `header` as given.
    pub fn send_with_header(&mut self, kind: Kind, header: Header, payload: Value) {
        let Value::Object(payload) = payload else {
            panic!("a payload is an object")
        };
        let line = encode_line(&Frame { kind, header, payload }).expect("encode a test frame");
        self.send_raw(&line);
    }

    /// Writes raw bytes to the adapter's stdin (errors ignored: it may have exited).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(bytes).and_then(|()| stdin.flush());
        }
    }

    /// A `channel.present` attempt.
    pub fn present(&mut self, payload: Value, channel_revision: u64, attempt_id: &str) {
        self.send(Kind::Present, payload, channel_revision, Some(attempt_id));
    }

    /// The next frame, within [`WAIT`].
    pub fn next_frame(&self) -> Out {
        match self.frames.recv_timeout(WAIT) {
            Ok(Ok(frame)) => frame,
            Ok(Err(problem)) => panic!("bad adapter output: {problem}\nstderr:\n{}", self.stderr()),
            Err(RecvTimeoutError::Timeout) => panic!("no frame within {WAIT:?}\nstderr:\n{}", self.stderr()),
            Err(RecvTimeoutError::Disconnected) => panic!("stdout closed\nstderr:\n{}", self.stderr()),
        }
    }

    /// The next frame, which must be of `kind`; returns its payload.
    pub fn expect(&self, kind: Kind) -> Out {
        let frame = self.next_frame();
        assert_eq!(
            frame.kind,
            kind,
            "unexpected frame {frame:?}\nstderr:\n{}",
            self.stderr()
        );
        frame
    }

    /// Waits for `channel.ready`.
    pub fn expect_ready(&self) -> Out {
        self.expect(Kind::Ready)
    }

    /// Waits for the settle of `attempt_id`.
    pub fn expect_settle(&self, attempt_id: &str) -> Out {
        let frame = self.expect(Kind::Settle);
        assert_eq!(frame.header.attempt_id.as_deref(), Some(attempt_id), "{frame:?}");
        frame
    }

    /// Closes stdin.
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.join_readers();
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the adapter did not exit\nstderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn join_readers(&mut self) {
        for handle in [self.stdout_done.take(), self.stderr_done.take()].into_iter().flatten() {
            let _ = handle.join();
        }
    }

    /// What the adapter wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr_text.lock().expect("stderr lock").clone()
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_for_stderr(&self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "stderr never had {needle:?}:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the adapter by closing stdin: it says `stdinClosed` and exits 0. Then the canary
    /// check: the token is nowhere in what it wrote.
    pub fn finish(mut self) {
        self.close_stdin();
        let frame = self.expect(Kind::Exiting);
        assert_eq!(frame.payload, json!({"reason": "stdinClosed"}));
        assert_eq!(self.wait_exit(), 0, "stderr:\n{}", self.stderr());
        self.assert_no_token();
    }

    /// The canary: neither stdout nor stderr ever held the token or its secret part.
    pub fn assert_no_token(&self) {
        let stdout = self.stdout_text.lock().expect("stdout lock").clone();
        let stderr = self.stderr();
        for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(!text.contains(TOKEN_SECRET), "the token leaked to {name}:\n{text}");
            assert!(!text.contains("CANARY"), "the token leaked to {name}:\n{text}");
        }
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        // Only this test's own child, by its handle.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_frames(stdout: impl Read, text: &Mutex<String>, sender: &mpsc::Sender<Result<Out, String>>) {
    let mut reader = BufReader::new(stdout);
    let mut expected_sequence = 1;
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        text.lock()
            .expect("stdout lock")
            .push_str(&String::from_utf8_lossy(&line));
        let decoded = decode_line(&line).map_err(|error| format!("{error}: {}", String::from_utf8_lossy(&line)));
        let checked = decoded.and_then(|frame| {
            if frame.header.sequence != expected_sequence {
                return Err(format!(
                    "sequence {} where {expected_sequence} was due",
                    frame.header.sequence
                ));
            }
            if frame.header.profile != PROFILE {
                return Err("wrong profile".to_owned());
            }
            expected_sequence += 1;
            Ok(Out {
                kind: frame.kind,
                header: frame.header,
                payload: Value::Object(frame.payload),
            })
        });
        if sender.send(checked).is_err() {
            return;
        }
    }
}

/// A presentation with a plain choice and an input choice.
pub fn presentation() -> Value {
    json!({
        "title": "Deploy release 1.2?",
        "summary": "Ships the new billing code <fast> & safe.",
        "blocks": [
            {"kind": "fields", "fields": [{"label": "Environment", "value": "production"}]},
            {"kind": "code", "text": "make deploy"}
        ],
        "choices": [
            {"id": "approve", "label": "Approve"},
            {"id": "replan", "label": "Replan", "input": {"label": "What should change?", "placeholder": "Your notes", "maxLength": 20}}
        ],
        "deadlineAt": 1_900_000_000_000_i64,
        "defaultChoiceId": "approve"
    })
}

/// A `send` payload for `channel_message_id` with `nonce`.
pub fn send_payload(channel_message_id: &str, nonce: &str, chat_id: i64) -> Value {
    json!({
        "channelMessageId": channel_message_id,
        "operation": "send",
        "chatId": chat_id,
        "nonce": nonce,
        "presentation": presentation(),
    })
}

/// An operation on an already-sent message (`edit`, `track`, `prompt`).
pub fn on_message_payload(
    operation: &str,
    channel_message_id: &str,
    nonce: &str,
    message_id: i64,
) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("channelMessageId".to_owned(), json!(channel_message_id));
    payload.insert("operation".to_owned(), json!(operation));
    payload.insert("chatId".to_owned(), json!(CHAT));
    payload.insert("telegramMessageId".to_owned(), json!(message_id));
    payload.insert("nonce".to_owned(), json!(nonce));
    payload.insert("presentation".to_owned(), presentation());
    payload
}

/// Sends `channel_message_id` to [`CHAT`] and returns its Telegram message id.
pub fn send_and_settle(adapter: &mut Adapter, channel_message_id: &str, nonce: &str, attempt_id: &str) -> i64 {
    adapter.present(send_payload(channel_message_id, nonce, CHAT), 1, attempt_id);
    let settle = adapter.expect_settle(attempt_id);
    assert_eq!(settle.payload["outcome"], "applied", "{settle:?}");
    settle.payload["telegram"]["messageId"].as_i64().expect("message id")
}
