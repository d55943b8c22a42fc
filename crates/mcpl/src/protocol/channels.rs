//! Channels (§14): descriptors, the §14.3 methods, `channels/acknowledge` and
//! `channels/typing`, with itemized results for register/changed (§14.5).
//!
//! Capabilities follow the §14.1 table; channel methods carry no `featureSet`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::content::Content;
use super::{EmptyObject, Extra};

/// Which way a channel carries messages (§14.2 `direction`).
///
/// Unknown values are kept as `Other` so one odd descriptor does not sink a whole
/// registration (each descriptor is judged on its own, §14.5); an `Other` direction claims
/// neither inbound nor outbound ability (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChannelDirection {
    /// `outbound`: host → surface.
    Outbound,
    /// `inbound`: surface → host.
    Inbound,
    /// `bidirectional`.
    Bidirectional,
    /// A value outside §14.2, kept as received.
    #[serde(untagged)]
    Other(String),
}

impl ChannelDirection {
    /// Whether the channel claims to accept outgoing messages.
    pub fn is_outbound(&self) -> bool {
        matches!(self, Self::Outbound | Self::Bidirectional)
    }
    /// Whether the channel claims to deliver incoming messages.
    pub fn is_inbound(&self) -> bool {
        matches!(self, Self::Inbound | Self::Bidirectional)
    }
}

/// A channel descriptor (§14.2). Everything in it is server testimony.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelDescriptor {
    /// Unique within the connection, e.g. `"discord:#general"`.
    pub id: String,
    /// Platform / provider.
    #[serde(rename = "type")]
    pub kind: String,
    /// Human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Direction; tolerated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<ChannelDirection>,
    /// Provider-specific address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Value>,
    /// Arbitrary metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ChannelDescriptor {
    /// A descriptor of channel `id` on platform `kind` (the wire `type`), nothing else set.
    pub fn new(id: impl Into<String>, kind: impl Into<String>) -> Self {
        ChannelDescriptor {
            id: id.into(),
            kind: kind.into(),
            label: None,
            direction: None,
            address: None,
            metadata: None,
            extra: Extra::new(),
        }
    }

    /// Sets the human `label`.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the `direction`.
    pub fn with_direction(mut self, direction: ChannelDirection) -> Self {
        self.direction = Some(direction);
        self
    }
}

/// `channels/register` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterParams {
    /// The descriptors, each authorized independently (§14.5).
    pub channels: Vec<ChannelDescriptor>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/changed` params (§14.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangedParams {
    /// Newly added channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<Vec<ChannelDescriptor>>,
    /// Removed channel ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    /// Updated channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<Vec<ChannelDescriptor>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of an itemized register/changed result (§14.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// The descriptor id.
    pub id: String,
    /// Whether the host accepted it.
    pub accepted: bool,
    /// Why not (e.g. `"capability_denied"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The itemized result of `channels/register` and Request-form `channels/changed`: one
