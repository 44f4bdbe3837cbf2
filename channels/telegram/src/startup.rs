//! Start-up: the launch envelope, the token file, and the first `getMe`.

use crate::api::{ApiError, BotApi, Failure};
use channel_protocol::launch::LAUNCH_ENV;
use channel_protocol::payload::BotIdentity;
use channel_protocol::{ChannelLaunch, LaunchError};
use std::time::Duration;
use thiserror::Error;

/// `getMe` attempts before the adapter gives up (`apiUnreachable`).
pub const GET_ME_ATTEMPTS_MAX: u32 = 5;
/// Wait after the first failed `getMe`, doubled after each next one.
pub const GET_ME_BACKOFF_MS_INITIAL: u64 = 250;
/// Longest wait between two `getMe` attempts.
pub const GET_ME_BACKOFF_MS_MAX: u64 = 4_000;
/// Longest `retry_after` honoured at start-up, in seconds (a longer one counts as a failure).
pub const GET_ME_RETRY_AFTER_S_MAX: u64 = 10;

/// The launch envelope cannot be used.
#[derive(Debug, Error)]
pub enum LaunchEnvError {
    /// The variable is not set.
    #[error("{LAUNCH_ENV} is not set; the server passes the launch envelope there")]
    Missing,
    /// The variable is not UTF-8.
    #[error("{LAUNCH_ENV} is not UTF-8")]
    NotUnicode,
    /// The envelope is refused.
    #[error(transparent)]
    Invalid(#[from] LaunchError),
}

/// Reads and checks the launch envelope from [`LAUNCH_ENV`].
///
/// # Errors
///
/// [`LaunchEnvError`] naming the problem (never a value of the envelope).
pub fn load_launch() -> Result<ChannelLaunch, LaunchEnvError> {
    let text = match std::env::var(LAUNCH_ENV) {
        Ok(text) => text,
        Err(std::env::VarError::NotPresent) => return Err(LaunchEnvError::Missing),
        Err(std::env::VarError::NotUnicode(_)) => return Err(LaunchEnvError::NotUnicode),
    };
    Ok(ChannelLaunch::parse(&text)?)
}

/// How the first `getMe` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetMeOutcome {
    /// The bot, as Telegram knows it.
    Ready(BotIdentity),
    /// Telegram refused the token (401 or 404).
    CredentialRejected,
    /// No usable answer within [`GET_ME_ATTEMPTS_MAX`] attempts.
    Unreachable,
}

/// Calls `getMe` until it answers, the token is refused, or the attempts are spent.
#[must_use]
pub fn get_me_with_retries(api: &BotApi) -> GetMeOutcome {
    let mut backoff_ms = GET_ME_BACKOFF_MS_INITIAL;
    for attempt in 1..=GET_ME_ATTEMPTS_MAX {
        let error = match api.get_me() {
            Ok(user) => match user.username {
                Some(username) => return GetMeOutcome::Ready(BotIdentity { id: user.id, username }),
                None => ApiError {
                    failure: Failure::BadResponse,
                    description: None,
                    retry_after_s: None,
                },
            },
            Err(error) => error,
        };
        if matches!(error.status(), Some(401 | 404)) {
            return GetMeOutcome::CredentialRejected;
        }
        tracing::warn!(attempt, failure = failure_name(&error), "getMe failed");
        if attempt == GET_ME_ATTEMPTS_MAX {
            break;
        }
        let wait_ms = match error.retry_after_s {
            Some(seconds) if seconds <= GET_ME_RETRY_AFTER_S_MAX => seconds * 1000,
            _ => backoff_ms,
        };
        std::thread::sleep(Duration::from_millis(wait_ms));
        backoff_ms = (backoff_ms * 2).min(GET_ME_BACKOFF_MS_MAX);
    }
    GetMeOutcome::Unreachable
}

/// A log-safe name of a failure class.
#[must_use]
pub fn failure_name(error: &ApiError) -> &'static str {
    match error.failure {
        Failure::Status(429) => "rateLimited",
        Failure::Status(409) => "conflict",
        Failure::Status(500..=599) => "serverError",
        Failure::Status(_) => "httpStatus",
        Failure::Transport { .. } => "network",
        Failure::BadResponse => "badResponse",
    }
}
