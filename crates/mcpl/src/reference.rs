//! The reference MCPL 0.5 server, built only on the public [`crate::server`] API. It backs
//! `mcpl serve` and is the default target of `mcpl check`.
//!
//! Use [`serve`] for one connection (stdio, one accepted TCP or WebSocket connection) and
//! [`serve_tcp`] for a TCP listener. One [`Server`] from [`server`] serves every connection
//! (one manifest tracker, handler table and tool registry), and what a client changes
//! belongs to its connection and goes away with it, so one connection cannot change what
//! another sees (or what `mcpl check` concludes about it):
//! - notes and their checkpoints, the published log, the turn counts and the `say` sequence
//!   are the connection's state ([`crate::server::ServerBuilder::connection_state`]), made at
//!   its first use: an idle connection holds none of it;
//! - `add_topic` changes the connection's own manifest ([`Session::own_manifest`]): the topic
//!   is announced (§17.3) and served by `mcpl/manifest` on that connection only.
//!
//! Reading (§8, §17): the spec gives a server's state and manifest no scope across
//! connections. §8.7 lets the server decide what it retains (a pruned checkpoint is
//! `-32005`), and the host reviews the manifest per connection (§17.1, §17.5, §17.8), so
//! both are kept per connection here: a checkpoint from one connection is unknown
//! (`-32005`) on another, and a topic added on one is not in another's manifest. The
//! server's shared tracker is never changed by a client.
//!
//! To serve a listener yourself:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use mcpl::server::listen::{serve, ServeConfig};
//!
//! let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:7777").await?;
//! // Each connection in its own task, one shared server; accept errors (EMFILE…) are
//! // survived. It returns only when the ServeConfig is refused.
//! serve(mcpl::reference::server(), Arc::new(listener), ServeConfig::default()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Its state is bounded whatever a client sends, per connection: at most [`MAX_TOPICS`]
//! topics, [`MAX_NOTES`] notes, and of the published messages only a count and the last
//! [`KEPT_PUBLISHED`] texts (each cut to [`KEPT_CHARS`] characters).
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
//! - `channels.lifecycle` (advertised, no feature set: host-initiated only): `channels/open`
//!   of type `reference-chat` opens the lobby, `channels/close` closes it (any other id:
//!   `-32023`, §14.6);
//! - `ref.turns` (`inferenceLifecycle`): the built-in lifecycle consumer (dedupe, safety
//!   timeout) counts turns, reported by the tool `turns`;
//! - `ref.model` (`modelInfo`): the tool `model` asks `model/info`;
//! - `ref.ask` (`inferenceRequest`): the tool `ask` sends a non-streaming `inference/request`
//!   with the text as a user message and returns the host's answer (or its refusal);
//! - `ref.notes` (`tools`, `rollback: true`, §8): the tool `note` appends a note and returns
//!   a checkpoint (§8.4 `state`); `state/rollback` to one of those checkpoints drops the
//!   notes after it (and the later checkpoints); any other checkpoint is `-32005` (§8.7);
//! - MCP tools `echo`, `schedule_event`, `add_topic` (adds a feature set `topic.<name>`
//!   through the tracker, so `mcpl/manifestChanged` fires), `say`, `turns`, `model`, `ask`,
//!   `note`.
//!
//! It is strict: inert until the policy Request (§5.3), receipt per §6.7, and every send
//! checked against the grant by the session.

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::capability::Capability;
use crate::jsonrpc::ErrorObject;
use crate::peer::CloseReason;
use crate::policy::FeatureSetDeclaration;
use crate::protocol::channels::{
    Author, ChannelDescriptor, ChannelDirection, CloseResult, IncomingMessage, OpenResult,
    PublishResult,
};
use crate::protocol::content::{Content, ContentBlock};
use crate::protocol::handshake::{ToolsCallParams, ToolsCallResult};
use crate::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use crate::protocol::inference::{InferenceMessage, InferenceRequestParams};
use crate::protocol::state::{RollbackResult, StateInfo};
use crate::server::listen::ServeConfig;
use crate::server::{utc_now_iso8601, PushEvent, Server, Session};
use crate::transport::listen::Listen;
use crate::transport::Transport;