/// entry per submitted descriptor (§14.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemizedResult {
    /// One entry per descriptor.
    pub results: Vec<ItemResult>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/list` result. §14.3 shows no result shape; the reading here is
/// `{ channels: ChannelDescriptor[] }`, mirroring `channels/register`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListResult {
    /// Known channels.
    pub channels: Vec<ChannelDescriptor>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ListResult {
    /// A `channels/list` result of these channels.
    pub fn new(channels: Vec<ChannelDescriptor>) -> Self {
        ListResult {
            channels,
            extra: Extra::new(),
        }
    }
}

/// `channels/open` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenParams {
    /// Platform / provider.
    #[serde(rename = "type")]
    pub kind: String,
    /// Provider-specific address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Value>,
    /// Arbitrary metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/open` result (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenResult {
    /// The opened channel.
    pub channel: ChannelDescriptor,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl OpenResult {
    /// The answer naming the opened `channel`.
    pub fn new(channel: ChannelDescriptor) -> Self {
        OpenResult {
            channel,
            extra: Extra::new(),
        }
    }
}

/// Params naming one channel (`channels/close`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseParams {
    /// The channel.
    pub channel_id: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/close` result (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseResult {
    /// Whether the channel was closed.
    pub closed: bool,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl CloseResult {
    /// The answer saying whether the channel was `closed`.
    pub fn new(closed: bool) -> Self {
        CloseResult {
            closed,
            extra: Extra::new(),
        }
    }
}

/// `channels/outgoing/chunk` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutgoingChunkParams {
    /// The inference producing the text.
    pub inference_id: String,
    /// The conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The target channel.
    pub channel_id: String,
    /// Monotonic per `inferenceId`, across channels.
    #[serde(deserialize_with = "super::int::u64")]
    pub index: u64,
    /// Moderated text delta.
    pub delta: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/outgoing/complete` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutgoingCompleteParams {
    /// The inference.
    pub inference_id: String,
    /// The conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The channel.
    pub channel_id: String,
    /// The full moderated text for the channel.
    pub content: Content,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/publish` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishParams {
    /// The conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The target channel.
    pub channel_id: String,
    /// Stream flag, as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// The content to deliver.
    pub content: Content,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/publish` result when sent as a Request (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishResult {
    /// Whether the connector delivered it.
    pub delivered: bool,
    /// The platform message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl PublishResult {
    /// The connector delivered the message, as the platform's `message_id` if it has one.
    pub fn delivered(message_id: Option<String>) -> Self {
        PublishResult {
            delivered: true,
            message_id,
            extra: Extra::new(),
        }
    }

    /// The connector did not deliver the message.
    pub fn not_delivered() -> Self {
        PublishResult {
            delivered: false,
            message_id: None,
            extra: Extra::new(),
        }
    }
}

/// The author of an incoming message (§14.3): untrusted testimony.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Author {
    /// Platform user id.
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Author {
    /// An author with platform user `id` and an optional display `name`.
    pub fn new(id: impl Into<String>, name: Option<String>) -> Self {
        Author {
            id: id.into(),
            name,
            extra: Extra::new(),
        }
    }
}

/// One message of `channels/incoming` (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncomingMessage {
    /// The claimed channel; validated against the registered channel at receipt (§14.5).
    pub channel_id: String,
    /// Platform message id.
    pub message_id: String,
    /// Thread id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<Author>,
    /// When it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// The message content.
    pub content: Content,
    /// Arbitrary metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Event tags (§16.1); never authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl IncomingMessage {
    /// Message `message_id` on `channel_id` with `content` (a string or blocks), nothing
    /// else set.
    pub fn new(
        channel_id: impl Into<String>,
        message_id: impl Into<String>,
        content: impl Into<Content>,
    ) -> Self {
        IncomingMessage {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
            thread_id: None,
            author: None,
            timestamp: None,
            content: content.into(),
            metadata: None,
            tags: None,
            extra: Extra::new(),
        }
    }

    /// Sets the `author`.
    pub fn with_author(mut self, author: Author) -> Self {
        self.author = Some(author);
        self
    }

    /// Sets the `timestamp` (ISO 8601).
    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = Some(timestamp.into());
        self
    }

    /// Sets the `tags` (§16.1).
    pub fn with_tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = Some(tags.into_iter().map(Into::into).collect());
        self
    }
}

/// `channels/incoming` params (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncomingParams {
    /// A batch of messages.
    pub messages: Vec<IncomingMessage>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One per-message result of `channels/incoming` (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncomingResultItem {
    /// The message.
    pub message_id: String,
    /// Whether the host accepted it.
    pub accepted: bool,
    /// The conversation it was mapped to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/incoming` result (§14.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncomingResult {
    /// One entry per message.
    pub results: Vec<IncomingResultItem>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/acknowledge` params. §14.1 names the method but SPEC.md gives no shape; the
/// reading here (from AUDIT-001: a read receipt, "seen, not opening") is the host telling
/// the connector it saw `messageId` on `channelId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcknowledgeParams {
    /// The channel.
    pub channel_id: String,
    /// The acknowledged message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `channels/typing` params. Shape not given by SPEC.md; the reading here is liveness
/// signalling by the host on `channelId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypingParams {
    /// The channel.
    pub channel_id: String,
    /// The conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// `channels/register` (§14.3): Server → Host Request; requires `channels.register`.
    ChannelsRegister, "channels/register", Mcpl, Request, ServerToHost, RegisterParams,
    ItemizedResult,
    requires: One(ChannelsRegister)
);
method!(
    /// `channels/changed` (§14.3, §14.5): Server → Host, Notification or Request; requires
    /// `channels.register`.
    ChannelsChanged, "channels/changed", Mcpl, Either, ServerToHost, ChangedParams, ItemizedResult,
    requires: One(ChannelsRegister)
);
method!(
    /// `channels/list` (§14.3): Request in either direction; requires `channels.register`.
    ChannelsList, "channels/list", Mcpl, Request, Either, EmptyObject, ListResult,
    requires: One(ChannelsRegister)
);
method!(
    /// `channels/open` (§14.3): Host → Server Request; requires `channels.lifecycle`.
    ChannelsOpen, "channels/open", Mcpl, Request, HostToServer, OpenParams, OpenResult,
    requires: One(ChannelsLifecycle)
);
method!(
    /// `channels/close` (§14.3): Host → Server Request; requires `channels.lifecycle`.
    ChannelsClose, "channels/close", Mcpl, Request, HostToServer, CloseParams, CloseResult,
    requires: One(ChannelsLifecycle)
);
method!(
    /// `channels/outgoing/chunk` (§14.3): Host → Server Notification; requires
    /// `channels.streaming`.
    ChannelsOutgoingChunk, "channels/outgoing/chunk", Mcpl, Notification, HostToServer,
    OutgoingChunkParams, (),
    requires: One(ChannelsStreaming)
);
method!(
    /// `channels/outgoing/complete` (§14.3): Host → Server Notification; requires
    /// `channels.streaming`.
    ChannelsOutgoingComplete, "channels/outgoing/complete", Mcpl, Notification, HostToServer,
    OutgoingCompleteParams, (),
    requires: One(ChannelsStreaming)
);
method!(
    /// `channels/publish` (§14.3): Host → Server, Notification or Request; requires
    /// `channels.publish`.
    ChannelsPublish, "channels/publish", Mcpl, Either, HostToServer, PublishParams, PublishResult,
    requires: One(ChannelsPublish)
);
method!(
    /// `channels/incoming` (§14.3): Server → Host Request; requires `channels.incoming`.
    ChannelsIncoming, "channels/incoming", Mcpl, Request, ServerToHost, IncomingParams,
    IncomingResult,
    requires: One(ChannelsIncoming)
);
method!(
    /// `channels/acknowledge` (§14.1): requires `channels.acknowledge`. Direction and form are
    /// not given by SPEC.md; the reading is Host → Server, Notification or Request (a
    /// Request is answered with an empty object).
    ChannelsAcknowledge, "channels/acknowledge", Mcpl, Either, HostToServer, AcknowledgeParams,
    EmptyObject,
    requires: One(ChannelsAcknowledge)
);
method!(
    /// `channels/typing` (§14.1): requires `channels.typing`. Same reading as
    /// [`ChannelsAcknowledge`]: Host → Server, Notification or Request.
    ChannelsTyping, "channels/typing", Mcpl, Either, HostToServer, TypingParams, EmptyObject,
    requires: One(ChannelsTyping)
);

/// What makes a channel descriptor (§14.2) unusable, one sentence per defect; empty when it
/// is well-formed. The one rule the host (which refuses such a descriptor as
/// `invalid_descriptor`, §14.5) and `mcpl check` (`channels.descriptor-shape`) both apply.
///
/// §14.2 shows the shape without saying which members are required. Read fail-closed: `id`
/// and `type` are non-empty strings (a channel is addressed by its id, and `type` names its
/// platform); `label`, when present, is a string; `direction`, when present, is one of the
/// three; `address` and `metadata`, when present, are objects. An optional member written
/// `null` is absent ([`super::given`]).
pub fn descriptor_defects(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(o) = d.as_object() else {
        out.push(format!(
            "descriptor is a JSON {}, not an object",
            crate::jsonrpc::json_type_name(d)
        ));
        return out;
    };
    let non_empty = |k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !non_empty("id") {
        out.push("id missing, empty or not a string".into());
    }
    if !non_empty("type") {
        out.push("type missing, empty or not a string".into());
    }
    if super::given(o, "label").is_some_and(|l| !l.is_string()) {
        out.push("label is not a string".into());
    }
    match super::given(o, "direction") {
        None => {}
        Some(Value::String(s))
            if matches!(s.as_str(), "outbound" | "inbound" | "bidirectional") => {}
        Some(other) => out.push(format!(
            "direction {other} is not outbound|inbound|bidirectional"
        )),
    }
    for field in ["address", "metadata"] {
        if super::given(o, field).is_some_and(|v| !v.is_object()) {
            out.push(format!("{field} is not an object"));
        }
    }
    out
}

/// Most defects [`list_defects`] names (a hostile list may hold thousands).
pub const MAX_LIST_DEFECTS: usize = 8;

/// Bytes of a channel id [`list_defects`] quotes (the rest is cut).
const LIST_ID_SHOWN: usize = 64;

/// What makes a `channels/list` answer's `channels` disagree with the channels the asking
/// side registered (`registered`: whether an id is one it registered, added or opened on
/// this connection), one sentence per defect, at most [`MAX_LIST_DEFECTS`]; empty when it
/// agrees. Reading (finding F8a): §14.3 lists the channels known *for this connection*, so
/// an id the asker never registered is one the lister invented or took from elsewhere;
/// §14.2 makes an id unique within the connection, so an id listed twice names two
/// channels by one id. Entries without a string `id` are [`descriptor_defects`]' concern,
/// not named here. A channel left out is the caller's reading (the list is read at a
/// moment a registration may cross). Linear in the list: a sorted set of the ids seen.
pub fn list_defects(channels: &[Value], registered: impl Fn(&str) -> bool) -> Vec<String> {
    let shown = |id: &str| {
        let mut end = id.len().min(LIST_ID_SHOWN);
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        format!("{:?}", &id[..end])
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, id) in channels
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c.get("id")?.as_str()?)))
    {
        if out.len() >= MAX_LIST_DEFECTS {
            break;
        }
        if !seen.insert(id) {
            out.push(format!(
                "channels[{i}] repeats the id {} (§14.2: an id is unique within the connection)",
                shown(id)
            ));
        } else if !registered(id) {
            out.push(format!(
                "channels[{i}] names {}, a channel never registered on this connection \
                 (§14.3: the list is of the channels known for this connection)",
                shown(id)
            ));
        }
    }
    out
}

