//! The one `getUpdates` consumer of this adapter.
//!
//! The next offset is confirmed only after the main thread has handled a batch (and written its
//! answers to stdout): an update the adapter dies with is delivered again to the next adapter,
//! and its `updateId` lets the server see the repeat.

use crate::adapter::Event;
use crate::api::BotApi;
use crate::startup::failure_name;
use serde_json::Value;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, SyncSender};
use std::thread;
use std::time::Duration;

/// First wait after a failed poll, doubled after each next failure.
pub const POLL_BACKOFF_MS_MIN: u64 = 500;
/// Longest wait after failed polls.
pub const POLL_BACKOFF_MS_MAX: u64 = 30_000;
/// Wait after a 409 Conflict: another consumer (or a webhook) holds the bot's updates.
pub const CONFLICT_BACKOFF_MS: u64 = 5_000;
/// Longest `retry_after` honoured, in seconds.
pub const RETRY_AFTER_S_MAX: u64 = 300;
/// Pause between empty short polls (`pollTimeoutS` 0), so they do not spin.
pub const SHORT_POLL_PAUSE_MS: u64 = 1_000;

/// Starts the long-poll thread.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn(api: BotApi, timeout_s: u32, events: SyncSender<Event>) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name("telegram-poll".to_owned()).spawn(move || {
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| poll_loop(&api, timeout_s, &events)));
        if outcome.is_err() {
            let _ = events.send(Event::ThreadFailed("poll"));
        }
    })
}

fn poll_loop(api: &BotApi, timeout_s: u32, events: &SyncSender<Event>) {
    let mut offset: i64 = 0;
    let mut backoff_ms = POLL_BACKOFF_MS_MIN;
    loop {
        match api.get_updates(offset, timeout_s) {
            Ok(updates) => {
                backoff_ms = POLL_BACKOFF_MS_MIN;
                if updates.is_empty() {
                    if timeout_s == 0 {
                        thread::sleep(Duration::from_millis(SHORT_POLL_PAUSE_MS));
                    }
                    continue;
                }
                let next = next_offset(&updates);
                if !hand_over(updates, events) {
                    return;
                }
                offset = next.unwrap_or(offset);
            }
            Err(error) => {
                let wait_ms = match error.status() {
                    Some(401 | 404) => {
                        let _ = events.send(Event::CredentialRejected);
                        return;
                    }
                    Some(409) => {
                        tracing::warn!("getUpdates conflict: another consumer or a webhook holds this bot's updates");
                        CONFLICT_BACKOFF_MS
                    }
                    Some(429) => error
                        .retry_after_s
                        .map_or(backoff_ms, |seconds| seconds.min(RETRY_AFTER_S_MAX) * 1000),
                    _ => {
                        tracing::warn!(failure = failure_name(&error), "getUpdates failed");
                        backoff_ms
                    }
                };
                thread::sleep(Duration::from_millis(wait_ms));
                backoff_ms = (backoff_ms * 2).min(POLL_BACKOFF_MS_MAX);
            }
        }
    }
}

/// Gives a batch to the main thread and waits until it was handled. `false`: the main thread
/// is gone.
fn hand_over(updates: Vec<Value>, events: &SyncSender<Event>) -> bool {
    let (done, handled) = mpsc::channel();
    if events.send(Event::Updates { updates, done }).is_err() {
        return false;
    }
    handled.recv().is_ok()
}

/// One past the largest `update_id` of the batch.
fn next_offset(updates: &[Value]) -> Option<i64> {
    updates
        .iter()
        .filter_map(|update| update.get("update_id").and_then(Value::as_i64))
        .max()
        .map(|largest| largest.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn next_offset_is_one_past_the_largest_id() {
        let updates = vec![json!({"update_id": 7}), json!({"update_id": 5}), json!({"nothing": 1})];
        assert_eq!(next_offset(&updates), Some(8));
        assert_eq!(next_offset(&[json!({})]), None);
    }
}
