//! A small blocking Bot API client over `ureq`.
//!
//! Every request is a JSON `POST` to `<apiBaseUrl>/bot<TOKEN>/<method>`. The URL holds the
//! token, so it lives only inside [`BotApi::call`] and is never formatted into anything else;
//! `ureq` errors are never displayed either, only classified ([`Failure`]).

use crate::telegram::{ApiEnvelope, Message, User};
use crate::token::{BotToken, Redactor};
use channel_protocol::limits::bounded_chars;
use serde_json::{Value, json};
use std::io;
use std::time::Duration;

/// Most response bytes read (1 MiB); a longer answer is a bad response.
pub const RESPONSE_BYTES_MAX: u64 = 1024 * 1024;
/// Connection set-up bound (DNS, TCP, TLS), in seconds.
pub const CONNECT_TIMEOUT_S: u64 = 10;
/// Whole-request bound for every method but `getUpdates`, in seconds.
pub const REQUEST_TIMEOUT_S: u64 = 30;
/// What a `getUpdates` request may take beyond its long-poll timeout, in seconds.
pub const POLL_TIMEOUT_MARGIN_S: u64 = 10;
/// Most updates asked for in one `getUpdates` (Telegram's maximum).
pub const UPDATE_BATCH_MAX: usize = 100;
/// Longest Telegram description kept, in characters.
pub const DESCRIPTION_CHARS_MAX: usize = 200;

/// The methods the adapter calls (closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `getMe`.
    GetMe,
    /// `getUpdates`.
    GetUpdates,
    /// `sendMessage`.
    SendMessage,
    /// `editMessageText`.
    EditMessageText,
    /// `answerCallbackQuery`.
    AnswerCallbackQuery,
}

impl Method {
    /// The method name in the URL.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GetMe => "getMe",
            Self::GetUpdates => "getUpdates",
            Self::SendMessage => "sendMessage",
            Self::EditMessageText => "editMessageText",
            Self::AnswerCallbackQuery => "answerCallbackQuery",
        }
    }
}

/// How a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Telegram answered with this non-2xx HTTP status.
    Status(u16),
    /// No answer. `reached`: the request may have reached Telegram (the connection was made),
    /// so whether it took effect is unknown.
    Transport {
        /// Whether the request may have reached Telegram.
        reached: bool,
    },
    /// A 2xx answer that cannot be read (not JSON, too large, `ok: false`, a wrong result).
    BadResponse,
}

/// A failed request: the class, and Telegram's own words when it gave some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The class.
    pub failure: Failure,
    /// Telegram's `description`, redacted and bounded; never logged.
    pub description: Option<String>,
    /// Telegram's `parameters.retry_after`, in seconds.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    fn new(failure: Failure) -> Self {
        Self {
            failure,
            description: None,
            retry_after_s: None,
        }
    }

    /// The HTTP status, when Telegram answered with one.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self.failure {
            Failure::Status(status) => Some(status),
            _ => None,
        }
    }
}

/// A Bot API client for one token.
#[derive(Clone)]
pub struct BotApi {
    agent: ureq::Agent,
    base_url: String,
    token: BotToken,
    redactor: Redactor,
}