/// Every defect of one `channels/incoming` message, named `at`, against §14.3; empty when
/// its shape is right. §14.3 gives the message by example only; read as the typed
/// [`IncomingMessage`] reads it: an object with a string `channelId` (what the host
/// validates against the registered channel, §14.5), a non-empty string `messageId` (what
/// the per-message results name), `content` a string or content blocks (§10.3's string form
/// is one text block, as §11.1's example messages use it; blocks by App. B.1), and, when
/// present and not `null` ([`super::given`]), an object `author` and a `timestamp` that is an ISO 8601 string by the one rule
/// `push/event`'s is judged by ([`super::time::timestamp_defect`]). `tags` are not judged here: they
/// never decide admission (§16.6). The one rule the host refuses a message on
/// (`invalid_message`) and `mcpl check` (`channels.incoming-shape`) reports.
pub fn incoming_message_defects(m: &Value, at: &str) -> Vec<String> {
    let Some(o) = m.as_object() else {
        return vec![format!("{at} is not an object")];
    };
    let mut out = Vec::new();
    if !o.get("channelId").is_some_and(Value::is_string) {
        out.push(format!("{at}.channelId missing or not a string"));
    }
    if !o
        .get("messageId")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        out.push(format!("{at}.messageId missing, empty or not a string"));
    }
    out.extend(super::content::content_defects(
        o.get("content"),
        &format!("{at}.content"),
        true,
    ));
    if super::given(o, "author").is_some_and(|a| !a.is_object()) {
        out.push(format!("{at}.author is not an object"));
    }
    match super::given(o, "timestamp") {
        None => {}
        Some(Value::String(ts)) => {
            if let Some(d) = super::time::timestamp_defect(ts) {
                out.push(format!("{at}.timestamp {ts:?} is not ISO 8601: {d}"));
            }
        }
        Some(_) => out.push(format!("{at}.timestamp is not a string")),
    }
    super::listed_defects(out)
}