/// Name and version in `serverInfo`.
pub const NAME: &str = "mcpl-reference";
/// The channel the reference server registers.
pub const LOBBY: &str = "ref:lobby";

/// The most `topic.<name>` feature sets `add_topic` adds (further calls are tool errors).
pub const MAX_TOPICS: usize = 16;
/// The most notes `note` keeps (further calls are tool errors until a rollback).
pub const MAX_NOTES: usize = 64;
/// How many published texts are kept (the oldest is dropped first); all are counted.
pub const KEPT_PUBLISHED: usize = 16;
/// Characters kept of each published text and note.
pub const KEPT_CHARS: usize = 1024;

/// One connection's state ([`crate::server::ServerBuilder::connection_state`]).
#[derive(Default)]
struct Shared {
    /// Every publish is counted; the last [`KEPT_PUBLISHED`] texts are kept.
    published_count: u64,
    published: std::collections::VecDeque<String>,
    turns_started: u64,
    turns_ended: u64,
    incoming_seq: u64,
    topics: usize,
    notes: Vec<String>,
    /// Issued checkpoints still retained: (id, how many notes it covers).
    checkpoints: Vec<(String, usize)>,
    checkpoint_seq: u64,
}

/// `text` cut to [`KEPT_CHARS`] characters.
fn kept(text: &str) -> String {
    text.chars().take(KEPT_CHARS).collect()
}

