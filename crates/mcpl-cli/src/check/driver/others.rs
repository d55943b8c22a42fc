//! What the strict host read while one of its requests waited, for a timeout's detail.

use serde_json::Value;

/// The requests and notifications read while one request waited for its answer: a count
/// and the last one's method (at most [`OTHER_METHOD_CHARS`] characters of it), so a
/// timeout under a flood says what came instead of the answer. Holds one short string.
#[derive(Default)]
pub(super) struct Others {
    pub(super) count: u64,
    pub(super) last: Option<String>,
}

/// The characters of a method name [`Others`] keeps.
const OTHER_METHOD_CHARS: usize = 64;

impl Others {
    /// Notes one frame read (a batch as one; a response is not counted).
    pub(super) fn note(&mut self, frame: &Value) {
        let method = match frame {
            Value::Array(items) => items.iter().rev().find_map(|m| m.get("method")),
            other => other.get("method"),
        };
        if let Some(m) = method.and_then(Value::as_str) {
            self.count = self.count.saturating_add(1);
            let shown: String = m.chars().take(OTHER_METHOD_CHARS).collect();
            let cut = if shown.len() < m.len() { "…" } else { "" };
            self.last = Some(format!("{shown:?}{cut}"));
        }
    }
}