#[cfg(test)]
mod tests {

    /// §14.3: one defect per rule broken; string content is the §10.3 string form (the
    /// checker refused it while the host accepted it before this rule had one home).
    #[test]
    fn s14_3_incoming_message_defects() {
        use serde_json::json;
        let ok = json!({"channelId": "c", "messageId": "m", "content": "hi",
            "author": {"id": "u"}, "timestamp": "2026-03-05T10:30:00Z", "tags": ["mention"]});
        assert!(incoming_message_defects(&ok, "m").is_empty());
        let blocks = json!({"channelId": "c", "messageId": "m",
            "content": [{"type": "text", "text": "hi"}]});
        assert!(incoming_message_defects(&blocks, "m").is_empty());
        for (bad, what) in [
            (json!({"messageId": "m", "content": "hi"}), "channelId"),
            (
                json!({"channelId": "c", "messageId": "", "content": "hi"}),
                "messageId",
            ),
            (json!({"channelId": "c", "content": "hi"}), "messageId"),
            (json!({"channelId": "c", "messageId": "m"}), "content"),
            (
                json!({"channelId": "c", "messageId": "m", "content": [{"type": "resource",
                "resource": {"uri": "x://y"}}]}),
                "content[0]",
            ),
            (
                json!({"channelId": "c", "messageId": "m", "content": "hi", "author": "a"}),
                "author",
            ),
            (
                json!({"channelId": "c", "messageId": "m", "content": "hi", "timestamp": 1}),
                "timestamp",
            ),
            // §9.2's rule: RFC 3339's space for `T` is not ISO 8601.
            (
                json!({"channelId": "c", "messageId": "m", "content": "hi",
                    "timestamp": "2026-03-05 10:30:00Z"}),
                "ISO 8601",
            ),
            (json!(3), "not an object"),
        ] {
            let d = incoming_message_defects(&bad, "m");
            assert_eq!(d.len(), 1, "{bad}: {d:?}");
            assert!(d[0].contains(what), "{bad}: {d:?}");
        }
    }