impl BotApi {
    /// A client for `base_url` (the launch's `apiBaseUrl`).
    ///
    /// `pooled: false` makes every request use a fresh connection: then a connection that
    /// breaks after it was made really means the request may have reached Telegram, and is
    /// never a pooled connection the server had already closed. The sender uses that; the
    /// long poll (reads only) keeps its connection.
    #[must_use]
    pub fn new(base_url: &str, token: BotToken, pooled: bool) -> Self {
        let idle_connections = if pooled { 1 } else { 0 };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(CONNECT_TIMEOUT_S)))
            .max_redirects(0)
            .max_idle_connections(idle_connections)
            .max_idle_connections_per_host(idle_connections)
            .user_agent("pi-workflows-telegram")
            .build();
        let redactor = Redactor::new(&token);
        Self {
            agent: config.into(),
            base_url: base_url.to_owned(),
            token,
            redactor,
        }
    }

    /// Calls `method` with a JSON `body`; returns its `result`.
    ///
    /// # Errors
    ///
    /// [`ApiError`] classifying the failure.
    pub fn call(&self, method: Method, body: &Value, timeout: Duration) -> Result<Value, ApiError> {
        let bytes = serde_json::to_vec(body).map_err(|_| ApiError::new(Failure::Transport { reached: false }))?;
        // The only place the token is put into text.
        let url = format!("{}/bot{}/{}", self.base_url, self.token.expose(), method.as_str());
        let sent = self
            .agent
            .post(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json")
            .send(&bytes[..]);
        drop(url);
        let mut response = sent.map_err(|error| {
            ApiError::new(Failure::Transport {
                reached: may_have_reached(&error),
            })
        })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(RESPONSE_BYTES_MAX)
            .read_to_vec();
        self.interpret(status, body.ok())
    }

    fn interpret(&self, status: u16, body: Option<Vec<u8>>) -> Result<Value, ApiError> {
        let envelope = body.and_then(|bytes| serde_json::from_slice::<ApiEnvelope>(&bytes).ok());
        let success = (200..300).contains(&status);
        match envelope {
            Some(ApiEnvelope {
                ok: true,
                result: Some(result),
                ..
            }) if success => Ok(result),
            Some(envelope) if !success => Err(ApiError {
                failure: Failure::Status(status),
                description: envelope
                    .description
                    .map(|text| bounded_chars(&self.redactor.redact(&text), DESCRIPTION_CHARS_MAX)),
                retry_after_s: envelope.parameters.and_then(|parameters| parameters.retry_after),
            }),
            None if !success => Err(ApiError::new(Failure::Status(status))),
            _ => Err(ApiError::new(Failure::BadResponse)),
        }
    }

    /// `getMe`.
    ///
    /// # Errors
    ///
    /// As [`Self::call`]; a result that is not a user is [`Failure::BadResponse`].
    pub fn get_me(&self) -> Result<User, ApiError> {
        let result = self.call(Method::GetMe, &json!({}), request_timeout())?;
        serde_json::from_value(result).map_err(|_| ApiError::new(Failure::BadResponse))
    }

    /// `getUpdates` from `offset`, waiting up to `timeout_s` for the first update. Updates stay
    /// raw JSON so one unreadable update cannot hide the rest of its batch.
    ///
    /// # Errors
    ///
    /// As [`Self::call`]; a result that is not an array is [`Failure::BadResponse`].
    pub fn get_updates(&self, offset: i64, timeout_s: u32) -> Result<Vec<Value>, ApiError> {
        let body = json!({
            "offset": offset,
            "limit": UPDATE_BATCH_MAX,
            "timeout": timeout_s,
            "allowed_updates": ["message", "callback_query"],
        });
        let timeout = Duration::from_secs(u64::from(timeout_s) + POLL_TIMEOUT_MARGIN_S);
        match self.call(Method::GetUpdates, &body, timeout)? {
            Value::Array(mut updates) => {
                updates.truncate(UPDATE_BATCH_MAX);
                Ok(updates)
            }
            _ => Err(ApiError::new(Failure::BadResponse)),
        }
    }

    /// `sendMessage`; returns the sent message.
    ///
    /// # Errors
    ///
    /// As [`Self::call`]; a result that is not a message is [`Failure::BadResponse`].
    pub fn send_message(&self, body: &Value) -> Result<Message, ApiError> {
        let result = self.call(Method::SendMessage, body, request_timeout())?;
        serde_json::from_value(result).map_err(|_| ApiError::new(Failure::BadResponse))
    }

    /// `editMessageText`.
    ///
    /// # Errors
    ///
    /// As [`Self::call`].
    pub fn edit_message_text(&self, body: &Value) -> Result<(), ApiError> {
        self.call(Method::EditMessageText, body, request_timeout()).map(drop)
    }

    /// `answerCallbackQuery` with a short text.
    ///
    /// # Errors
    ///
    /// As [`Self::call`].
    pub fn answer_callback_query(&self, callback_query_id: &str, text: &str) -> Result<(), ApiError> {
        let body = json!({"callback_query_id": callback_query_id, "text": text});
        self.call(Method::AnswerCallbackQuery, &body, request_timeout())
            .map(drop)
    }
}

fn request_timeout() -> Duration {
    Duration::from_secs(REQUEST_TIMEOUT_S)
}

/// Whether a failed request may have reached Telegram. Only failures that certainly happened
/// before a connection existed count as "not reached"; anything later is uncertain.
fn may_have_reached(error: &ureq::Error) -> bool {
    use ureq::Error;
    use ureq::Timeout;
    match error {
        Error::HostNotFound
        | Error::ConnectionFailed
        | Error::BadUri(_)
        | Error::Http(_)
        | Error::InvalidProxyUrl
        | Error::ConnectProxyFailed(_)
        | Error::RequireHttpsOnly(_)
        | Error::TlsRequired
        | Error::Timeout(Timeout::Resolve | Timeout::Connect) => false,
        Error::Io(io_error) => !matches!(
            io_error.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::AddrNotAvailable
                | io::ErrorKind::NetworkUnreachable
                | io::ErrorKind::HostUnreachable
        ),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_at(base_url: &str) -> BotApi {
        let token = BotToken::parse("123456:CANARY-TOKEN-abcdefghijkl").expect("token");
        BotApi::new(base_url, token, false)
    }

    fn api() -> BotApi {
        api_at("http://127.0.0.1:1")
    }

    #[test]
    fn interprets_answers() {
        let api = api();
        let ok = br#"{"ok":true,"result":{"id":1}}"#.to_vec();
        assert_eq!(api.interpret(200, Some(ok)), Ok(json!({"id": 1})));
        let limited =
            br#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}"#
                .to_vec();
        let error = api.interpret(429, Some(limited)).expect_err("429");
        assert_eq!(error.failure, Failure::Status(429));
        assert_eq!(error.retry_after_s, Some(3));
        assert_eq!(error.description.as_deref(), Some("Too Many Requests: retry after 3"));
        assert_eq!(
            api.interpret(502, Some(b"<html>".to_vec())).expect_err("502").failure,
            Failure::Status(502)
        );
        assert_eq!(
            api.interpret(200, Some(b"<html>".to_vec())).expect_err("html").failure,
            Failure::BadResponse
        );
        assert_eq!(
            api.interpret(200, None).expect_err("unread").failure,
            Failure::BadResponse
        );
    }

    #[test]
    fn redacts_and_bounds_descriptions() {
        let api = api();
        let long = format!(
            r#"{{"ok":false,"error_code":400,"description":"bad CANARY-TOKEN-abcdefghijkl {}"}}"#,
            "x".repeat(500)
        );
        let error = api.interpret(400, Some(long.into_bytes())).expect_err("400");
        let description = error.description.expect("description");
        assert!(!description.contains("CANARY"));
        assert!(description.chars().count() <= DESCRIPTION_CHARS_MAX);
    }

    #[test]
    fn a_refused_connection_did_not_reach() {
        // A port that was just free: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let error = api_at(&format!("http://127.0.0.1:{port}"))
            .get_me()
            .expect_err("refused");
        assert_eq!(error.failure, Failure::Transport { reached: false });
    }
}
