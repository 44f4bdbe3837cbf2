//! An in-process fake Telegram Bot API for tests (feature `fake-api`).
//!
//! [`FakeBotApi::start`] binds `127.0.0.1:0` and serves `/bot<token>/{getMe, getUpdates,
//! sendMessage, editMessageText, answerCallbackQuery}` with JSON bodies, one request per
//! connection, each on its own thread. A wrong token gets 401, an unknown method 404. Tests
//! script it: push updates ([`FakeBotApi::push_callback`], [`FakeBotApi::push_reply`]), make the
//! next call of a method fail ([`FakeBotApi::fail_next`]), and read what the adapter did
//! ([`FakeBotApi::sent_messages`], [`FakeBotApi::edits`], [`FakeBotApi::callback_answers`],
//! [`FakeBotApi::requests`]), waiting with bounded timeouts ([`FakeBotApi::wait_for_requests`]).
//!
//! Like Telegram: message ids increase per chat (bot and user messages share the counter);
//! `getUpdates` returns updates from `offset` on, drops the ones below it (confirmation), and
//! blocks until an update is pushed or its `timeout` passes; texts are checked as Telegram
//! would (HTML entities and tags, at most 4096 visible characters, callback data ≤ 64 bytes).

mod http;

use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::BufReader;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The fake bot's user id.
pub const FAKE_BOT_ID: i64 = 4242;
/// The fake bot's username.
pub const FAKE_BOT_USERNAME: &str = "fake_pi_bot";
/// Longest visible text, in UTF-16 code units.
const TEXT_UNITS_MAX: usize = 4096;
/// Longest callback data, in bytes.
const CALLBACK_DATA_BYTES_MAX: usize = 64;
/// Longest long poll the fake honours, in seconds.
const POLL_TIMEOUT_S_MAX: u64 = 50;
/// Most updates one `getUpdates` returns.
const UPDATE_BATCH_MAX: usize = 100;
/// How long a connection may take to send its request.
const READ_TIMEOUT_S: u64 = 10;

/// How the next call of a method fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeFailure {
    /// Answer this HTTP status with this description (nothing is applied).
    Status(u16, String),
    /// Answer 429 with `parameters.retry_after` (nothing is applied).
    RetryAfter(u64),
    /// Apply the request, then wait this many milliseconds before answering.
    Hang(u64),
    /// Apply the request, then close the connection without answering.
    Drop,
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The chat.
    pub chat_id: i64,
    /// Its id in the chat.
    pub message_id: i64,
    /// The text as sent (HTML when `parse_mode` is `HTML`).
    pub text: String,
    /// The visible text (tags dropped, entities decoded).
    pub visible_text: String,
    /// `parse_mode`.
    pub parse_mode: Option<String>,
    /// The inline keyboard's callback data, in button order.
    pub callback_data: Vec<String>,
    /// The inline keyboard's button texts, in order.
    pub button_labels: Vec<String>,
    /// Whether the reply markup was a `ForceReply`.
    pub force_reply: bool,
    /// `ForceReply.input_field_placeholder`.
    pub placeholder: Option<String>,
    /// The message replied to (`reply_parameters.message_id`).
    pub reply_to_message_id: Option<i64>,
}

/// An edit the bot made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The chat.
    pub chat_id: i64,
    /// The edited message.
    pub message_id: i64,
    /// The new text.
    pub text: String,
    /// The visible text.
    pub visible_text: String,
    /// The new keyboard's callback data (empty when there is none).
    pub callback_data: Vec<String>,
    /// Whether the edit carried a keyboard with at least one button.
    pub has_keyboard: bool,
}

/// An `answerCallbackQuery`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAnswer {
    /// The callback query answered.
    pub callback_query_id: String,
    /// The text shown.
    pub text: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    pending_updates: VecDeque<Value>,
    last_update_id: i64,
    last_message_id: HashMap<i64, i64>,
    // (chat, message) → (text, callback data) of the bot's messages, for edits.
    bot_messages: HashMap<(i64, i64), (String, Vec<String>)>,
    sent: Vec<SentMessage>,
    edits: Vec<Edit>,
    callback_answers: Vec<CallbackAnswer>,
    requests: Vec<String>,
    failures: HashMap<String, VecDeque<FakeFailure>>,
}