    /// §14.2, read fail-closed: one defect per rule broken; an empty `type` is one (the host
    /// refused it while the checker accepted it before this rule had one home).
    #[test]
    fn s14_2_descriptor_defects() {
        use serde_json::json;
        assert!(descriptor_defects(&json!({"id": "ui", "type": "ui"})).is_empty());
        assert!(
            descriptor_defects(&json!({"id": "d:#g", "type": "discord", "label": "#g",
            "direction": "bidirectional", "address": {}, "metadata": {}, "x": 1}))
            .is_empty()
        );
        for bad in [
            json!({"id": "", "type": "ui"}),
            json!({"type": "ui"}),
            json!({"id": "ui", "type": ""}),
            json!({"id": "ui"}),
            json!({"id": "ui", "type": "ui", "label": 3}),
            json!({"id": "ui", "type": "ui", "direction": "up"}),
            json!({"id": "ui", "type": "ui", "address": "x"}),
            json!({"id": "ui", "type": "ui", "metadata": []}),
            json!("ui"),
        ] {
            assert_eq!(descriptor_defects(&bad).len(), 1, "{bad}");
        }
    }
    use super::*;
    use serde_json::json;

    #[test]
    fn s14_2_unknown_direction_claims_nothing() {
        let d: ChannelDescriptor =
            serde_json::from_value(json!({"id":"x","type":"t","direction":"sideways"})).unwrap();
        let dir = d.direction.unwrap();
        assert_eq!(dir, ChannelDirection::Other("sideways".into()));
        assert!(!dir.is_inbound() && !dir.is_outbound());
        assert!(ChannelDirection::Bidirectional.is_inbound());
    }

    #[test]
    fn s14_5_itemized_result_round_trips() {
        let v = json!({"results":[{"id":"a","accepted":true},
                                  {"id":"b","accepted":false,"reason":"capability_denied"}]});
        let r: ItemizedResult = serde_json::from_value(v.clone()).unwrap();
        assert!(!r.results[1].accepted);
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
    }

    /// §14.3, §14.2 (F8a): an id never registered and an id listed twice are named; a list
    /// of registered ids, each once, is not; the count is bounded.
    #[test]
    fn s14_3_a_list_naming_an_unregistered_or_repeated_id_is_defective() {
        let reg = |id: &str| id.starts_with("check:");
        let ok = [
            json!({ "id": "check:a" }),
            json!({ "id": "check:b" }),
            json!({}),
        ];
        assert!(list_defects(&ok, reg).is_empty());
        let bad = [
            json!({ "id": "check:a" }),
            json!({ "id": "evil:invented" }),
            json!({ "id": "check:a" }),
        ];
        let d = list_defects(&bad, reg);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].contains("evil:invented") && d[0].contains("§14.3"),
            "{d:?}"
        );
        assert!(d[1].contains("repeats") && d[1].contains("§14.2"), "{d:?}");
        let many: Vec<Value> = (0..100).map(|i| json!({ "id": format!("x{i}") })).collect();
        assert_eq!(list_defects(&many, reg).len(), MAX_LIST_DEFECTS);
    }
}
