//! The launch envelope (`pi-workflows.channel-launch.v1`): one JSON object in the environment
//! variable [`LAUNCH_ENV`] of the adapter child.
//!
//! It names the token *file*, never the token: the token is in no environment, argument, log or
//! frame. The server writes the envelope ([`ChannelLaunch::to_json`]); the adapter reads it
//! ([`ChannelLaunch::parse`]) and refuses any envelope that fails [`ChannelLaunch::check`].

use crate::frame::SAFE_INTEGER_MAX;
use crate::limits::{DIAGNOSTIC_BYTES_MAX, bounded_text, safe_decoder_detail, valid_id, valid_profile};
use serde::{Deserialize, Serialize};
use std::path::Path;
use thiserror::Error;

/// The environment variable that carries the envelope.
pub const LAUNCH_ENV: &str = "PI_WORKFLOWS_CHANNEL_LAUNCH";
/// The `schema` value.
pub const LAUNCH_SCHEMA: &str = "pi-workflows.channel-launch.v1";
/// Telegram's Bot API.
pub const API_BASE_URL_DEFAULT: &str = "https://api.telegram.org";
/// The default long-poll timeout, in seconds.
pub const POLL_TIMEOUT_S_DEFAULT: u32 = 25;
/// The longest long-poll timeout, in seconds (Telegram allows 50).
pub const POLL_TIMEOUT_S_MAX: u32 = 50;
/// Largest envelope, in bytes.
pub const LAUNCH_BYTES_MAX: usize = 64 * 1024;
/// Longest `apiBaseUrl`, in bytes.
pub const API_BASE_URL_BYTES_MAX: usize = 512;
/// Longest `tokenFile` path, in bytes.
pub const TOKEN_FILE_PATH_BYTES_MAX: usize = 4096;
/// Most allowed user ids, and most allowed chat ids.
pub const ALLOWED_IDS_MAX: usize = 256;

/// Hosts that may be reached over plain `http://`: the token is in every request path, so it
/// never crosses a network unencrypted; loopback is for tests against a fake Bot API.
const LOOPBACK_HTTP_PREFIXES: [&str; 3] = ["http://127.0.0.1", "http://localhost", "http://[::1]"];

/// The launch envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelLaunch {
    /// Always [`LAUNCH_SCHEMA`].
    pub schema: String,
    /// This launch's epoch (≥ 1); every frame of both sides carries it.
    pub adapter_epoch: u64,
    /// The profile name: 1–64 characters of `[A-Za-z0-9_-]`.
    pub profile: String,
    /// The Bot API root, without a trailing slash.
    #[serde(default = "default_api_base_url")]
    pub api_base_url: String,
    /// Absolute path of the file holding the bot token (a regular file, mode 0600 or stricter).
    pub token_file: String,
    /// The Telegram users whose presses and replies count.
    pub allowed_user_ids: Vec<i64>,
    /// The chats where presses and replies count, and the only chats the adapter writes to.
    pub allowed_chat_ids: Vec<i64>,
    /// The `getUpdates` long-poll timeout, in seconds (0–50).
    #[serde(default = "default_poll_timeout_s")]
    pub poll_timeout_s: u32,
}

fn default_api_base_url() -> String {
    API_BASE_URL_DEFAULT.to_owned()
}

fn default_poll_timeout_s() -> u32 {
    POLL_TIMEOUT_S_DEFAULT
}

/// A launch envelope is not acceptable. Messages name fields and rules, never values.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// The envelope is larger than [`LAUNCH_BYTES_MAX`].
    #[error("launch envelope of {bytes} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Not a `pi-workflows.channel-launch.v1` object (a missing, unknown or mistyped field).
    #[error("launch envelope is not a {LAUNCH_SCHEMA} object ({detail})")]
    Shape {
        /// The decoder's diagnostic, bounded.
        detail: String,
    },
    /// A field is out of its bounds.
    #[error("launch envelope field {field} is invalid: {rule}")]
    Invalid {
        /// The wire name of the field.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
    },
    /// The envelope cannot be encoded.
    #[error("cannot encode the launch envelope: {0}")]
    Encode(String),
}

impl ChannelLaunch {
    /// Parses and checks an envelope.
    ///
    /// # Errors
    ///
    /// [`LaunchError`] for an oversized, malformed or out-of-bounds envelope.
    pub fn parse(text: &str) -> Result<Self, LaunchError> {
        if text.len() > LAUNCH_BYTES_MAX {
            return Err(LaunchError::TooLarge {
                bytes: text.len(),
                max: LAUNCH_BYTES_MAX,
            });
        }
        let launch: Self = serde_json::from_str(text).map_err(|error| LaunchError::Shape {
            detail: safe_decoder_detail(&error.to_string()),
        })?;
        launch.check()?;
        Ok(launch)
    }

