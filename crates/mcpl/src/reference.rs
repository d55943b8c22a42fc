//! The reference MCPL 0.5 server, built only on the public [`crate::server`] API. It backs
//! `mcpl serve` and is the default target of `mcpl check`.
//!
//! Use [`serve`] for one connection (stdio, one accepted TCP or WebSocket connection),
//! [`serve_tcp`] for a TCP listener, or build one [`Server`] with [`server`] and call
//! [`Server::serve`] per accepted connection so that all connections share one manifest
//! tracker (what [`serve_tcp`] does):
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use mcpl::server::listen::{serve, ServeConfig};
//!
//! let srv = mcpl::reference::server();
//! let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:7777").await?;
//! // Each connection in its own task; accept errors (EMFILE…) are survived.
//! serve(srv, Arc::new(listener), ServeConfig::default()).await;
//! # Ok(())
//! # }
//! ```
//!
//! What it exercises (feature sets in its manifest):
//! - `ref.events` (`pushEvents`, with a `tagOntology`): after the policy receipt, when
//!   available, one `push/event` tagged `ref:greeting` and `chat:broadcast`; the tool
//!   `schedule_event` sends another (tags `ref:scheduled`);
//! - `ref.hints` (`contextHooks.beforeInference.inject.beforeUser`, no `observe`): a
//!   `beforeUser` injection that never reads the user message;
//! - `ref.chat` (`channels.register`, `channels.publish`, `channels.incoming`): an in-memory
//!   chat surface; after the receipt it registers `ref:lobby`; `channels/publish` appends to
//!   the surface log; the tool `say` delivers a user message with `channels/incoming`;
//! - `ref.turns` (`inferenceLifecycle`): the built-in lifecycle consumer (dedupe, safety
//!   timeout) counts turns, reported by the tool `turns`;
//! - `ref.model` (`modelInfo`): the tool `model` asks `model/info`;
//! - MCP tools `echo`, `schedule_event`, `add_topic` (adds a feature set `topic.<name>`
//!   through the tracker, so `mcpl/manifestChanged` fires), `say`, `turns`, `model`.
//!
//! It is strict: inert until the policy Request (§5.3), receipt per §6.7, and every send
//! checked against the grant by the session.

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::capability::Capability;
use crate::jsonrpc::ErrorObject;
use crate::peer::CloseReason;
use crate::protocol::channels::{
    Author, ChannelDescriptor, ChannelDirection, IncomingMessage, ListResult, PublishResult,
};
use crate::protocol::content::{Content, ContentBlock};
use crate::protocol::handshake::{ToolContent, ToolsCallParams, ToolsCallResult};
use crate::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use crate::server::listen::ServeConfig;
use crate::server::{utc_now_iso8601, PushEvent, Server, Session};
use crate::transport::listen::Listen;
use crate::transport::Transport;

/// Name and version in `serverInfo`.
pub const NAME: &str = "mcpl-reference";
/// The channel the reference server registers.
pub const LOBBY: &str = "ref:lobby";

