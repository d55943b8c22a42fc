//! The host notifications the session handed out, already admitted (§5.4): outgoing channel
//! events (§14.3), the channel handlers' notifications and the MCP fallback's. The policy
//! Notification and `inference/lifecycle` (§10.5) are the session's own.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::conn::Conn;
use super::dispatch::{guarded, PANICKED};
use super::*;
use crate::jsonrpc::Notification;
use crate::protocol::channels::{
    ChannelsAcknowledge, ChannelsOutgoingChunk, ChannelsOutgoingComplete, ChannelsPublish,
    ChannelsTyping, OutgoingChunkParams, OutgoingCompleteParams,
};
use crate::protocol::handshake::Initialized;
use crate::protocol::{method_info, Method};

/// A host notification the session handed out (admitted, §5.4; the policy Notification,
/// `inference/lifecycle` and `inference/chunk` are decided by the session itself).
pub(super) fn on_notification(conn: &Arc<Conn>, n: Notification) {
    if method_info(&n.method).is_none() {
        return untyped(conn, n);
    }
    let method = n.method.as_str();
    if method == Initialized::NAME {
        if let Some(f) = conn.fallback() {
            f.notification(method, n.params);
        }
        return;
    }
    let h = &conn.server.handlers;
    match method {
        // §14.3: a server with either handler reads the stream (the chunks are advisory,
        // `complete` carries the whole text); with neither, its text would vanish unseen.
        ChannelsOutgoingChunk::NAME => {
            match crate::jsonrpc::parse_params::<OutgoingChunkParams>(n.params) {
                Ok(p) => match (&h.outgoing_chunk, &h.outgoing_complete) {
                    (Some(f), _) => f(&p),
                    (None, Some(_)) => {}
                    (None, None) => unhandled(conn, method),
                },
                Err(e) => conn.diagnostic(invalid(method, e)),
            }
        }
        ChannelsOutgoingComplete::NAME => {
            match crate::jsonrpc::parse_params::<OutgoingCompleteParams>(n.params) {
                Ok(p) => match (&h.outgoing_complete, &h.outgoing_chunk) {
                    (Some(f), _) => f(&p),
                    (None, Some(_)) => {}
                    (None, None) => unhandled(conn, method),
                },
                Err(e) => conn.diagnostic(invalid(method, e)),
            }
        }
        ChannelsPublish::NAME => {
            spawn_notification(conn, method, n.params, h.channels_publish.clone())
        }
        ChannelsAcknowledge::NAME => {
            spawn_notification(conn, method, n.params, h.channels_acknowledge.clone())
        }
        ChannelsTyping::NAME => {
            spawn_notification(conn, method, n.params, h.channels_typing.clone())
        }
        _ => conn.diagnostic(ServerDiagnostic::UnexpectedNotification {
            method: method.to_owned(),
        }),
    }
}

/// A notification this crate does not type: the MCP fallback's, or reported.
fn untyped(conn: &Arc<Conn>, n: Notification) {
    let method = n.method.as_str();
    // Removed surfaces never get here (`host_notification` reports them as unknown).
    if let Some(f) = conn.fallback() {
        return f.notification(method, n.params);
    }
    // Nothing received vanishes: MCP notifications this session does not act on
    // (`notifications/cancelled`, `…/message` …) are reported like unknown ones.
    let method = n.method;
    conn.diagnostic(if method.starts_with("notifications/") {
        ServerDiagnostic::IgnoredNotification { method }
    } else {
        ServerDiagnostic::UnknownNotification {
            method,
            mcp_only: false,
        }
    });
}

/// A notification the grant let through (so the server advertised its capability) that no
/// handler takes: reported, an author mistake (warned once per connection, then logged at
/// `debug`).
fn unhandled(conn: &Conn, method: &str) {
    conn.diagnostic(ServerDiagnostic::UnhandledNotification {
        method: method.to_owned(),
    });
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
        return unhandled(conn, method);
    };
    // What it will hold while its handler runs (its params, parsed), weighed before they
    // are read: by what they hold (`jsonrpc::held_bytes`), not their text, which params
    // dense in small objects outweigh ~90 times.
    let limit = super::conn::notification_byte_limit(&conn.server.peer_config);
    let weight = params
        .as_ref()
        .map_or(1, crate::jsonrpc::held_bytes)
        .clamp(1, limit);
    let p: P = match crate::jsonrpc::parse_params(params) {
        Ok(p) => p,
        Err(e) => return conn.diagnostic(invalid(method, e)),
    };
    // Bounded (`Conn::notification_slots`): past it the notification is reported, not
    // handled, as a request past the in-flight bound is answered busy.
    let Ok(slot) = conn.notification_slots.clone().try_acquire_owned() else {
        return conn.diagnostic(ServerDiagnostic::NotificationDropped {
            method: method.to_owned(),
            limit: conn.server.peer_config.max_in_flight_requests.max(1),
        });
    };
    // Bounded in bytes too: each holds its params while its handler runs.
    let held = limit - conn.notification_bytes.available_permits();
    let bytes = match u32::try_from(weight) {
        Ok(w) => conn
            .notification_bytes
            .clone()
            .try_acquire_many_owned(w)
            .ok(),
        Err(_) => None,
    };
    let Some(bytes) = bytes else {
        return conn.diagnostic(ServerDiagnostic::NotificationDroppedBytes {
            method: method.to_owned(),
            bytes: held.saturating_add(weight),
            limit,
        });
    };
    let session = Session::of(conn.clone());
    let method = method.to_owned();
    let conn = conn.clone();
    tokio::spawn(async move {
        // Held until the handler has ended.
        let _slot = (slot, bytes);
        // A notification has no response for the error to travel in, so it is reported.
        match guarded(&conn, &method, handler(session, p)).await {
            // Reported by `guarded`.
            Err(e) if e.message == PANICKED => {}
            Err(error) => conn.diagnostic(ServerDiagnostic::HandlerFailed { method, error }),
            Ok(_) => {}
        }
    });
}

/// `invalid_notification`: `method`'s params did not parse.
fn invalid(method: &str, e: crate::jsonrpc::ErrorObject) -> ServerDiagnostic {
    ServerDiagnostic::InvalidNotification {
        method: method.to_owned(),
        error: e.message.into_owned(),
    }
}
