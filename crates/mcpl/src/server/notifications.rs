//! Inbound notifications (§5.4 gating, lifecycle §10.5, outgoing channel events §14.3).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::conn::Conn;
use super::dispatch::{gate, guarded, is_removed, PANICKED};
use super::*;
use crate::jsonrpc::Notification;
use crate::policy::{self, Form};
use crate::protocol::channels::{OutgoingChunkParams, OutgoingCompleteParams};
use crate::protocol::inference::InferenceChunkParams;
use crate::protocol::lifecycle::LifecycleParams;

pub(super) fn on_notification(conn: &Arc<Conn>, n: Notification) {
    let method = n.method.as_str();
    let fallback = conn.fallback();
    match method {
        "notifications/initialized" => {
            if let Some(f) = fallback {
                f.notification(method, n.params);
            }
            return;
        }
        "featureSets/update" => {
            if !lock(&conn.state).mcpl {
                conn.peer_defect(
                    "unknown_notification",
                    "featureSets/update on an MCP-only connection",
                );
                return;
            }
            let params = n.params.unwrap_or(Value::Null);
            let r = {
                let mut st = lock(&conn.state);
                let r = st.policy.apply(Form::Notification, &params);
                conn.publish(&st);
                r
            };
            match r {
                Ok(o) => {
                    for d in o.diagnostics {
                        conn.peer_defect(d.code, d.detail);
                    }
                }
                Err(e) => conn.peer_defect(
                    "policy_malformed",
                    format!("malformed featureSets/update notification; grant cleared: {e}"),
                ),
            }
            return;
        }
        _ => {}
    }
    if policy::method_requirement(method, None).is_none() {
        if let Some(f) = fallback.filter(|_| !is_removed(method)) {
            return f.notification(method, n.params);
        }
        // Nothing received vanishes: MCP notifications this session does not act on
        // (`notifications/cancelled`, `…/message` …) are reported like unknown ones.
        let code = if method.starts_with("notifications/") {
            "ignored_notification"
        } else {
            "unknown_notification"
        };
        conn.peer_defect(code, format!("ignored notification {method}"));
        return;
    }
    if let Err(e) = gate(conn, method, n.params.as_ref()) {
        conn.peer_defect(
            "notification_denied",
            format!("ignored {method}: {}", e.message),
        );
        return;
    }
    let h = &conn.server.handlers;
    match method {
        "inference/lifecycle" => {
            let p: LifecycleParams = match crate::jsonrpc::parse_params(n.params) {
                Ok(p) => p,
                Err(e) => {
                    return conn
                        .peer_defect("invalid_notification", format!("{method}: {}", e.message))
                }
            };
            let now = tokio::time::Instant::now().into_std();
            let obs = lock(&conn.state).lifecycle.observe(&p, now);
            for d in &obs.diagnostics {
                conn.peer_defect(d.code(), d.to_string());
            }
            if let Some(end) = obs.evicted {
                conn.deliver_turn(crate::lifecycle::TurnEvent::Ended(end));
            }
            if let Some(ev) = obs.event {
                conn.deliver_turn(ev);
            }
        }
        "inference/chunk" => {
            let p: InferenceChunkParams = match crate::jsonrpc::parse_params(n.params) {
                Ok(p) => p,
                Err(e) => {
                    return conn
                        .peer_defect("invalid_notification", format!("{method}: {}", e.message))
                }
            };
            let tx = lock(&conn.streams).get(&p.request_id).cloned();
            match tx {
                Some(tx) => {
                    let _ = tx.send(p);
                }
                None => conn.peer_defect(
                    "unknown_inference_chunk",
                    format!(
                        "inference/chunk for request {} that is not streaming",
                        p.request_id
                    ),
                ),
            }
        }
        "channels/outgoing/chunk" => {
            match crate::jsonrpc::parse_params::<OutgoingChunkParams>(n.params) {
                Ok(p) => {
                    if let Some(f) = &h.outgoing_chunk {
                        f(&p)
                    }
                }
                Err(e) => {
                    conn.peer_defect("invalid_notification", format!("{method}: {}", e.message))
                }
            }
        }
        "channels/outgoing/complete" => {
            match crate::jsonrpc::parse_params::<OutgoingCompleteParams>(n.params) {
                Ok(p) => {
                    if let Some(f) = &h.outgoing_complete {
                        f(&p)
                    }
                }
                Err(e) => {
                    conn.peer_defect("invalid_notification", format!("{method}: {}", e.message))
                }
            }
        }
        "channels/publish" => {
            spawn_notification(conn, method, n.params, h.channels_publish.clone())
        }
        "channels/acknowledge" => {
            spawn_notification(conn, method, n.params, h.channels_acknowledge.clone())
        }
        "channels/typing" => spawn_notification(conn, method, n.params, h.channels_typing.clone()),
        _ => conn.peer_defect(
            "unexpected_notification",
            format!("{method} is not a host-to-server notification"),
        ),
    }
}

pub(super) fn spawn_notification<P, R>(
    conn: &Arc<Conn>,
    method: &str,
    params: Option<Value>,
    handler: Option<Handler<P, R>>,
) where
    P: DeserializeOwned + Send + 'static,
    R: Send + 'static,
{
    let Some(handler) = handler else {
        // Gated above: the grant allows the method, so the server advertised its capability.
        let register = method.replace('/', "_");
        conn.author_mistake(
            "unhandled_notification",
            format!(
                "the host sent {method}, which the grant allows, and no handler is registered: \
                 register one with ServerBuilder::on_{register} or leave its capability out of \
                 the feature sets' uses"
            ),
        );
        return;
    };
    let p: P = match crate::jsonrpc::parse_params(params) {
        Ok(p) => p,
        Err(e) => {
            return conn.peer_defect("invalid_notification", format!("{method}: {}", e.message))
        }
    };
    let session = Session { conn: conn.clone() };
    let method = method.to_owned();
    let conn = conn.clone();
    tokio::spawn(async move {
        // A notification has no response for the error to travel in, so it is reported.
        match guarded(&conn, &method, handler(session, p)).await {
            // Reported by `guarded`.
            Err(e) if e.message == PANICKED => {}
            Err(e) => conn.author_mistake(
                "handler_failed",
                format!(
                    "the {method} handler returned an error ({}: {}), which a notification \
                     cannot carry back to the host; handle it in the handler",
                    e.code, e.message
                ),
            ),
            Ok(_) => {}
        }
    });
}
