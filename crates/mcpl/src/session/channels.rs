//! [`ChannelTable`]: the channels one connection registered and the host accepted, and the
//! item-wise authorization of `channels/register`, `channels/changed` and
//! `channels/incoming` (§14.2, §14.3, §14.5). The async `host::HostSession`, the sans-I/O
//! [`HostState`](super::HostState) and `mcpl check`'s strict host all decide through it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};

use super::rules::{self, Diagnostics};
use super::{HostDiagnostic, HostEvent};
use crate::capability::{Capability, Grant};
use crate::jsonrpc::{codes, ErrorObject};
use crate::manifest::review::ManifestReview;
use crate::protocol::channels::ChannelDirection;
use crate::protocol::channels::{
    ChannelsChanged, ChannelsClose, ChannelsIncoming, ChannelsOpen, ChannelsRegister,
};
use crate::protocol::Method as _;
use crate::tags::AdmittedEvent;

/// The bounds channel messages are judged under (`host::HostConfig`'s, whose defaults these
/// are).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelLimits {
    /// The host's channel-id patterns (`prefix*` or exact); `None` permits every id.
    pub patterns: Option<Vec<String>>,
    /// The most channels one connection may hold (default 4,096; at least 1, as every bound
    /// here: [`super::HostRules::defects`] gives the reading).
    pub max_channels: usize,
    /// The most descriptors (or `changed` entries) per message (default 1,024).
    pub max_per_message: usize,
    /// The most messages per `channels/incoming` (default 1,024).
    pub max_incoming_per_batch: usize,
    /// The largest descriptor accepted, as compact JSON bytes (default 4,096; §14.2 sets
    /// no size). With [`Self::max_channels`] it also bounds the heap the channels held at
    /// once take ([`Self::max_held_bytes`]).
    pub max_descriptor_bytes: usize,
}

impl Default for ChannelLimits {
    fn default() -> Self {
        ChannelLimits {
            patterns: None,
            max_channels: 4096,
            max_per_message: 1024,
            max_incoming_per_batch: 1024,
            max_descriptor_bytes: 4096,
        }
    }
}

impl ChannelLimits {
    /// The most heap the descriptors one connection holds may take once parsed (their
    /// `jsonrpc::held_bytes` and ids): [`Self::max_channels`] ×
    /// [`Self::max_descriptor_bytes`], the latter counted as at least 4,096 (16 MiB at the
    /// defaults; a plain descriptor of a few members takes about 1 KB parsed, so a small
    /// `max_descriptor_bytes` still holds `max_channels` of those). A descriptor within
    /// `max_descriptor_bytes` of text can hold far more parsed (`{"a":0}` is 7 bytes of
    /// text and about 630 parsed), so the text bound alone let 4,096 channels hold 1.3 GB.
    pub fn max_held_bytes(&self) -> usize {
        self.max_channels
            .saturating_mul(self.max_descriptor_bytes.max(4096))
    }

    /// Whether the host's channel patterns permit `id`. Reading (§14.2 makes an id
    /// "unique within this connection" and says no more): ids and patterns are compared as
    /// the exact strings sent, never case-folded or Unicode-normalized, so a variant of a
    /// permitted id (`OK:a` for `ok:*`, a decomposed `é`) is not permitted by likeness and
    /// is a distinct channel wherever it is: the reading can only under-grant.
    pub fn permits(&self, id: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(pats) => pats.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => p == id,
            }),
        }
    }
}

/// Whether `v`'s compact JSON encoding takes at most `limit` bytes; encoding stops as soon as
/// it goes over, so an oversized value is never encoded whole.
pub fn encoded_within(v: &Value, limit: usize) -> bool {
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(buf.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Budget(limit), v).is_ok()
}