    /// The envelope as canonical JSON, checked first.
    ///
    /// # Errors
    ///
    /// [`LaunchError::Invalid`] when a field is out of bounds.
    pub fn to_json(&self) -> Result<String, LaunchError> {
        self.check()?;
        serde_json_canonicalizer::to_string(self)
            .map_err(|error| LaunchError::Encode(bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX)))
    }

    /// Checks every field.
    ///
    /// # Errors
    ///
    /// [`LaunchError::Invalid`] naming the first field out of bounds.
    pub fn check(&self) -> Result<(), LaunchError> {
        let bad = |field, rule| Err(LaunchError::Invalid { field, rule });
        if self.schema != LAUNCH_SCHEMA {
            return bad("schema", "must be pi-workflows.channel-launch.v1");
        }
        if !(1..=SAFE_INTEGER_MAX).contains(&self.adapter_epoch) {
            return bad("adapterEpoch", "an integer from 1 to 2^53 - 1");
        }
        if !valid_profile(&self.profile) {
            return bad("profile", "1-64 characters of [A-Za-z0-9_-]");
        }
        if !valid_api_base_url(&self.api_base_url) {
            return bad(
                "apiBaseUrl",
                "https://HOST[:PORT][/PATH] (http:// only for 127.0.0.1, localhost or [::1]), \
                 no trailing slash, query, fragment or credentials, at most 512 bytes",
            );
        }
        if !valid_token_file(&self.token_file) {
            return bad("tokenFile", "an absolute path of at most 4096 bytes");
        }
        if !valid_allowed_ids(&self.allowed_user_ids) {
            return bad("allowedUserIds", "1-256 safe integers");
        }
        if !valid_allowed_ids(&self.allowed_chat_ids) {
            return bad("allowedChatIds", "1-256 safe integers");
        }
        if self.poll_timeout_s > POLL_TIMEOUT_S_MAX {
            return bad("pollTimeoutS", "0-50");
        }
        Ok(())
    }
}

fn valid_api_base_url(url: &str) -> bool {
    let shape_ok = url.len() <= API_BASE_URL_BYTES_MAX
        && !url.ends_with('/')
        && url.bytes().all(|byte| byte.is_ascii_graphic())
        && !url.contains(['?', '#', '@', '\\']);
    if !shape_ok {
        return false;
    }
    if let Some(rest) = url.strip_prefix("https://") {
        return rest.split(['/', ':']).next().is_some_and(|host| !host.is_empty());
    }
    LOOPBACK_HTTP_PREFIXES.iter().any(|prefix| {
        url.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':') || rest.starts_with('/'))
    })
}

fn valid_token_file(path: &str) -> bool {
    !path.is_empty() && path.len() <= TOKEN_FILE_PATH_BYTES_MAX && !path.contains('\0') && Path::new(path).is_absolute()
}

fn valid_allowed_ids(ids: &[i64]) -> bool {
    (1..=ALLOWED_IDS_MAX).contains(&ids.len()) && ids.iter().all(|&id| valid_id(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> ChannelLaunch {
        ChannelLaunch {
            schema: LAUNCH_SCHEMA.to_owned(),
            adapter_epoch: 1,
            profile: "ops".to_owned(),
            api_base_url: API_BASE_URL_DEFAULT.to_owned(),
            token_file: "/home/u/.config/pi-workflows/telegram.token".to_owned(),
            allowed_user_ids: vec![42],
            allowed_chat_ids: vec![42, -1005],
            poll_timeout_s: 25,
        }
    }

    fn field_of(result: Result<(), LaunchError>) -> &'static str {
        match result {
            Err(LaunchError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn round_trips_with_defaults() {
        let text = launch().to_json().expect("json");
        assert_eq!(ChannelLaunch::parse(&text).expect("parse"), launch());
        let minimal = r#"{"schema":"pi-workflows.channel-launch.v1","adapterEpoch":2,"profile":"p",
            "tokenFile":"/t","allowedUserIds":[1],"allowedChatIds":[1]}"#;
        let parsed = ChannelLaunch::parse(minimal).expect("minimal");
        assert_eq!(parsed.api_base_url, API_BASE_URL_DEFAULT);
        assert_eq!(parsed.poll_timeout_s, POLL_TIMEOUT_S_DEFAULT);
    }

    #[test]
    fn refuses_unknown_fields_and_a_token_in_the_envelope() {
        let mut value = serde_json::to_value(launch()).expect("value");
        value["token"] = serde_json::Value::from("123:abc");
        assert!(matches!(
            ChannelLaunch::parse(&value.to_string()),
            Err(LaunchError::Shape { .. })
        ));
    }

    #[test]
    fn checks_the_api_base_url() {
        for good in [
            "https://api.telegram.org",
            "https://proxy.example:8443/tg",
            "http://127.0.0.1:8081",
            "http://localhost",
            "http://[::1]:9",
        ] {
            let mut value = launch();
            value.api_base_url = good.to_owned();
            value.check().unwrap_or_else(|error| panic!("{good}: {error}"));
        }
        for bad in [
            "http://api.telegram.org",
            "http://127.0.0.1.evil.example",
            "https://api.telegram.org/",
            "https://user@api.telegram.org",
            "https://api.telegram.org?x=1",
            "ftp://x",
            "https://",
        ] {
            let mut value = launch();
            value.api_base_url = bad.to_owned();
            assert_eq!(field_of(value.check()), "apiBaseUrl", "{bad}");
        }
    }

    #[test]
    fn checks_the_other_fields() {
        let mut value = launch();
        value.token_file = "relative/token".to_owned();
        assert_eq!(field_of(value.check()), "tokenFile");
        let mut value = launch();
        value.allowed_chat_ids.clear();
        assert_eq!(field_of(value.check()), "allowedChatIds");
        let mut value = launch();
        value.poll_timeout_s = 51;
        assert_eq!(field_of(value.check()), "pollTimeoutS");
        let mut value = launch();
        value.adapter_epoch = 0;
        assert_eq!(field_of(value.check()), "adapterEpoch");
        let mut value = launch();
        value.profile = "a b".to_owned();
        assert_eq!(field_of(value.check()), "profile");
    }
}
