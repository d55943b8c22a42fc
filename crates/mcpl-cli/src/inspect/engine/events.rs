//! The session's events as the dashboard shows them ([`Engine::on_event`]).

use std::time::SystemTime;

use mcpl::host::HostEvent;
use mcpl::protocol::push::timestamp_millis;
use mcpl::tags::{AdmittedEvent, ExpandedTags};
use serde_json::{json, Value};

use super::{Engine, Phase, DEFAULT_BEHAVIOR, MAX_EVENTS, MAX_HISTORY};
use crate::inspect::kept::{bound_bytes, push_bounded, EVENT_CUT};

impl Engine {
    /// One event of the session, with its tags' treatment (§16.7).
    pub(super) fn on_event(&self, generation: u64, label: &str, ev: HostEvent) {
        let treat = |fs: Option<&str>, channel: Option<&str>, tags: &ExpandedTags| {
            let default = mcpl::tags::Behavior(json!(DEFAULT_BEHAVIOR));
            let event = AdmittedEvent {
                source: label,
                feature_set: fs,
                channel,
            };
            let t = self.inner.rules.evaluate(&event, tags, &default);
            let rule = match t {
                mcpl::tags::Treatment::Rule { index, .. } => json!(index),
                mcpl::tags::Treatment::Default(_) => json!("default"),
            };
            json!({ "behavior": t.behavior().0, "rule": rule })
        };
        let mut v = match ev {
            HostEvent::Push {
                params,
                feature_set,
                event_id,
                tags,
            } => json!({
                "kind": "push", "featureSet": feature_set, "eventId": event_id,
                "wireTags": params.get("tags"), "tags": tags.to_strings(),
                "treatment": treat(Some(&feature_set), None, &tags), "params": params,
            }),
            HostEvent::ChannelMessage {
                channel_id,
                message,
                tags,
            } => json!({
                "kind": "channel", "channelId": channel_id,
                "wireTags": message.get("tags"), "tags": tags.to_strings(),
                "treatment": treat(None, Some(&channel_id), &tags), "message": message,
            }),
            HostEvent::ManifestChange(receipt) => {
                // MCP's notifications/tools/list_changed (§17.7 surface change).
                let tools_changed = receipt.impacts.iter().any(|i| {
                    i.impact == mcpl::manifest::domains::ChangeImpact::SurfaceChanged
                        && i.subject == "tools"
                });
                if tools_changed {
                    self.relist_tools();
                }
                // The event is handled after the session published the change, maybe after
                // a later one too: the manifest in force is shown only while it is the one
                // this receipt names (its recomputed revision, §17.6).
                let manifest = self
                    .session()
                    .and_then(|s| s.manifest())
                    .filter(|(_, revision)| revision.as_deref() == Some(&receipt.revision));
                json!({
                    "kind": "manifest",
                    "receipt": serde_json::to_value(&receipt).unwrap_or(Value::Null),
                    "superseded": manifest.is_none(),
                    "manifest": manifest.map(|m| m.0),
                    "revision": receipt.revision,
                })
            }
            // Plain MCP's `notifications/*/list_changed` (no manifest reviewed, §3.3).
            HostEvent::ListChanged(list) => {
                if list == mcpl::session::McpList::Tools {
                    self.relist_tools();
                }
                json!({ "kind": "list_changed", "list": list.as_str() })
            }
            // MCP's log, progress and resource-update notifications, as the server sent them.
            HostEvent::Notification { method, params } => {
                json!({ "kind": "notification", "method": method, "params": params })
            }
            HostEvent::ModeChanged(mode) => json!({ "kind": "mode", "mode": format!("{mode:?}") }),
            HostEvent::InputEnded => json!({ "kind": "end" }),
            // An event of a kind added later (`HostEvent` is non-exhaustive): shown whole.
            other => json!({ "kind": "other", "event": format!("{other:?}") }),
        };
        // Cut before the lock: serializing a 16 MiB event takes a while.
        bound_bytes(&mut v, EVENT_CUT);
        {
            let mut st = self.state();
            st.next_event += 1;
            v["seq"] = json!(st.next_event);
            v["time"] = json!(timestamp_millis(SystemTime::now()));
            v["generation"] = json!(generation);
            if v["kind"] == "manifest" {
                push_bounded(&mut st.manifest_changes, v.clone(), MAX_HISTORY);
            }
            if v["kind"] == "mode" && st.generation == generation {
                st.detail = v["mode"].as_str().map(str::to_owned);
            }
            // The close, when it came first, stays what is shown.
            // How many of its requests wait is counted where the state is shown
            // ([`State::shown_detail`]): one sent just before the end may be parked after it.
            if v["kind"] == "end" && st.generation == generation && st.phase != Phase::Closed {
                st.phase = Phase::Ended;
                st.detail = Some("the server ended its output (EOF)".to_owned());
            }
            push_bounded(&mut st.events, v.clone(), MAX_EVENTS);
        }
        let _ = self.inner.ui.send(json!({ "type": "event", "event": v }));
        if v["kind"] == "end" {
            self.note(format!(
                "connection {generation}: the server ended its output (EOF)"
            ));
            self.changed();
        }
    }
}