/// A registered descriptor's `direction` (§14.2), read by the protocol type so the host and
/// the types agree on what each direction claims; `None` when absent or not a string.
pub fn direction_of(descriptor: &Value) -> Option<ChannelDirection> {
    descriptor
        .get("direction")
        .filter(|v| v.is_string())
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Authorizes one descriptor (§14.5) under `judged`, the grant its message is judged under:
/// `Ok(id)`, or the id and `invalid_descriptor` (§14.2 shape, or over the size bound) or
/// `capability_denied` (no `channels.register`, or an id the host's patterns refuse).
pub fn authorize_descriptor(
    d: &Value,
    judged: &Grant,
    limits: &ChannelLimits,
) -> Result<String, (String, &'static str)> {
    let id = d.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
    if !crate::protocol::channels::descriptor_defects(d).is_empty()
        || !encoded_within(d, limits.max_descriptor_bytes)
    {
        return Err((id, "invalid_descriptor"));
    }
    if !judged.allows(Capability::ChannelsRegister) || !limits.permits(&id) {
        return Err((id, "capability_denied"));
    }
    Ok(id)
}

/// Whether registering `d` (a `channels/register` descriptor, or one in `channels/changed`
/// `added`) names a channel already registered in this connection as another descriptor:
/// `held` is the descriptor held under `d`'s id, if any. The one rule of §14.2 (a channel id
/// is unique within the connection) that the host's [`ChannelTable`] refuses by and
/// `mcpl check` judges a server by (`channels.ids-unique`). Readings (§14.2 says no more):
/// the very descriptor held, registered again, names the one channel and is no duplicate;
/// descriptors are compared as JSON values (member order aside); an update belongs in
/// `channels/changed` `updated`, and an id removed (or closed) first is free again.
pub fn names_another_channel(held: Option<&Value>, d: &Value) -> bool {
    held.is_some_and(|h| h != d)
}

/// Refuses a message carrying more items than `limit`: `-32602` with
/// `data: {limit, count}`, reported as [`HostDiagnostic::BadParams`].
pub fn over_limit(
    diags: &mut Diagnostics,
    method: &str,
    what: &str,
    count: usize,
    limit: usize,
) -> Option<ErrorObject> {
    (count > limit).then(|| {
        let detail = format!("{count} {what} exceed the limit of {limit} per message");
        rules::bad_params(diags, method, &detail)
            .with_data(json!({ "limit": limit, "count": count }))
    })
}

fn reject_item(
    diags: &mut Diagnostics,
    method: &str,
    id: String,
    reason: &'static str,
    notification: bool,
    results: &mut Vec<Value>,
) {
    diags.push(HostDiagnostic::ChannelRejected {
        method: method.to_owned(),
        id: id.clone(),
        reason,
        filtered_notification: notification,
    });
    results.push(json!({ "id": id, "accepted": false, "reason": reason }));
}

/// A host request whose confirmed answer changes the channels the host holds (§14.3
/// `channels/open` and `channels/close`), with what it asked for.
///
/// Reading (§14.3 gives the methods, §14.5 validates `channels/incoming` against "the
/// actually registered channel"): the set the host validates against is the channels
/// registered plus those a confirmed open named, less those a confirmed close named. Only
/// a confirmed answer adds a channel, judged where the answer is read (§5.4): an open
/// answered late (after its request was given up or timed out) registers nothing. A close
/// answered with an error or with `closed` not `true` leaves the channel (the server says it
/// stays); one never answered in time, or given up unanswered, takes it out, fail closed
/// ([`ChannelTable::unconfirmed`]: the server may have closed it, and a removal only
/// narrows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelLifecycle {
    /// `channels/open` of platform `kind` (its `type`).
    Open {
        /// The `type` asked for.
        kind: String,
    },
    /// `channels/close` of `channel_id`.
    Close {
        /// The `channelId` asked to close.
        channel_id: String,
    },
}

impl ChannelLifecycle {
    /// Whether `method` is `channels/open` or `channels/close`, whose answers a host applies
    /// ([`ChannelTable::settle`]).
    pub fn is_lifecycle(method: &str) -> bool {
        matches!(method, ChannelsOpen::NAME | ChannelsClose::NAME)
    }