impl State {
    fn next_message_id(&mut self, chat_id: i64) -> i64 {
        let last = self.last_message_id.entry(chat_id).or_insert(0);
        *last += 1;
        *last
    }

    fn push_update(&mut self, mut update: Value) -> i64 {
        self.last_update_id += 1;
        update["update_id"] = Value::from(self.last_update_id);
        self.pending_updates.push_back(update);
        self.last_update_id
    }
}

struct Shared {
    token: String,
    state: Mutex<State>,
    changed: Condvar,
    stopping: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test thread that panicked while holding the lock leaves the state usable.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The fake Bot API server. Dropping it stops it.
pub struct FakeBotApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept_thread: Option<thread::JoinHandle<()>>,
}

impl FakeBotApi {
    /// Starts a fake for `token` on `127.0.0.1`, on a free port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (the test cannot run at all).
    #[must_use]
    pub fn start(token: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port for the fake Bot API");
        let addr = listener.local_addr().expect("the fake Bot API's address");
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name("fake-bot-api".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .expect("spawn the fake Bot API thread");
        Self {
            shared,
            addr,
            accept_thread: Some(accept_thread),
        }
    }

    /// `http://127.0.0.1:PORT`, the launch's `apiBaseUrl`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a button press by `user_id` in `chat_id` on `message_id`; returns its update id.
    pub fn push_callback(&self, user_id: i64, chat_id: i64, message_id: i64, data: &str) -> i64 {
        let mut state = self.shared.lock();
        let query_id = format!("cq-{}", state.last_update_id + 1);
        let update = json!({
            "callback_query": {
                "id": query_id,
                "from": user_json(user_id),
                "message": {"message_id": message_id, "date": 0, "chat": chat_json(chat_id)},
                "chat_instance": "fake",
                "data": data,
            }
        });
        let update_id = state.push_update(update);
        self.shared.changed.notify_all();
        update_id
    }

    /// Queues a text message by `user_id` in `chat_id` replying to `reply_to_message_id`;
    /// returns its update id.
    pub fn push_reply(&self, user_id: i64, chat_id: i64, reply_to_message_id: i64, text: &str) -> i64 {
        let mut state = self.shared.lock();
        let message_id = state.next_message_id(chat_id);
        let update = json!({
            "message": {
                "message_id": message_id,
                "from": user_json(user_id),
                "chat": chat_json(chat_id),
                "date": 0,
                "text": text,
                "reply_to_message": {
                    "message_id": reply_to_message_id,
                    "from": {"id": FAKE_BOT_ID, "is_bot": true, "first_name": "Fake", "username": FAKE_BOT_USERNAME},
                    "chat": chat_json(chat_id),
                    "date": 0,
                },
            }
        });
        let update_id = state.push_update(update);
        self.shared.changed.notify_all();
        update_id
    }

    /// Makes the next call of `method` fail as `failure` (failures of one method queue up).
    pub fn fail_next(&self, method: &str, failure: FakeFailure) {
        self.shared
            .lock()
            .failures
            .entry(method.to_owned())
            .or_default()
            .push_back(failure);
    }

    /// The messages sent, in order.
    #[must_use]
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The edits made, in order.
    #[must_use]
    pub fn edits(&self) -> Vec<Edit> {
        self.shared.lock().edits.clone()
    }

    /// The callback answers, in order.
    #[must_use]
    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.shared.lock().callback_answers.clone()
    }

    /// The method names of every request received, in order (a wrong token's too).
    #[must_use]
    pub fn requests(&self) -> Vec<String> {
        self.shared.lock().requests.clone()
    }

    /// Updates not yet confirmed by a `getUpdates` offset.
    #[must_use]
    pub fn pending_update_count(&self) -> usize {
        self.shared.lock().pending_updates.len()
    }