/// A topic name `add_topic` accepts: 1–32 of `[a-z0-9-]` (so `topic.<name>` is a valid
/// identifier, §17.2).
fn valid_topic(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

type State = Mutex<Shared>;

fn lock(m: &State) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling connection's state; an error only for a handler still running after its
/// connection ended (nobody reads the answer then).
fn state(session: &Session) -> Result<Arc<State>, ErrorObject> {
    session
        .state::<State>()
        .ok_or_else(|| ErrorObject::internal("the connection has ended"))
}

fn text_result(text: impl Into<String>) -> ToolsCallResult {
    ToolsCallResult::text(text)
}

fn error_result(text: impl Into<String>) -> ToolsCallResult {
    ToolsCallResult::error(text)
}

/// The string argument `key`, which every reference tool's `inputSchema` requires
/// ([`string_schema`]): absent (or no `arguments` at all) or of another type, the call is the
/// host's mistake, answered `-32602` naming the argument (as a typed tool's would be), and the
/// tool does not run on a made-up value.
fn arg(p: &ToolsCallParams, key: &str) -> Result<String, ErrorObject> {
    match p.arguments.as_ref().and_then(|a| a.get(key)) {
        Some(Value::String(s)) => Ok(s.clone()),
        found => {
            let why = if found.is_some() {
                "is not a string"
            } else {
                "is missing"
            };
            let message = format!(
                "tools/call {}: argument `{key}` {why}; its inputSchema requires a string",
                p.name
            );
            Err(ErrorObject::invalid_params(message).with_data(json!({"path": key})))
        }
    }
}

/// The feature set a tool serves, unless it is available on this connection now: the
/// refusal to answer with (§6.7: a reduction, a `disabled` entry included, is respected at
/// once, even while the capabilities the set uses stay granted).
fn unavailable(session: &Session, set: &str) -> Option<ToolsCallResult> {
    if session.feature_available(set) {
        return None;
    }
    // Why, as the receipt said it (§6.7): its reason, and the capabilities not granted.
    let why = match session.grant_state().feature_sets.get(set) {
        Some(crate::policy::FeatureSetStatus::Unavailable { reason, missing }) => {
            let missing: Vec<&str> = missing.iter().map(|c| c.as_str()).collect();
            if missing.is_empty() {
                format!(" ({reason})")
            } else {
                format!(" ({reason}: {})", missing.join(", "))
            }
        }
        _ => String::new(),
    };
    Some(error_result(format!(
        "{set} is not available on this connection{why}"
    )))
}

/// The feature set that keeps checkpoints (§8.1: `rollback: true`).
const NOTES: &str = "ref.notes";

fn lobby() -> ChannelDescriptor {
    let mut lobby = ChannelDescriptor::new(LOBBY, "reference-chat");
    lobby.label = Some("Reference lobby".into());
    lobby.direction = Some(ChannelDirection::Bidirectional);
    lobby
}

fn string_schema(props: &[&str]) -> Value {
    let mut p = Map::new();
    for k in props {
        p.insert((*k).into(), json!({"type": "string"}));
    }
    json!({"type": "object", "properties": p, "required": props})
}

/// Builds the reference server (a fresh manifest tracker each call). One server serves any
/// number of connections; each connection's state is its own (see the module docs).
pub fn server() -> Server {
    let mut notes = FeatureSetDeclaration::new("Notes with checkpoints", &[Capability::Tools]);
    notes.extra.insert("rollback".into(), Value::Bool(true));
    let builder = Server::builder(NAME, env!("CARGO_PKG_VERSION"))
        .instructions("The MCPL 0.5 reference server: small, strict, and complete.")
        .connection_state(State::default)
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
        // Host-initiated channels/open and channels/close: gated by the capability alone,
        // so no feature set is lost by a host that does not grant it.
        .advertise(&[Capability::ChannelsLifecycle])
        .feature_set(
            "ref.turns",
            "Counts turns from inference/lifecycle",
            &[Capability::InferenceLifecycle],
        )
        .feature_set("ref.model", "Asks model/info", &[Capability::ModelInfo])
        .feature_set("ref.tools", "MCP tools", &[Capability::Tools])
        .feature_set(
            "ref.ask",
            "Asks the host's model (inference/request)",
            &[Capability::InferenceRequest],
        )
        .feature_set_declaration("ref.notes", notes)
        .on_ready(|session: Session| async move {
            if session.feature_available("ref.chat") {
                // The host's answer (a refusal the session made is reported on its own, as
                // the author's mistake): at `info`, so a host refusing it after every policy
                // Request cannot write a `warn` line each time (`mcpl serve`'s default).
                if let Err(e) = session.channels_register(vec![lobby()]).await {
                    tracing::info!("channels/register failed: {e}");
                }
            }
            if session.feature_available("ref.events") {
                let ev = PushEvent::text("ref.events", "The reference server is ready.")
                    .tags(["ref:greeting", "chat:broadcast"])
                    .event_id("evt_ref_greeting");
                if let Err(e) = session.push_event(ev).await {
                    tracing::info!("push/event failed: {e}");
                }
            }
        })
        .on_before_inference("ref.hints", |_grant, p| async move {
            let hint = format!(
                "Reference hint for turn {} of {}.",
                p.turn_index,
                quoted_conversation(&p.conversation_id)
            );
            // The session names the hook's feature set, ref.hints, in the answer (§6.5).
            Ok(BeforeInferenceResult::with_injections([
                ContextInjection::new("reference", Position::BeforeUser, hint),
            ]))
        })
        .on_turn_start_with_state(|st: &State, _| lock(st).turns_started += 1)
        .on_turn_end_with_state(|st: &State, _| lock(st).turns_ended += 1)
        .on_channels_publish(|session, p| async move {
            {
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
                // The connection ended while this ran (a Notification read just before the
                // host's end): nothing holds the surface any more, and no answer is read.
                // Not an error, which the Notification form would report as the author's.
                let Some(shared) = session.state::<State>() else {
                    return Ok(PublishResult::not_delivered());
                };
                let mut st = lock(&shared);
                st.published_count += 1;
                if st.published.len() >= KEPT_PUBLISHED {
                    st.published.pop_front();
                }
                st.published.push_back(kept(&text));
                Ok(PublishResult::delivered(Some(format!(
                    "ref_out_{}",
                    st.published_count
                ))))
            }
        })
        // No `channels/list` handler: the session answers with the channels this connection
        // holds (§14.3: those known for this connection), which a fixed list was not once the
        // host closed the lobby or refused its registration.
        .on_channels_open(|_s, p| async move {
            if p.kind != lobby().kind {
                return Err(ErrorObject::invalid_params(format!(
                    "this server opens channels of type {:?} only, not {:?}",
                    lobby().kind,
                    p.kind
                )));
            }
            Ok(OpenResult::new(lobby()))
        })
        .on_channels_close(|_s, p| async move {
            if p.channel_id != LOBBY {
                return Err(ErrorObject::unknown_channel(&p.channel_id));
            }
            Ok(CloseResult::new(true))
        })
        .on_rollback(|session, p| async move {
            {
                // §8.1: only `ref.notes` declares `rollback: true`. A rollback naming any
                // other set, or a disabled one, is refused by the session before it gets here
                // (`-32003` / `-32602` / `-32001`, §6.6); one naming no set is this
                // handler's: it rolls `ref.notes` back, so a disabled `ref.notes` is
                // respected here too (§6.7).
                if !session.feature_available(NOTES) {
                    return Err(ErrorObject::feature_set_not_enabled(NOTES));
                }
                let shared = state(&session)?;
                let mut st = lock(&shared);
                let Some(i) = st.checkpoints.iter().position(|(id, _)| *id == p.checkpoint)
                else {
                    return Err(ErrorObject::checkpoint_not_found(&p.checkpoint));
                };
                let covered = st.checkpoints.get(i).map_or(0, |c| c.1);
                st.notes.truncate(covered);
                st.checkpoints.truncate(i + 1);
                Ok(RollbackResult::rolled_back(p.checkpoint))
            }
        })
        .tool("echo", "Echo the text back", string_schema(&["text"]), |_s, p| async move {
            Ok(text_result(arg(&p, "text")?))
        })
        .tool(
            "schedule_event",
            "Schedule a push/event carrying the text",
            string_schema(&["text"]),
            |session: Session, p| async move {
                let text = arg(&p, "text")?;
                if let Some(refused) = unavailable(&session, "ref.events") {
                    return Ok(refused);
                }
                let ev = PushEvent::text("ref.events", text).tags(["ref:scheduled"]);
                let id = ev.stable_event_id();
                // The send begins at the check above (§6.7): a narrowing applied before the
                // spawned task sends is a notice (`send_refused_policy_changed`), not a
                // `warn` line about the author's code in `mcpl serve`.
                let session = session.deferred();
                tokio::spawn(async move {
                    // One per call, and mostly the host's answer (§9.3): at `info`, so a
                    // host refusing every push cannot flood `mcpl serve`'s stderr (its
                    // default filter is `warn`).
                    if let Err(e) = session.push_event(ev).await {
                        tracing::info!("scheduled push/event failed: {e}");
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
                {
                let name = arg(&p, "name")?;
                if !valid_topic(&name) {
                    return Ok(error_result("a topic name is 1 to 32 of [a-z0-9-]"));
                }
                let set = format!("topic.{name}");
                {
                    let shared = state(&session)?;
                    let mut st = lock(&shared);
                    if st.topics >= MAX_TOPICS {
                        return Ok(error_result(format!(
                            "at most {MAX_TOPICS} topics on one connection"
                        )));
                    }
                    st.topics += 1;
                }
                // This connection's manifest only (module docs).
                let out = session.own_manifest().transaction(|m| {
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
                }
            },
        )
        .tool(
            "say",
            "Deliver a user message from the in-memory chat surface (channels/incoming)",
            string_schema(&["text"]),
            |session: Session, p| async move {
                {
                    let text = arg(&p, "text")?;
                    if let Some(refused) = unavailable(&session, "ref.chat") {
                        return Ok(refused);
                    }
                    let seq = {
                        let shared = state(&session)?;
                        let mut st = lock(&shared);
                        st.incoming_seq += 1;
                        st.incoming_seq
                    };
                    let mut msg = IncomingMessage::new(
                        LOBBY,
                        format!("ref_in_{seq}"),
                        Content::Blocks(vec![ContentBlock::text(text)]),
                    );
                    msg.author = Some(Author::new("u_ref", Some("Reference user".into())));
                    msg.timestamp = Some(utc_now_iso8601());
                    msg.tags = Some(vec!["chat:mention".into(), "chat:addressed".into()]);
                    match session.channels_incoming(vec![msg]).await {
                        Ok(r) => Ok(text_result(
                            serde_json::to_string(&r).unwrap_or_else(|_| "{}".into()),
                        )),
                        Err(e) => Ok(error_result(e.to_string())),
                    }
                }
            },
        )
        .tool("turns", "Report turn counts", json!({"type": "object"}), |session, _p| async move {
            {
                let shared = state(&session)?;
                let st = lock(&shared);
                Ok(text_result(
                    json!({"started": st.turns_started, "ended": st.turns_ended,
                           "publishedCount": st.published_count,
                           "published": st.published, "notes": st.notes})
                    .to_string(),
                ))
            }
        })
        .tool(
            "model",
            "Ask the host for model/info",
            json!({"type": "object"}),
            |session: Session, _p| async move {
                if let Some(refused) = unavailable(&session, "ref.model") {
                    return Ok(refused);
                }
                match session.model_info().await {
                    Ok(m) => Ok(text_result(
                        serde_json::to_string(&m).unwrap_or_else(|_| "{}".into()),
                    )),
                    Err(e) => Ok(error_result(e.to_string())),
                }
            },
        )
        .tool(
            "ask",
            "Ask the host's model (inference/request) and return its answer",
            string_schema(&["text"]),
            |session: Session, p| async move {
                let text = arg(&p, "text")?;
                if let Some(refused) = unavailable(&session, "ref.ask") {
                    return Ok(refused);
                }
                let params = InferenceRequestParams::new(
                    "ref.ask",
                    [InferenceMessage::user(kept(&text))],
                );
                match session.inference_request(params).await {
                    Ok(r) => Ok(text_result(
                        serde_json::to_string(&r).unwrap_or_else(|_| "{}".into()),
                    )),
                    Err(e) => Ok(error_result(e.to_string())),
                }
            },
        )
        .tool(
            "note",
            "Append a note; returns a checkpoint state/rollback can return to (ref.notes)",
            string_schema(&["text"]),
            |session, p| async move {
                {
                    let text = arg(&p, "text")?;
                    if let Some(refused) = unavailable(&session, NOTES) {
                        return Ok(refused);
                    }
                    let shared = state(&session)?;
                    let mut st = lock(&shared);
                    if st.notes.len() >= MAX_NOTES {
                        return Ok(error_result(format!(
                            "at most {MAX_NOTES} notes; roll back to make room"
                        )));
                    }
                    let parent = st.checkpoints.last().map(|c| c.0.clone());
                    st.notes.push(kept(&text));
                    st.checkpoint_seq += 1;
                    let id = format!("chk_ref_{}", st.checkpoint_seq);
                    let covered = st.notes.len();
                    st.checkpoints.push((id.clone(), covered));
                    let mut state = StateInfo::new(id);
                    // §8.3: the first checkpoint is a root (explicit `null` parent).
                    state.parent = Some(parent);
                    state.data = Some(json!({ "notes": st.notes }));
                    Ok(text_result(format!("{covered} note(s)")).with_state(state))
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

/// Accepts TCP connections forever, serving them all with one reference server (each
/// connection's state its own, freed when it ends), with the default [`ServeConfig`]. Never
/// returns (the default has no defect): accept errors are survived (see
/// [`crate::transport::listen`]).
pub async fn serve_tcp(
    listener: crate::transport::tcp::Listener,
) -> Result<(), crate::server::listen::ServeConfigError> {
    serve_on(Arc::new(listener), ServeConfig::default()).await
}

/// Most bytes of the host's `conversationId` the reference's `context/beforeInference` hint
/// quotes (64); a longer one is cut at a character boundary and its length said, so a host
/// sending a long id (§10.1 sets no length) does not get it back whole in every
/// answer.
pub const HINT_CONVERSATION_ID_BYTES: usize = 64;

/// `id` as the hint quotes it: whole within [`HINT_CONVERSATION_ID_BYTES`], else its first
/// bytes up to a character boundary, then `… (N bytes)`.
fn quoted_conversation(id: &str) -> std::borrow::Cow<'_, str> {
    if id.len() <= HINT_CONVERSATION_ID_BYTES {
        return id.into();
    }
    let mut cut = HINT_CONVERSATION_ID_BYTES;
    while !id.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}… ({} bytes)",
        id.get(..cut).unwrap_or_default(),
        id.len()
    )
    .into()
}

/// Serves every connection `listener` accepts (TCP or WebSocket) with one reference server,
/// forever, with the limits of `config` ([`crate::server::listen::serve`], which refuses a
/// `config` that cannot work before accepting anything: the only return).
pub async fn serve_on<L: Listen + 'static>(
    listener: Arc<L>,
    config: ServeConfig,
) -> Result<(), crate::server::listen::ServeConfigError> {
    crate::server::listen::serve(server(), listener, config).await
}
