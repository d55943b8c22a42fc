//! Channel registration, changes and incoming messages, authorized item-wise (§14.5).

use super::*;

/// Whether `v`'s compact JSON encoding takes at most `limit` bytes; encoding stops as soon as
/// it goes over, so an oversized value is never encoded whole.
pub(super) fn encoded_within(v: &Value, limit: usize) -> bool {
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
pub(super) fn direction_of(
    descriptor: &Value,
) -> Option<crate::protocol::channels::ChannelDirection> {
    descriptor
        .get("direction")
        .filter(|v| v.is_string())
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

impl HostSession {
    /// Whether the host's channel patterns permit `id`.
    pub(super) fn channel_permitted(&self, id: &str) -> bool {
        match &self.inner.config.channel_patterns {
            None => true,
            Some(pats) => pats.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => p == id,
            }),
        }
    }

    /// Authorizes one descriptor (§14.5) under `judged`, the grant its message is judged
    /// under (see [`Self::admit`]); `Ok(id)` or `(id, reason)`.
    pub(super) fn authorize_descriptor(
        &self,
        d: &Value,
        judged: &Grant,
    ) -> Result<String, (String, &'static str)> {
        let id = d.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
        // §14.2, by the rule `mcpl check` applies too.
        if !crate::protocol::channels::descriptor_defects(d).is_empty()
            || !encoded_within(d, self.inner.config.max_descriptor_bytes)
        {
            return Err((id, "invalid_descriptor"));
        }
        if !judged.allows(Capability::ChannelsRegister) || !self.channel_permitted(&id) {
            return Err((id, "capability_denied"));
        }
        Ok(id)
    }

    pub(super) fn itemize(
        &self,
        method: &str,
        descriptors: &[Value],
        notification: bool,
        judged: &Grant,
        results: &mut Vec<Value>,
    ) {
        let mut seen = HashSet::new();
        for d in descriptors {
            match self.authorize_descriptor(d, judged) {
                Ok(id) if seen.insert(id.clone()) => {
                    let mut st = self.inner.state();
                    let adds = !st.channels.contains_key(&id);
                    if adds && st.channels.len() >= self.inner.config.max_channels {
                        drop(st);
                        self.reject_item(method, id, "channel_limit", notification, results);
                        continue;
                    }
                    st.channels.insert(id.clone(), d.clone());
                    drop(st);
                    results.push(json!({ "id": id, "accepted": true }));
                }
                Ok(id) => {
                    self.reject_item(method, id, "duplicate_descriptor", notification, results)
                }
                Err((id, reason)) => self.reject_item(method, id, reason, notification, results),
            }
        }
    }

    pub(super) fn reject_item(
        &self,
        method: &str,
        id: String,
        reason: &'static str,
        notification: bool,
        results: &mut Vec<Value>,
    ) {
        self.inner.diag(HostDiagnostic::ChannelRejected {
            method: method.to_owned(),
            id: id.clone(),
            reason,
            filtered_notification: notification,
        });
        results.push(json!({ "id": id, "accepted": false, "reason": reason }));
    }

    pub(super) fn on_register(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        const M: &str = "channels/register";
        let ds = params
            .and_then(|p| p.get("channels"))
            .and_then(Value::as_array)
            .ok_or_else(|| self.bad(M, "channels must be an array"))?;
        let limit = self.inner.config.max_channels_per_message;
        if let Some(e) = self.over_limit(M, "channel descriptors", ds.len(), limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        self.itemize(M, ds, notification, judged, &mut results);
        Ok(json!({ "results": results }))
    }

    /// `channels/changed` (§14.5), item by item under `judged`: removals of channels this
    /// connection registered always apply; additions and updates need `channels.register`
    /// in `judged` (an update no longer permitted removes the channel).
    pub(super) fn on_changed(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Option<Value>, ErrorObject> {
        const M: &str = "channels/changed";
        let p = params
            .and_then(Value::as_object)
            .ok_or_else(|| self.bad(M, "params must be an object"))?;
        let arr = |k: &str| -> Result<Vec<Value>, ErrorObject> {
            match p.get(k) {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err(self.bad(M, &format!("{k} must be an array"))),
            }
        };
        let (added, updated, removed) = (arr("added")?, arr("updated")?, arr("removed")?);
        let count = added.len() + updated.len() + removed.len();
        let limit = self.inner.config.max_channels_per_message;
        if let Some(e) = self.over_limit(M, "channel entries", count, limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        for r in removed {
            let id = r.as_str().unwrap_or("").to_owned();
            // A removal narrows: always applied when the channel is ours.
            if self.inner.state().channels.remove(&id).is_some() {
                results.push(json!({ "id": id, "accepted": true }));
            } else {
                self.reject_item(M, id, "unknown_channel", notification, &mut results);
            }
        }
        self.itemize(M, &added, notification, judged, &mut results);
        for u in &updated {
            let id = u.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            if !self.inner.state().channels.contains_key(&id) {
                self.reject_item(M, id, "unknown_channel", notification, &mut results);
                continue;
            }
            match self.authorize_descriptor(u, judged) {
                Ok(id) => {
                    self.inner.state().channels.insert(id.clone(), u.clone());
                    results.push(json!({ "id": id, "accepted": true }));
                }
                Err((id, reason)) => {
                    // An update that is no longer permitted removes the channel.
                    self.inner.state().channels.remove(&id);
                    self.reject_item(M, id, reason, notification, &mut results);
                }
            }
        }
        let receipt = self
            .inner
            .state()
            .review
            .as_mut()
            .and_then(|r| r.surface_changed("channels"));
        if let Some(r) = receipt {
            self.inner.event(HostEvent::ManifestChange(r));
        }
        Ok(Some(json!({ "results": results })))
    }

    /// `channels/incoming` (§14.5): each message validated at receipt against the current
    /// grant and the channel this connection actually registered.
    pub(super) fn on_incoming(&self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        const M: &str = "channels/incoming";
        let msgs = params
            .and_then(|p| p.get("messages"))
            .and_then(Value::as_array)
            .ok_or_else(|| self.bad(M, "messages must be an array"))?;
        let limit = self.inner.config.max_incoming_per_batch;
        if let Some(e) = self.over_limit(M, "messages", msgs.len(), limit) {
            return Err(e);
        }
        let label = self.label();
        let mut results = Vec::new();
        for m in msgs {
            let mid = m
                .get("messageId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let cid = m.get("channelId").and_then(Value::as_str).unwrap_or("");
            let (registered, inbound_ok, granted) = {
                let st = self.inner.state();
                let desc = st.channels.get(cid);
                // Only a channel that claims to deliver messages may (§14.2); a descriptor
                // without a direction claims neither (fail closed).
                let inbound_ok = desc.and_then(direction_of).is_some_and(|d| d.is_inbound());
                (
                    desc.is_some(),
                    inbound_ok,
                    st.grant.allows(Capability::ChannelsIncoming),
                )
            };
            // §14.3, by the rule `mcpl check` reports (content: the string form or App. B.1
            // blocks, as the typed message reads it).
            let malformed =
                !crate::protocol::channels::incoming_message_defects(m, "message").is_empty();
            let rejection = if malformed {
                Some(("invalid_message", codes::INVALID_PARAMS))
            } else if !registered {
                Some(("unknown_channel", codes::UNKNOWN_CHANNEL))
            } else if !granted || !inbound_ok || !self.channel_permitted(cid) {
                Some(("channel_not_permitted", codes::CHANNEL_NOT_PERMITTED))
            } else {
                None
            };
            if let Some((reason, code)) = rejection {
                self.inner.diag(HostDiagnostic::ChannelRejected {
                    method: M.into(),
                    id: mid.clone(),
                    reason,
                    filtered_notification: false,
                });
                results.push(json!({
                    "messageId": mid, "accepted": false, "reason": reason, "code": code
                }));
                continue;
            }
            let tags = self.expand_tags(
                M,
                m.get("tags"),
                AdmittedEvent {
                    source: &label,
                    feature_set: None,
                    channel: Some(cid),
                },
            );
            if self.inner.event(HostEvent::ChannelMessage {
                channel_id: cid.to_owned(),
                message: m.clone(),
                tags,
            }) {
                results.push(json!({ "messageId": mid, "accepted": true }));
            } else {
                results.push(json!({ "messageId": mid, "accepted": false, "reason": "host_busy" }));
            }
        }
        Ok(json!({ "results": results }))
    }
}