    /// Waits until at least `count` requests of `method` arrived (they may still be in
    /// progress); `false` if `timeout` passed first.
    #[must_use]
    pub fn wait_for_requests(&self, method: &str, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |state| {
            state.requests.iter().filter(|name| *name == method).count() >= count
        })
    }

    /// Waits until at least `count` messages were sent (recorded, not just requested).
    #[must_use]
    pub fn wait_for_sent_messages(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |state| state.sent.len() >= count)
    }

    /// Waits until at least `count` callback answers were recorded.
    #[must_use]
    pub fn wait_for_callback_answers(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |state| state.callback_answers.len() >= count)
    }

    /// Waits until no pushed update is left unconfirmed; `false` if `timeout` passed first.
    #[must_use]
    pub fn wait_for_confirmed_updates(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |state| state.pending_updates.is_empty())
    }

    fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if done(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = match self.shared.changed.wait_timeout(state, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
    }
}

fn user_json(user_id: i64) -> Value {
    json!({"id": user_id, "is_bot": false, "first_name": "User"})
}

fn chat_json(chat_id: i64) -> Value {
    let kind = if chat_id < 0 { "supergroup" } else { "private" };
    json!({"id": chat_id, "type": kind})
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("fake-bot-api-conn".to_owned())
            .spawn(move || serve_connection(stream, &shared));
    }
}

/// What to do with one request.
enum Reply {
    Answer(u16, Value),
    AnswerLate(u16, Value, Duration),
    Drop,
}

fn serve_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(READ_TIMEOUT_S)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let Ok(request) = http::read_request(&mut reader) else {
        let _ = writer.shutdown(Shutdown::Both);
        return;
    };
    match route(shared, &request) {
        Reply::Answer(status, body) => {
            let _ = http::write_response(&mut writer, status, body.to_string().as_bytes());
        }
        Reply::AnswerLate(status, body, delay) => {
            thread::sleep(delay);
            let _ = http::write_response(&mut writer, status, body.to_string().as_bytes());
        }
        Reply::Drop => {
            let _ = writer.shutdown(Shutdown::Both);
        }
    }
}

fn failure(status: u16, description: &str) -> ApiReply {
    (
        status,
        json!({"ok": false, "error_code": status, "description": description}),
    )
}

fn route(shared: &Shared, request: &http::Request) -> Reply {
    let path = request.path.as_str();
    let method = path.rsplit('/').next().unwrap_or_default().to_owned();
    let token_ok = path
        .strip_prefix("/bot")
        .and_then(|rest| rest.strip_suffix(method.as_str()))
        .is_some_and(|token| token.strip_suffix('/') == Some(shared.token.as_str()));
    let scripted = {
        let mut state = shared.lock();
        state.requests.push(method.clone());
        shared.changed.notify_all();
        if token_ok {
            state.failures.get_mut(&method).and_then(VecDeque::pop_front)
        } else {
            None
        }
    };
    if !token_ok {
        let (status, body) = failure(401, "Unauthorized");
        return Reply::Answer(status, body);
    }
    match scripted {
        Some(FakeFailure::Status(status, description)) => {
            let (status, body) = failure(status, &description);
            Reply::Answer(status, body)
        }
        Some(FakeFailure::RetryAfter(seconds)) => Reply::Answer(
            429,
            json!({"ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {seconds}"),
                "parameters": {"retry_after": seconds}}),
        ),
        Some(FakeFailure::Hang(ms)) => {
            let (status, body) = apply(shared, &method, &request.body);
            Reply::AnswerLate(status, body, Duration::from_millis(ms))
        }
        Some(FakeFailure::Drop) => {
            let _ = apply(shared, &method, &request.body);
            Reply::Drop
        }
        None => {
            let (status, body) = apply(shared, &method, &request.body);
            Reply::Answer(status, body)
        }
    }
}

fn ok(result: Value) -> ApiReply {
    (200, json!({"ok": true, "result": result}))
}

fn apply(shared: &Shared, method: &str, body: &[u8]) -> ApiReply {
    let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(body) else {
        return failure(400, "Bad Request: the body is not a JSON object");
    };
    let params = Value::Object(params);
    match method {
        "getMe" => ok(json!({"id": FAKE_BOT_ID, "is_bot": true, "first_name": "Fake", "username": FAKE_BOT_USERNAME})),
        "getUpdates" => get_updates(shared, &params),
        "sendMessage" => send_message(shared, &params),
        "editMessageText" => edit_message_text(shared, &params),
        "answerCallbackQuery" => answer_callback_query(shared, &params),
        _ => failure(404, "Not Found"),
    }
}

