//! What the inspector keeps of what it shows, within its bounds: events, requests and every
//! history entry cut past [`MAX_EVENT_BYTES`], histories by count. Channel descriptors are
//! not kept here: the Channels panel shows the library host's table, within its own bounds
//! (`session::ChannelLimits`).

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::engine::MAX_EVENT_BYTES;
use super::log::PREVIEW_CHARS;

/// The members of a kept event [`bound_bytes`] cuts, in order: every one a server sizes (the
/// feature set's name and the channel and event ids too: a 200 KB name kept a 200 KB event).
pub const EVENT_CUT: &[&str] = &[
    "params",
    "message",
    "manifest",
    "receipt",
    "wireTags",
    "tags",
    "featureSet",
    "channelId",
    "eventId",
];

/// The members of a remembered hook run [`bound_bytes`] cuts, in order: what the servers
/// answered (their injections, refusals and failures), then what was sent. Not `consulted`:
/// the names of the one connection's server, shown as they are.
pub const HOOK_CUT: &[&str] = &[
    "system",
    "beforeUser",
    "afterUser",
    "rejected",
    "failures",
    "params",
];

/// Cuts `v` to at most about [`MAX_EVENT_BYTES`] of JSON (see there); the members tried,
/// in order, are `keys`.
pub fn bound_bytes(v: &mut Value, keys: &[&str]) {
    let size = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
    if size(v) <= MAX_EVENT_BYTES {
        return;
    }
    for key in keys {
        let Some(member) = v.get_mut(*key) else {
            continue;
        };
        let text = member.to_string();
        if text.len() > PREVIEW_CHARS {
            let preview: String = text.chars().take(PREVIEW_CHARS).collect();
            *member = json!({ "truncated": true, "bytes": text.len(), "preview": preview });
        }
        if size(v) <= MAX_EVENT_BYTES {
            break;
        }
    }
    v["truncated"] = json!(true);
}

/// Pushes onto a bounded history, dropping the oldest.
pub fn push_bounded(list: &mut VecDeque<Value>, v: Value, bound: usize) {
    list.push_back(v);
    while list.len() > bound {
        list.pop_front();
    }
}