    /// The lifecycle change a host request of `method` with `params` asks for; `None` for
    /// another method, or for params naming no string `type` / `channelId` (sent all the
    /// same, but its answer changes nothing: there is no type to hold an opened channel to,
    /// nor a channel to close).
    pub fn of(method: &str, params: Option<&Value>) -> Option<ChannelLifecycle> {
        let member = |k: &str| {
            params
                .and_then(|p| p.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match method {
            ChannelsOpen::NAME => member("type").map(|kind| ChannelLifecycle::Open { kind }),
            ChannelsClose::NAME => {
                member("channelId").map(|channel_id| ChannelLifecycle::Close { channel_id })
            }
            _ => None,
        }
    }
}

/// `removed` of a `channels/changed`'s params, when it is an array.
fn r_of(p: &serde_json::Map<String, Value>) -> Option<&Vec<Value>> {
    crate::protocol::given(p, "removed").and_then(Value::as_array)
}

/// The channels one connection registered and the host accepted, by id.
#[derive(Debug, Clone, Default)]
pub struct ChannelTable {
    /// Ids and descriptors are shared between copies of the table: the host session
    /// publishes a copy for its getters whenever a message changes it, which copied every
    /// descriptor (a storm of small updates to a full table copied the whole table per
    /// message); now a copy costs a reference per channel.
    channels: BTreeMap<Arc<str>, Arc<Value>>,
    /// How many times a channel was added, removed or had its descriptor replaced by a
    /// different one ([`Self::changes`]).
    changes: u64,
    /// The heap the descriptors held take ([`held`]), within
    /// [`ChannelLimits::max_held_bytes`].
    held: usize,
}

/// What channel `id` with descriptor `d` holds, as [`ChannelLimits::max_held_bytes`] counts.
fn held(id: &str, d: &Value) -> usize {
    crate::jsonrpc::held_bytes(d).saturating_add(id.len())
}

impl ChannelTable {
    /// The accepted descriptor of `id`.
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.channels.get(id).map(|d| &**d)
    }

    /// How many times this table changed (a channel added or removed, or its descriptor
    /// replaced by a different one): a caller compares it before and after a message to
    /// tell whether the message changed the channels (§17.7).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Sets `id`'s descriptor, counting a change when it differs from the one held.
    fn put(&mut self, id: String, d: &Value) {
        if self.get(&id) != Some(d) {
            self.held = self.held.saturating_add(held(&id, d));
            if let Some(old) = self
                .channels
                .insert(Arc::from(id.as_str()), Arc::new(d.clone()))
            {
                self.held = self.held.saturating_sub(held(&id, &old));
            }
            self.changes += 1;
        }
    }

    /// Whether holding `d` as `id`'s descriptor (in place of the one held, if any) keeps the
    /// channels within [`ChannelLimits::max_held_bytes`].
    fn fits(&self, id: &str, d: &Value, limits: &ChannelLimits) -> bool {
        let now = match self.channels.get(id) {
            Some(old) => self.held.saturating_sub(held(id, old)),
            None => self.held,
        };
        now.saturating_add(held(id, d)) <= limits.max_held_bytes()
    }

    /// Removes `id`, counting a change when it was held; whether it was.
    fn drop_channel(&mut self, id: &str) -> bool {
        let Some(old) = self.channels.remove(id) else {
            return false;
        };
        self.held = self.held.saturating_sub(held(id, &old));
        self.changes += 1;
        true
    }

    /// The accepted channel ids, in order.
    pub fn ids(&self) -> Vec<String> {
        self.channels.keys().map(|k| k.to_string()).collect()
    }

    /// The `channels/list` result: every accepted descriptor.
    pub fn list(&self) -> Value {
        let all: Vec<&Value> = self.channels.values().map(|d| &**d).collect();
        json!({ "channels": all })
    }

    /// Whether the host may send `method` to channel `id` (§14.1, §14.3): the channel is
    /// this connection's, claims the direction (`channels/acknowledge` answers an inbound
    /// message; the rest need an outbound channel), and the patterns permit it.
    pub fn may_send(&self, method: &str, id: &str, limits: &ChannelLimits) -> bool {
        let inbound = method == "channels/acknowledge";
        let direction_ok = self.get(id).and_then(direction_of).is_some_and(|d| {
            if inbound {
                d.is_inbound()
            } else {
                d.is_outbound()
            }
        });
        direction_ok && limits.permits(id)
    }

    #[allow(clippy::too_many_arguments)]
    fn itemize(
        &mut self,
        diags: &mut Diagnostics,
        method: &str,
        descriptors: &[Value],
        notification: bool,
        judged: &Grant,
        limits: &ChannelLimits,
        results: &mut Vec<Value>,
        seen: &mut HashSet<String>,
    ) {
        for d in descriptors {
            match authorize_descriptor(d, judged, limits) {
                Ok(id) if seen.insert(id.clone()) => {
                    // Fail closed: the registration held stays in force, never replaced by
                    // another descriptor under its id (that could widen its direction).
                    if names_another_channel(self.get(&id), d) {
                        let reason = "duplicate_descriptor";
                        reject_item(diags, method, id, reason, notification, results);
                        continue;
                    }
                    let adds = !self.channels.contains_key(id.as_str());
                    if (adds && self.channels.len() >= limits.max_channels)
                        || !self.fits(&id, d, limits)
                    {
                        reject_item(diags, method, id, "channel_limit", notification, results);
                        continue;
                    }
                    self.put(id.clone(), d);
                    results.push(json!({ "id": id, "accepted": true }));
                }
                Ok(id) => reject_item(
                    diags,
                    method,
                    id,
                    "duplicate_descriptor",
                    notification,
                    results,
                ),
                Err((id, reason)) => reject_item(diags, method, id, reason, notification, results),
            }
        }
    }

    /// Applies the confirmed `result` of a host's `channels/open` or `channels/close`
    /// ([`ChannelLifecycle`]) under `grant`, the grant current where the answer is read (§5.4).
    /// A close whose `closed` is `true` removes the channel. An open's `channel` is
    /// authorized as a registered descriptor is ([`authorize_descriptor`]'s shape and size,
    /// the host's patterns, [`ChannelLimits::max_channels`]) but under `channels.lifecycle`,
    /// the capability the open was sent under, and must be of the `type` asked for
    /// (`type_mismatch`); one refused is reported as [`HostDiagnostic::ChannelRejected`] and
    /// registers nothing. An open naming a channel already held leaves it as held (an open
    /// answer does not rewrite a registration: it could widen its direction); naming it as
    /// another descriptor ([`names_another_channel`], §14.2) is reported
    /// `duplicate_descriptor` too, since the answer handed on disagrees with the channel held.
    pub fn settle(
        &mut self,
        diags: &mut Diagnostics,
        op: &ChannelLifecycle,
        result: &Value,
        grant: &Grant,
        limits: &ChannelLimits,
    ) {
        let kind = match op {
            ChannelLifecycle::Close { channel_id } => {
                if result.get("closed") == Some(&Value::Bool(true)) {
                    self.drop_channel(channel_id);
                }
                return;
            }
            ChannelLifecycle::Open { kind } => kind,
        };
        let d = result.get("channel").unwrap_or(&Value::Null);
        let id = d.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
        let reason = if !crate::protocol::channels::descriptor_defects(d).is_empty()
            || !encoded_within(d, limits.max_descriptor_bytes)
        {
            Some("invalid_descriptor")
        } else if d.get("type").and_then(Value::as_str) != Some(kind.as_str()) {
            Some("type_mismatch")
        } else if !grant.allows(Capability::ChannelsLifecycle) || !limits.permits(&id) {
            Some("capability_denied")
        } else if names_another_channel(self.get(&id), d) {
            Some("duplicate_descriptor")
        } else if self.channels.contains_key(id.as_str()) {
            return;
        } else if self.channels.len() >= limits.max_channels || !self.fits(&id, d, limits) {
            Some("channel_limit")
        } else {
            None
        };
        match reason {
            Some(reason) => diags.push(HostDiagnostic::ChannelRejected {
                method: ChannelsOpen::NAME.to_owned(),
                id,
                reason,
                filtered_notification: false,
            }),
            None => self.put(id, d),
        }
    }

    /// A host's `channels/open` or `channels/close` whose outcome the host never learns (its
    /// request timed out, or was given up before an answer was read): a close takes the
    /// channel out all the same, fail closed (§14.5: the server may have closed it, a late
    /// answer is not read, and a removal only narrows); an open adds nothing.
    pub fn unconfirmed(&mut self, op: &ChannelLifecycle) {
        if let ChannelLifecycle::Close { channel_id } = op {
            self.drop_channel(channel_id);
        }
    }

    /// `channels/register` (§14.5), item by item under `judged`: the `{results}` answer (for
    /// a Notification, what was applied), or `-32602` for a malformed or oversized message.
    /// A descriptor whose id this message already named, or that names a channel held as
    /// another descriptor ([`names_another_channel`], §14.2), is refused item-wise
    /// `duplicate_descriptor` and reported ([`HostDiagnostic::ChannelRejected`]); the
    /// channel held stays as it was.
    pub fn register(
        &mut self,
        diags: &mut Diagnostics,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
        limits: &ChannelLimits,
    ) -> Result<Value, ErrorObject> {
        const M: &str = ChannelsRegister::NAME;
        let Some(ds) = params
            .and_then(|p| p.get("channels"))
            .and_then(Value::as_array)
        else {
            return Err(rules::bad_params(diags, M, "channels must be an array"));
        };
        let limit = limits.max_per_message;
        if let Some(e) = over_limit(diags, M, "channel descriptors", ds.len(), limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        let seen = &mut HashSet::new();
        self.itemize(
            diags,
            M,
            ds,
            notification,
            judged,
            limits,
            &mut results,
            seen,
        );
        Ok(json!({ "results": results }))
    }

    /// `channels/changed` (§14.5), item by item under `judged`: removals of channels this
    /// connection registered always apply (a removal narrows), even from a message refused
    /// whole (`data.removed` names them); additions and updates need
    /// `channels.register` in `judged`, and an update refused as `invalid_descriptor` or
    /// `capability_denied` removes the channel, its item then carrying `"removed": true`.
    ///
    /// Reading (§14.5: itemized results exist so both sides agree on which channels exist;
    /// the spec names no member for a channel dropped by a refused update): the held
    /// descriptor is no longer the one the server means by that id, and a grant that
    /// refuses the update may no longer permit the channel, so it is dropped fail closed
    /// and the item says so, as a refusal whole names its removals in `data.removed`. A
    /// refused update with no `removed` member (`channel_limit`, `duplicate_descriptor`)
    /// left the channel as held. Removals apply first, so an id removed may be added again in the same
    /// message; an `added` descriptor naming a channel still held as another descriptor is
    /// refused `duplicate_descriptor` as in [`Self::register`] (an update goes in `updated`),
    /// and so is a descriptor of `added` or `updated` whose id an earlier one of them named. The caller reports the `channels` surface change (§17.7).
    pub fn changed(
        &mut self,
        diags: &mut Diagnostics,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
        limits: &ChannelLimits,
    ) -> Result<Value, ErrorObject> {
        const M: &str = ChannelsChanged::NAME;
        let Some(p) = params.and_then(Value::as_object) else {
            return Err(rules::bad_params(diags, M, "params must be an object"));
        };
        let empty = Vec::new();
        let mut arr = |k: &str| -> Result<&Vec<Value>, ErrorObject> {
            // An absent or `null` list changes nothing (`protocol::given`).
            match crate::protocol::given(p, k) {
                None => Ok(&empty),
                Some(Value::Array(a)) => Ok(a),
                Some(_) => Err(rules::bad_params(
                    diags,
                    M,
                    &format!("{k} must be an array"),
                )),
            }
        };
        let lists = (arr("added"), arr("updated"), arr("removed"));
        let (added, updated, removed) = match lists {
            (Ok(a), Ok(u), Ok(r)) => (a, u, r),
            (a, u, r) => {
                let e = [a, u, r].into_iter().find_map(Result::err);
                let e = e.unwrap_or_else(|| rules::bad_params(diags, M, "unreadable lists"));
                return Err(self.refused_removing(e, r_of(p)));
            }
        };
        let count = added.len() + updated.len() + removed.len();
        if let Some(e) = over_limit(diags, M, "channel entries", count, limits.max_per_message) {
            return Err(self.refused_removing(e, Some(removed)));
        }
        let mut results = Vec::new();
        for r in removed {
            let id = r.as_str().unwrap_or("").to_owned();
            if self.drop_channel(&id) {
                results.push(json!({ "id": id, "accepted": true }));
            } else {
                reject_item(diags, M, id, "unknown_channel", notification, &mut results);
            }
        }
        // One id in two descriptors of this message (`added` or `updated`): the first
        // stands, the later is refused, as within `channels/register` (§14.2; §14.5's
        // results key on the id, so two answers for one id would be ambiguous).
        let seen = &mut HashSet::new();
        self.itemize(
            diags,
            M,
            added,
            notification,
            judged,
            limits,
            &mut results,
            seen,
        );
        for u in updated {
            let id = u.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            if !self.channels.contains_key(id.as_str()) {
                reject_item(diags, M, id, "unknown_channel", notification, &mut results);
                continue;
            }
            if !seen.insert(id.clone()) {
                let reason = "duplicate_descriptor";
                reject_item(diags, M, id, reason, notification, &mut results);
                continue;
            }
            match authorize_descriptor(u, judged, limits) {
                // Past the heap bound the update is not applied; the channel stays as held
                // (nothing widens: it keeps the descriptor it was authorized with).
                Ok(id) if !self.fits(&id, u, limits) => {
                    reject_item(diags, M, id, "channel_limit", notification, &mut results);
                }
                Ok(id) => {
                    self.put(id.clone(), u);
                    results.push(json!({ "id": id, "accepted": true }));
                }
                // Refused and dropped, said in the item (`removed: true`): a refusal that
                // keeps the channel (`channel_limit` above, `duplicate_descriptor`) has no
                // such member, so the server can tell whether its channel still exists.
                Err((id, reason)) => {
                    let removed = self.drop_channel(&id);
                    reject_item(diags, M, id, reason, notification, &mut results);
                    if let Some(Value::Object(item)) = results.last_mut().filter(|_| removed) {
                        item.insert("removed".into(), Value::Bool(true));
                    }
                }
            }
        }
        Ok(json!({ "results": results }))
    }

    /// A `channels/changed` refused whole (`e`: a list unreadable, or past
    /// `max_per_message` entries) still has its removals applied, fail closed (§14.5): a
    /// removal only narrows what the server may do, and the server no longer holds what it
    /// removed. The refusal's `data.removed` names the channels dropped (at most the
    /// channels held, so it stays bounded); nothing is itemized, nothing is added.
    fn refused_removing(&mut self, e: ErrorObject, removed: Option<&Vec<Value>>) -> ErrorObject {
        let dropped: Vec<&str> = removed
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|id| self.drop_channel(id))
            .collect();
        if dropped.is_empty() {
            return e;
        }
        let mut data = match e.data.clone() {
            Some(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        data.insert("removed".into(), json!(dropped));
        e.with_data(Value::Object(data))
    }

    /// `channels/incoming` (§14.5): each message validated at receipt (§14.3 shape) against
    /// `grant` and the channel this connection registered (which must claim inbound, §14.2,
    /// and be permitted), then handed to `deliver` as a [`HostEvent::ChannelMessage`] with
    /// its tags expanded (§16.3); `deliver` returns whether the application took it
    /// (otherwise `host_busy`). Each rejection carries its Appendix A `code`.
    #[allow(clippy::too_many_arguments)]
    pub fn incoming(
        &self,
        diags: &mut Diagnostics,
        params: Option<&Value>,
        grant: &Grant,
        limits: &ChannelLimits,
        review: Option<&ManifestReview>,
        source: &str,
        mut deliver: impl FnMut(HostEvent) -> bool,
    ) -> Result<Value, ErrorObject> {
        const M: &str = ChannelsIncoming::NAME;
        let Some(msgs) = params
            .and_then(|p| p.get("messages"))
            .and_then(Value::as_array)
        else {
            return Err(rules::bad_params(diags, M, "messages must be an array"));
        };
        let limit = limits.max_incoming_per_batch;
        if let Some(e) = over_limit(diags, M, "messages", msgs.len(), limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        for m in msgs {
            // Echoed as sent, `null` when absent, so the server can match each result.
            let echoed = m.get("messageId").cloned().unwrap_or(Value::Null);
            let mid = echoed.as_str().unwrap_or("").to_owned();
            let cid = m.get("channelId").and_then(Value::as_str).unwrap_or("");
            let desc = self.get(cid);
            // A descriptor without a direction claims neither (fail closed).
            let inbound_ok = desc.and_then(direction_of).is_some_and(|d| d.is_inbound());
            let malformed =
                !crate::protocol::channels::incoming_message_defects(m, "message").is_empty();
            let rejection = if malformed {
                Some(("invalid_message", codes::INVALID_PARAMS))
            } else if desc.is_none() {
                Some(("unknown_channel", codes::UNKNOWN_CHANNEL))
            } else if !grant.allows(Capability::ChannelsIncoming)
                || !inbound_ok
                || !limits.permits(cid)
            {
                Some(("channel_not_permitted", codes::CHANNEL_NOT_PERMITTED))
            } else {
                None
            };
            if let Some((reason, code)) = rejection {
                diags.push(HostDiagnostic::ChannelRejected {
                    method: M.into(),
                    id: mid.clone(),
                    reason,
                    filtered_notification: false,
                });
                results.push(json!({
                    "messageId": echoed, "accepted": false, "reason": reason, "code": code
                }));
                continue;
            }
            let tags = rules::expand_tags(
                diags,
                review,
                M,
                m.get("tags"),
                AdmittedEvent {
                    source,
                    feature_set: None,
                    channel: Some(cid),
                },
            );
            let taken = deliver(HostEvent::ChannelMessage {
                channel_id: cid.to_owned(),
                message: m.clone(),
                tags,
            });
            if taken {
                results.push(json!({ "messageId": echoed, "accepted": true }));
            } else {
                results
                    .push(json!({ "messageId": echoed, "accepted": false, "reason": "host_busy" }));
            }
        }
        Ok(json!({ "results": results }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §14.5: the channels' heap bound (`ChannelLimits::max_held_bytes`) counts each
    /// channel as at least 4,096 bytes, so a host that set a small `max_descriptor_bytes`
    /// still holds `max_channels` plain descriptors (about 1 KB each parsed), while a
    /// descriptor dense in small objects is still refused past the bound.
    #[test]
    fn s14_5_a_small_descriptor_limit_still_holds_its_channels() {
        let limits = ChannelLimits {
            max_channels: 8,
            max_descriptor_bytes: 256,
            ..ChannelLimits::default()
        };
        let grant = Grant::from_patterns(["channels.register"]).expect("pattern");
        let mut table = ChannelTable::default();
        let mut diags = Vec::new();
        let plain: Vec<Value> = (0..8)
            .map(|i| json!({ "id": format!("c{i}"), "type": "chat", "direction": "inbound" }))
            .collect();
        let params = json!({ "channels": plain });
        let r = table
            .register(&mut diags, Some(&params), false, &grant, &limits)
            .expect("answered item-wise");
        let accepted = r["results"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|x| x["accepted"] == true).count());
        assert_eq!(accepted, 8, "{r}");
        assert!(diags.is_empty(), "{diags:?}");
    }
}