fn get_updates(shared: &Shared, params: &Value) -> ApiReply {
    let offset = params["offset"].as_i64().unwrap_or(0);
    let limit = params["limit"]
        .as_u64()
        .and_then(|limit| usize::try_from(limit).ok())
        .unwrap_or(UPDATE_BATCH_MAX)
        .clamp(1, UPDATE_BATCH_MAX);
    let timeout = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0).min(POLL_TIMEOUT_S_MAX));
    let deadline = Instant::now() + timeout;
    let mut state = shared.lock();
    // Confirmation: updates below the offset are gone for good.
    while state
        .pending_updates
        .front()
        .is_some_and(|update| update["update_id"].as_i64().unwrap_or(0) < offset)
    {
        state.pending_updates.pop_front();
    }
    shared.changed.notify_all();
    loop {
        if !state.pending_updates.is_empty() || shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        state = match shared.changed.wait_timeout(state, deadline - now) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
    let batch: Vec<Value> = state.pending_updates.iter().take(limit).cloned().collect();
    ok(Value::Array(batch))
}

/// An HTTP status with its JSON body.
type ApiReply = (u16, Value);

/// What a `reply_markup` holds.
struct Markup {
    callback_data: Vec<String>,
    button_labels: Vec<String>,
    force_reply: bool,
    placeholder: Option<String>,
}