#[derive(Default)]
struct Shared {
    published: Vec<String>,
    turns_started: u64,
    turns_ended: u64,
    incoming_seq: u64,
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn text_result(text: impl Into<String>) -> ToolsCallResult {
    ToolsCallResult {
        content: vec![ToolContent::text(text)],
        is_error: None,
        state: None,
        extra: Map::new(),
    }
}

fn error_result(text: impl Into<String>) -> ToolsCallResult {
    ToolsCallResult {
        is_error: Some(true),
        ..text_result(text)
    }
}

fn arg(p: &ToolsCallParams, key: &str) -> Option<String> {
    p.arguments.as_ref()?.get(key)?.as_str().map(str::to_owned)
}

fn lobby() -> ChannelDescriptor {
    ChannelDescriptor {
        id: LOBBY.into(),
        kind: "reference-chat".into(),
        label: Some("Reference lobby".into()),
        direction: Some(ChannelDirection::Bidirectional),
        address: None,
        metadata: None,
        extra: Map::new(),
    }
}

fn string_schema(props: &[&str]) -> Value {
    let mut p = Map::new();
    for k in props {
        p.insert((*k).into(), json!({"type": "string"}));
    }
    json!({"type": "object", "properties": p, "required": props})
}

/// Builds the reference server (a fresh manifest tracker each call).
pub fn server() -> Server {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let (s1, s2, s3, s4, s5) = (
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
    );
    let builder = Server::builder(NAME, env!("CARGO_PKG_VERSION"))
        .instructions("The MCPL 0.5 reference server: small, strict, and complete.")
        .feature_set("ref.events", "Push events with tags", &[Capability::PushEvents])
        .tag_ontology(
            "ref.events",
            json!({
                "coreTags": ["chat:broadcast"],
                "tags": {
                    "ref:greeting": {"desc": "Sent once after the policy receipt", "facet": "sender"},
                    "ref:scheduled": {"desc": "Scheduled by the schedule_event tool", "facet": "sender"}
                }
            }),
        )
        .feature_set(
            "ref.hints",
            "A beforeUser hint that never reads the user message",
            &[Capability::InjectBeforeUser],
        )
        .feature_set(
            "ref.chat",
            "An in-memory chat surface",
            &[
                Capability::ChannelsRegister,
                Capability::ChannelsPublish,
                Capability::ChannelsIncoming,
            ],
        )
        .feature_set(
            "ref.turns",
            "Counts turns from inference/lifecycle",
            &[Capability::InferenceLifecycle],
        )
        .feature_set("ref.model", "Asks model/info", &[Capability::ModelInfo])
        .feature_set("ref.tools", "MCP tools", &[Capability::Tools])
        .on_ready(|session: Session| async move {
            if session.feature_available("ref.chat") {
                if let Err(e) = session.channels_register(vec![lobby()]).await {
                    tracing::warn!("channels/register failed: {e}");
                }
            }
            if session.feature_available("ref.events") {
                let ev = PushEvent::text("ref.events", "The reference server is ready.")
                    .tags(["ref:greeting", "chat:broadcast"])
                    .event_id("evt_ref_greeting");
                if let Err(e) = session.push_event(ev).await {
                    tracing::warn!("push/event failed: {e}");
                }
            }
        })
        .on_before_inference("ref.hints", |_grant, p| async move {
            Ok(BeforeInferenceResult {
                feature_set: Some("ref.hints".into()),
                context_injections: vec![ContextInjection {
                    namespace: "reference".into(),
                    position: Position::BeforeUser,
                    content: Content::Text(format!(
                        "Reference hint for turn {} of {}.",
                        p.turn_index, p.conversation_id
                    )),
                    metadata: None,
                    extra: Map::new(),
                }],
                extra: Map::new(),
            })
        })
        .on_turn_start(move |_| lock(&s1).turns_started += 1)
        .on_turn_end(move |_| lock(&s2).turns_ended += 1)
        .on_channels_publish(move |_s, p| {
            let shared = s3.clone();
            async move {
                if p.channel_id != LOBBY {
                    return Err(ErrorObject::unknown_channel(&p.channel_id));
                }
                let text: String = p
                    .content
                    .to_blocks()
                    .iter()
                    .filter_map(|b| serde_json::to_value(b).ok())
                    .filter_map(|v| v.get("text").and_then(Value::as_str).map(str::to_owned))
                    .collect::<Vec<_>>()
                    .join("");
                let mut st = lock(&shared);
                st.published.push(text);
                Ok(PublishResult {
                    delivered: true,
                    message_id: Some(format!("ref_out_{}", st.published.len())),
                    extra: Map::new(),
                })
            }
        })
        .on_channels_list(|_s| async {
            Ok(ListResult {
                channels: vec![lobby()],
                extra: Map::new(),
            })
        })
        .tool("echo", "Echo the text back", string_schema(&["text"]), |_s, p| async move {
            Ok(text_result(arg(&p, "text").unwrap_or_default()))
        })
        .tool(
            "schedule_event",
            "Schedule a push/event carrying the text",
            string_schema(&["text"]),
            |session: Session, p| async move {
                let text = arg(&p, "text").unwrap_or_else(|| "scheduled event".into());
                if !session.feature_available("ref.events") {
                    return Ok(error_result("ref.events is not available on this connection"));
                }
                let ev = PushEvent::text("ref.events", text).tags(["ref:scheduled"]);
                let id = ev.stable_event_id();
                tokio::spawn(async move {
                    if let Err(e) = session.push_event(ev).await {
                        tracing::warn!("scheduled push/event failed: {e}");
                    }
                });
                Ok(text_result(format!("scheduled {id}")))
            },
        )
        .tool(
            "add_topic",
            "Declare a feature set topic.<name> (changes the manifest)",
            string_schema(&["name"]),
            |session: Session, p| async move {
                let Some(name) = arg(&p, "name") else {
                    return Err(ErrorObject::invalid_params("name is required"));
                };
                let set = format!("topic.{name}");
                let out = session.tracker().transaction(|m| {
                    if let Some(sets) = m.get_mut("featureSets").and_then(Value::as_object_mut) {
                        sets.insert(
                            set.clone(),
                            json!({"description": format!("Events about {name}"),
                                   "uses": ["pushEvents"]}),
                        );
                    }
                });
                match out {
                    Ok(o) => Ok(text_result(format!("revision {}", o.revision))),
                    Err(e) => Ok(error_result(format!("manifest refused: {e}"))),
                }
            },
        )
        .tool(
            "say",
            "Deliver a user message from the in-memory chat surface (channels/incoming)",
            string_schema(&["text"]),
            move |session: Session, p| {
                let shared = s4.clone();
                async move {
                    let text = arg(&p, "text").unwrap_or_default();
                    let seq = {
                        let mut st = lock(&shared);
                        st.incoming_seq += 1;
                        st.incoming_seq
                    };
                    let msg = IncomingMessage {
                        channel_id: LOBBY.into(),
                        message_id: format!("ref_in_{seq}"),
                        thread_id: None,
                        author: Some(Author {
                            id: "u_ref".into(),
                            name: Some("Reference user".into()),
                            extra: Map::new(),
                        }),
                        timestamp: Some(utc_now_iso8601()),
                        content: Content::Blocks(vec![ContentBlock::text(text)]),
                        metadata: None,
                        tags: Some(vec!["chat:mention".into(), "chat:addressed".into()]),
                        extra: Map::new(),
                    };
                    match session.channels_incoming(vec![msg]).await {
                        Ok(r) => Ok(text_result(
                            serde_json::to_string(&r).unwrap_or_else(|_| "{}".into()),
                        )),
                        Err(e) => Ok(error_result(e.to_string())),
                    }
                }
            },
        )
        .tool("turns", "Report turn counts", json!({"type": "object"}), move |_s, _p| {
            let shared = s5.clone();
            async move {
                let st = lock(&shared);
                Ok(text_result(
                    json!({"started": st.turns_started, "ended": st.turns_ended,
                           "published": st.published})
                    .to_string(),
                ))
            }
        })
        .tool(
            "model",
            "Ask the host for model/info",
            json!({"type": "object"}),
            |session: Session, _p| async move {
                match session.model_info().await {
                    Ok(m) => Ok(text_result(
                        serde_json::to_string(&m).unwrap_or_else(|_| "{}".into()),
                    )),
                    Err(e) => Ok(error_result(e.to_string())),
                }
            },
        );
    match builder.build() {
        Ok(s) => s,
        // The builder input above is a constant; a failure is a bug in this module.
        Err(e) => unreachable!("reference server manifest is invalid: {e}"),
    }
}

/// Serves one connection with a fresh reference server until it ends.
pub async fn serve(transport: Transport) -> CloseReason {
    server().serve(transport).await
}

/// Accepts TCP connections forever, serving each with one shared reference server (one
/// manifest tracker for all connections), with the default [`ServeConfig`]. Never returns:
/// accept errors are survived (see [`crate::transport::listen`]).
pub async fn serve_tcp(listener: crate::transport::tcp::Listener) {
    serve_on(Arc::new(listener), ServeConfig::default()).await
}

/// Serves one shared reference server on every connection `listener` accepts (TCP or
/// WebSocket), forever, with the limits of `config` ([`crate::server::listen::serve`]).
pub async fn serve_on<L: Listen + 'static>(listener: Arc<L>, config: ServeConfig) {
    crate::server::listen::serve(server(), listener, config).await
}
