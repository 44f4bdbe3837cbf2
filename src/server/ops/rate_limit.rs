//! The rate limit of `interaction.update`: a token bucket per pending request.

/// Updates one request may send per second, sustained, and in a burst.
pub const UPDATES_PER_SECOND: f64 = 20.0;
pub const UPDATES_BURST: f64 = 100.0;
/// Requests whose update rate is tracked at once (the oldest is forgotten first).
const RATE_TRACKED_MAX: usize = 256;
/// Per-request token buckets for `interaction.update`.
#[derive(Default)]
pub struct UpdateLimiter {
    buckets: std::sync::Mutex<std::collections::HashMap<String, (f64, std::time::Instant)>>,
}

impl UpdateLimiter {
    /// Take one token for `request_id`; false when it sends faster than allowed.
    pub fn admit(&self, request_id: &str) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = std::time::Instant::now();
        if buckets.len() >= RATE_TRACKED_MAX && !buckets.contains_key(request_id) {
            let oldest = buckets.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                buckets.remove(&oldest);
            }
        }
        let (tokens, at) = buckets.entry(request_id.to_string()).or_insert((UPDATES_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * UPDATES_PER_SECOND).min(UPDATES_BURST);
        *at = now;
        if *tokens < 1.0 {
            return false;
        }
        *tokens -= 1.0;
        true
    }
}