fn read_markup(markup: &Value) -> Result<Markup, ApiReply> {
    let mut data = Vec::new();
    let mut labels = Vec::new();
    for button in markup["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().into_iter().flatten())
    {
        let callback = button["callback_data"].as_str().unwrap_or_default();
        if callback.is_empty() || callback.len() > CALLBACK_DATA_BYTES_MAX {
            return Err(failure(400, "Bad Request: BUTTON_DATA_INVALID"));
        }
        data.push(callback.to_owned());
        labels.push(button["text"].as_str().unwrap_or_default().to_owned());
    }
    let force_reply = markup["force_reply"].as_bool().unwrap_or(false);
    let placeholder = markup["input_field_placeholder"].as_str().map(str::to_owned);
    Ok(Markup {
        callback_data: data,
        button_labels: labels,
        force_reply,
        placeholder,
    })
}

/// Checks a text as Telegram would; returns the visible text.
fn read_text(params: &Value) -> Result<String, ApiReply> {
    let text = params["text"].as_str().unwrap_or_default();
    let visible = if params["parse_mode"].as_str() == Some("HTML") {
        visible_html(text).map_err(|_| failure(400, "Bad Request: can't parse entities"))?
    } else {
        text.to_owned()
    };
    if visible.trim().is_empty() {
        return Err(failure(400, "Bad Request: message text is empty"));
    }
    if visible.encode_utf16().count() > TEXT_UNITS_MAX {
        return Err(failure(400, "Bad Request: message is too long"));
    }
    Ok(visible)
}

fn send_message(shared: &Shared, params: &Value) -> ApiReply {
    let Some(chat_id) = params["chat_id"].as_i64() else {
        return failure(400, "Bad Request: chat not found");
    };
    let visible_text = match read_text(params) {
        Ok(text) => text,
        Err(error) => return error,
    };
    let Markup {
        callback_data,
        button_labels,
        force_reply,
        placeholder,
    } = match read_markup(&params["reply_markup"]) {
        Ok(markup) => markup,
        Err(error) => return error,
    };
    let reply_to_message_id = params["reply_parameters"]["message_id"]
        .as_i64()
        .or_else(|| params["reply_to_message_id"].as_i64());
    let text = params["text"].as_str().unwrap_or_default().to_owned();
    let mut state = shared.lock();
    let message_id = state.next_message_id(chat_id);
    state
        .bot_messages
        .insert((chat_id, message_id), (text.clone(), callback_data.clone()));
    state.sent.push(SentMessage {
        chat_id,
        message_id,
        text,
        visible_text: visible_text.clone(),
        parse_mode: params["parse_mode"].as_str().map(str::to_owned),
        callback_data,
        button_labels,
        force_reply,
        placeholder,
        reply_to_message_id,
    });
    shared.changed.notify_all();
    ok(message_json(chat_id, message_id, &visible_text))
}

fn edit_message_text(shared: &Shared, params: &Value) -> ApiReply {
    let (Some(chat_id), Some(message_id)) = (params["chat_id"].as_i64(), params["message_id"].as_i64()) else {
        return failure(400, "Bad Request: message to edit not found");
    };
    let visible_text = match read_text(params) {
        Ok(text) => text,
        Err(error) => return error,
    };
    let callback_data = match read_markup(&params["reply_markup"]) {
        Ok(markup) => markup.callback_data,
        Err(error) => return error,
    };
    let text = params["text"].as_str().unwrap_or_default().to_owned();
    let mut state = shared.lock();
    let Some(current) = state.bot_messages.get(&(chat_id, message_id)) else {
        return failure(400, "Bad Request: message to edit not found");
    };
    if current.0 == text && current.1 == callback_data {
        return failure(
            400,
            "Bad Request: message is not modified: specified new message content and reply markup are exactly \
             the same as a current content and reply markup of the message",
        );
    }
    state
        .bot_messages
        .insert((chat_id, message_id), (text.clone(), callback_data.clone()));
    let has_keyboard = !callback_data.is_empty();
    state.edits.push(Edit {
        chat_id,
        message_id,
        text,
        visible_text: visible_text.clone(),
        callback_data,
        has_keyboard,
    });
    shared.changed.notify_all();
    ok(message_json(chat_id, message_id, &visible_text))
}

fn answer_callback_query(shared: &Shared, params: &Value) -> ApiReply {
    let Some(id) = params["callback_query_id"].as_str() else {
        return failure(
            400,
            "Bad Request: query is too old and response timeout expired or query ID is invalid",
        );
    };
    let mut state = shared.lock();
    state.callback_answers.push(CallbackAnswer {
        callback_query_id: id.to_owned(),
        text: params["text"].as_str().map(str::to_owned),
    });
    shared.changed.notify_all();
    ok(Value::Bool(true))
}

fn message_json(chat_id: i64, message_id: i64, text: &str) -> Value {
    json!({
        "message_id": message_id,
        "from": {"id": FAKE_BOT_ID, "is_bot": true, "first_name": "Fake", "username": FAKE_BOT_USERNAME},
        "chat": chat_json(chat_id),
        "date": 0,
        "text": text,
    })
}

/// The visible text of Telegram HTML, or an error where Telegram would refuse it: tags other
/// than b, i, pre, code, unbalanced tags, unknown entities, raw `<`, `>` or `&`.
fn visible_html(html: &str) -> Result<String, ()> {
    const TAGS: [&str; 4] = ["b", "i", "pre", "code"];
    const ENTITIES: [(&str, char); 4] = [("lt", '<'), ("gt", '>'), ("amp", '&'), ("quot", '"')];
    let mut visible = String::new();
    let mut open: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(ch) = rest.chars().next() {
        match ch {
            '<' => {
                let end = rest.find('>').ok_or(())?;
                let tag = &rest[1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    if open.pop() != Some(name) {
                        return Err(());
                    }
                } else if TAGS.contains(&tag) {
                    open.push(tag);
                } else {
                    return Err(());
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let end = rest.find(';').ok_or(())?;
                let name = &rest[1..end];
                let decoded = ENTITIES.iter().find(|(entity, _)| *entity == name).ok_or(())?.1;
                visible.push(decoded);
                rest = &rest[end + 1..];
            }
            '>' => return Err(()),
            _ => {
                visible.push(ch);
                rest = &rest[ch.len_utf8()..];
            }
        }
    }
    if open.is_empty() { Ok(visible) } else { Err(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_telegram_html() {
        assert_eq!(visible_html("<b>a &amp; b</b> &lt;c&gt;"), Ok("a & b <c>".to_owned()));
        assert!(visible_html("<b>open").is_err());
        assert!(visible_html("a < b").is_err());
        assert!(visible_html("a & b").is_err());
        assert!(visible_html("<u>x</u>").is_err());
        assert!(visible_html("<b><i>x</b></i>").is_err());
    }
}
