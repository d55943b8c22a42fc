//! [`PushEvent`]: one `push/event` to send (§9).

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use crate::protocol::content::{Content, ContentBlock};

/// One `push/event` to send: [`Session::push_event`](super::Session::push_event) stamps `featureSet`, `eventId` and
/// `timestamp`.
#[derive(Debug, Clone, PartialEq)]
pub struct PushEvent {
    /// The declaring feature set (must be available).
    pub feature_set: String,
    /// `payload.content`.
    pub content: Content,
    /// Caller-chosen `eventId`; `None` derives a stable one (see the module docs).
    pub event_id: Option<String>,
    /// `tags` (§16): descriptive claims.
    pub tags: Option<Vec<String>>,
    /// `origin`: provenance claims.
    pub origin: Option<Map<String, Value>>,
    /// `timestamp` (ISO 8601); `None` uses the current UTC time.
    pub timestamp: Option<String>,
}

impl PushEvent {
    /// A text event for `feature_set`: the shorthand for [`Self::new`] with one text block.
    pub fn text(feature_set: impl Into<String>, text: impl Into<String>) -> Self {
        Self::new(feature_set, ContentBlock::text(text))
    }

    /// An event for `feature_set` carrying `content` (a string, a block, or blocks), kept as
    /// blocks: §9.2 types `payload.content` as `ContentBlock[]`, so a string becomes one
    /// text block (§10.3) and `new(set, "x")` is the same event as `text(set, "x")`, with the
    /// same derived `eventId`.
    pub fn new(feature_set: impl Into<String>, content: impl Into<Content>) -> Self {
        PushEvent {
            feature_set: feature_set.into(),
            content: Content::Blocks(content.into().to_blocks()),
            event_id: None,
            tags: None,
            origin: None,
            timestamp: None,
        }
    }

    /// Sets the `eventId` (reuse it when retrying, §9.4).
    pub fn event_id(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }

    /// Sets the `tags`.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = Some(tags.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the `origin`.
    pub fn origin(mut self, origin: Map<String, Value>) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Sets the `timestamp`.
    pub fn timestamp(mut self, ts: impl Into<String>) -> Self {
        self.timestamp = Some(ts.into());
        self
    }

    /// The `eventId` this event is sent with: the caller's, or one derived
    /// deterministically from `featureSet`, `payload`, `tags` and `origin` (§9.4).
    pub fn stable_event_id(&self) -> String {
        if let Some(id) = &self.event_id {
            return id.clone();
        }
        let basis = json!({
            "featureSet": self.feature_set,
            "content": self.content,
            "tags": self.tags,
            "origin": self.origin,
        });
        let digest = crate::manifest::value_digest(&basis);
        let tail = digest.strip_prefix("sha256:").unwrap_or(&digest);
        format!("evt_{}", tail.chars().take(32).collect::<String>())
    }
}

/// The current UTC time as an RFC 3339 / ISO 8601 string (`YYYY-MM-DDTHH:MM:SSZ`), for
/// §9.2 push event timestamps; see [`crate::protocol::push::timestamp`].
pub fn utc_now_iso8601() -> String {
    crate::protocol::push::timestamp(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn s9_4_derived_event_id_ignores_timestamp_but_not_content() {
        let a = PushEvent::text("s", "one");
        assert_eq!(
            a.stable_event_id(),
            a.clone()
                .timestamp("2001-01-01T00:00:00Z")
                .stable_event_id()
        );
        assert_ne!(
            a.stable_event_id(),
            PushEvent::text("s", "two").stable_event_id()
        );
        assert_ne!(
            a.stable_event_id(),
            PushEvent::text("t", "one").stable_event_id()
        );
        assert_eq!(a.clone().event_id("mine").stable_event_id(), "mine");
        assert!(a.stable_event_id().starts_with("evt_"));
    }
}
