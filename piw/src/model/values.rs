//! Attempt values (outputs and errors) piw has read for the selected run. The view names
//! them only by digest-bound reference (`outputRef` / `errorRef`); piw reads one when the
//! inspector shows its attempt, keeps it as bounded pretty-printed text, and shows each as
//! loading, ready or a section-level error, never as endless loading: a read lost with the
//! connection is forgotten and asked for again once the connection is back.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

/// Values kept at once (the oldest read is dropped first; it is read again when shown).
pub const VALUES_CACHED_MAX: usize = 16;
/// Bytes of pretty-printed text kept per value (the rest is cut with a notice).
pub const VALUE_TEXT_BYTES_MAX: usize = 64 * 1024;
/// Lines of pretty-printed text kept per value.
pub const VALUE_TEXT_LINES_MAX: usize = 2_000;

/// A value by what its reference names: digest and media type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValueKey {
    pub digest: String,
    pub media_type: String,
}

/// A value as the inspector draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueText {
    pub lines: Vec<String>,
    /// Set when the text was cut: what was left out.
    pub cut: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueState {
    /// Asked for; the answer (or a section error) is on its way.
    Loading,
    Ready(Arc<ValueText>),
    Failed(String),
}

#[derive(Debug, Default, Clone)]
pub struct AttemptValues {
    entries: HashMap<ValueKey, ValueState>,
    /// Oldest first, for the bound.
    order: VecDeque<ValueKey>,
}

impl AttemptValues {
    pub fn get(&self, key: &ValueKey) -> Option<&ValueState> {
        self.entries.get(key)
    }

    /// Mark `key` as asked for (a new entry: the oldest one goes beyond the bound).
    pub fn start(&mut self, key: ValueKey) {
        if self.entries.insert(key.clone(), ValueState::Loading).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > VALUES_CACHED_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    /// The answer for `key` (ignored unless it was asked for and is still kept).
    pub fn finish(&mut self, key: &ValueKey, value: Result<Arc<Value>, String>) {
        let Some(entry) = self.entries.get_mut(key) else { return };
        *entry = match value {
            Ok(value) => ValueState::Ready(Arc::new(pretty(&value))),
            Err(err) => ValueState::Failed(err),
        };
    }

    /// The connection was lost: reads in flight will not be answered; ask again later.
    pub fn forget_loading(&mut self) {
        self.entries.retain(|_, state| *state != ValueState::Loading);
        let entries = &self.entries;
        self.order.retain(|key| entries.contains_key(key));
    }
}

/// `value` as indented JSON, cut at [`VALUE_TEXT_LINES_MAX`] lines and
/// [`VALUE_TEXT_BYTES_MAX`] bytes.
pub fn pretty(value: &Value) -> ValueText {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    let mut lines = Vec::new();
    let mut bytes = 0;
    for line in text.lines() {
        if lines.len() == VALUE_TEXT_LINES_MAX || bytes + line.len() > VALUE_TEXT_BYTES_MAX {
            // A long line (one big string) still shows its beginning.
            let head = prefix(line, VALUE_TEXT_BYTES_MAX.saturating_sub(bytes));
            if lines.len() < VALUE_TEXT_LINES_MAX && !head.is_empty() {
                bytes += head.len();
                lines.push(format!("{head}…"));
            }
            let cut = format!("… cut: {bytes} of {} bytes of the formatted value shown", text.len());
            return ValueText { lines, cut: Some(cut) };
        }
        bytes += line.len() + 1;
        lines.push(line.to_string());
    }
    ValueText { lines, cut: None }
}

/// The longest prefix of `text` within `bytes` that ends on a character boundary.
fn prefix(text: &str, bytes: usize) -> &str {
    let mut end = bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(digest: &str) -> ValueKey {
        ValueKey {
            digest: digest.into(),
            media_type: "m".into(),
        }
    }

    #[test]
    fn a_value_is_loading_then_ready_and_a_lost_read_is_forgotten() {
        let mut values = AttemptValues::default();
        values.start(key("a"));
        values.start(key("b"));
        assert_eq!(values.get(&key("a")), Some(&ValueState::Loading));
        values.finish(&key("a"), Ok(Arc::new(json!({"ready": true}))));
        let Some(ValueState::Ready(text)) = values.get(&key("a")) else {
            panic!("ready")
        };
        assert_eq!(text.lines, vec!["{", "  \"ready\": true", "}"]);
        values.forget_loading();
        assert!(values.get(&key("b")).is_none(), "asked again once connected");
        assert!(values.get(&key("a")).is_some(), "a read value stays");
        values.finish(&key("b"), Ok(Arc::new(json!(1))));
        assert!(values.get(&key("b")).is_none(), "an answer nobody waits for is dropped");
    }

    #[test]
    fn the_cache_and_the_text_are_bounded() {
        let mut values = AttemptValues::default();
        for index in 0..VALUES_CACHED_MAX + 3 {
            values.start(key(&index.to_string()));
        }
        assert!(values.get(&key("0")).is_none());
        assert!(values.get(&key(&(VALUES_CACHED_MAX + 2).to_string())).is_some());
        let long: Vec<i64> = (0..(VALUE_TEXT_LINES_MAX as i64 * 2)).collect();
        let text = pretty(&json!(long));
        assert_eq!(text.lines.len(), VALUE_TEXT_LINES_MAX);
        assert!(text.cut.as_deref().is_some_and(|cut| cut.starts_with("… cut")));
        let wide = pretty(&json!("x".repeat(VALUE_TEXT_BYTES_MAX * 2)));
        assert_eq!(wide.lines.len(), 1, "one line above the byte bound shows its beginning");
        assert!(wide.lines[0].starts_with("\"xxx") && wide.lines[0].len() <= VALUE_TEXT_BYTES_MAX + 3);
        assert!(wide.cut.is_some());
    }
}
