//! Sans-I/O sessions (issue #24): the host's and the server's protocol decisions over plain
//! data, with no tokio, no I/O and no clock (time is passed in).
//!
//! - [`admit`]: the one admission rule of an inbound method (§4.1, §5.3, §5.4).
//! - [`rules`]: the host's inbound judgements and policy decisions (§5.3, §6.7, §9, §11.1,
//!   §16), used by the async `host::HostSession` and by [`HostState`].
//! - [`HostState`] and [`ServerState`]: state machines fed inputs in wire order (a received
//!   message, a timer tick with `now`, an application call, the end of the connection:
//!   `handle_close`) that return outputs (messages to send, events, diagnostics, the next
//!   deadline). Wired back to back they run a whole
//!   session deterministically (`session/tests/`).
//!
//! [`HostState`] decides the handshake and policy exchange, admission, `push/event`,
//! `inference/request` hand-off, channels (§14.5, the same [`ChannelTable`] as
//! `HostSession`), hooks one connection at a time ([`HostState::before_inference`];
//! gathering several servers' answers is the application's, as `host::before_inference`
//! does), lifecycle turns (§10.5), outgoing channel streams (§14.3, the same [`Outgoing`]
//! and [`outbound::gate`] as `HostSession`) and manifest announcements, fetches and review
//! (§17.3–§17.8, the same `HostPolicy` as `HostSession`): it decides every message, or hands
//! it to the application as a [`HostOutput::Request`] to answer. `host::HostSession` and
//! `server::Server` are thin async drivers of these machines: each connection's one task
//! feeds its machine in wire order and carries out the outputs (frames, events, handlers).
//! The one decision taken outside a machine is the host's gate on the application's plain
//! requests and notifications: the same [`outbound::gate`], against the state the driver
//! published.
//!
//! The machines take only messages. A line that is none is its driver's to answer
//! (JSON-RPC 2.0 §5), with what [`ParseError::owed_answer`] gives and only then: it is the
//! rule the async drivers' peer answers by, so a driver answers a line exactly when the
//! peer does and a sender ends its wait either way; save a line holding several whole
//! messages, which the peer reads one by one ([`crate::jsonrpc::several_values`]: a driver
//! asks it first to do the same) and `owed_answer` answers `-32700` under its first
//! request's id. It gives nothing for a line owed
//! nothing: a junk line, a response (answering one can loop), a notification nested past
//! the parser (§4.1). Otherwise [`ParseError::Invalid`] is
//! answered `-32600` under the id it carries when one could be read, [`ParseError::Json`]
//! `-32700` under the id of a request the text showed whole and without doubt before the
//! byte the parser failed at (`"jsonrpc": "2.0"`, a `method` and exactly one ended `id`, a
//! request id, a string or a number a request's id can be: [`refused_request_id`]), else a
//! null id; a request nested past the parser's depth (possibly valid JSON) `-32600`
//! (`reason: "nesting"`) under the id read past the nesting. A driver that drops an owed
//! line leaves a request unanswered; one that writes `ParseError::answer` (an answer for
//! every text) answers responses and notifications too.
//!
//! [`ParseError::owed_answer`]: crate::jsonrpc::ParseError::owed_answer
//! [`ParseError::Json`]: crate::jsonrpc::ParseError::Json
//! [`ParseError::Invalid`]: crate::jsonrpc::ParseError::Invalid
//! [`refused_request_id`]: crate::jsonrpc::refused_request_id
//!
//! A host and a server wired back to back, every frame through its JSON text:
//!
//! ```
//! use std::time::{Instant, SystemTime};
//! use mcpl::capability::Capability;
//! use mcpl::jsonrpc::Message;
//! use mcpl::session::{HostRules, HostState, Mode, ServerRules, ServerState};
//! use serde_json::json;
//!
//! let now = Instant::now();
//! let mut host = HostState::new(HostRules::new(["pushEvents"]), now, SystemTime::now())?;
//! let mut server = ServerState::new(ServerRules::new(
//!     json!({ "name": "demo", "version": "1" }),
//!     json!({ "version": "0.5", "pushEvents": {},
//!             "featureSets": { "news": { "uses": ["pushEvents"] } } }),
//! )?);
//! host.start(now);
//! loop {
//!     let mut moved = false;
//!     while let Some(out) = host.poll_output() {
//!         // `frame()`: the text of a `Transmit` output, whatever the frame's form.
//!         if let Some(text) = out.frame() {
//!             server.handle_message(now, Message::parse(&text)?);
//!             moved = true;
//!         }
//!     }
//!     while let Some(out) = server.poll_output() {
//!         if let Some(text) = out.frame() {
//!             host.handle_message(now, Message::parse(&text)?);
//!             moved = true;
//!         }
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! assert_eq!(host.mode(), &Mode::Mcpl);
//! assert!(host.grant().allows(Capability::PushEvents));
//! assert!(server.is_ready());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod admission;
pub mod channels;
pub(crate) mod frames;
mod host;
pub mod outbound;
mod pending;
pub(crate) mod policy_state;
mod report;
pub mod rules;
mod server;
mod server_channels;
mod server_hooks;
mod server_inbound;
mod server_inference;
pub(crate) mod server_initialize;
mod server_manifest;
mod server_pending;
mod server_ready;
mod server_report;
mod transmission;
mod turns;

/// MCP's cancellation of a request (`{ requestId, reason? }`), which both machines act on
/// for a request they handed to the application.
pub(crate) const CANCELLED: &str = "notifications/cancelled";

/// The request a `notifications/cancelled` names, when its `requestId` is an id: the one
/// reading both machines use.
fn cancelled_request(params: Option<&serde_json::Value>) -> Option<crate::jsonrpc::RequestId> {
    params
        .and_then(|p| p.get("requestId"))
        .and_then(crate::jsonrpc::RequestId::from_request_value)
}

pub use admission::{
    admit, admit_at_host, admit_at_server, admit_outbound, admit_outbound_typed, Receiver, Refusal,
};
pub use channels::{ChannelLifecycle, ChannelLimits, ChannelTable};
pub use host::{
    ConnectError, HostOutput, HostRules, HostState, RulesError, StateError, DEFAULT_ANSWER_TIMEOUT,
};
pub use outbound::{Completed, OutboundRefusal, Outgoing};
pub use report::{
    clip_text, HostDiagnostic, HostEvent, McpList, McpOnlyReason, Mode, PolicyChange,
    DIAGNOSTIC_TEXT_BYTES,
};
pub use server::{
    answer_policy_request, dedicated_to_host, PolicyAnswer, SendRefusal, ServerOutput, ServerRules,
    ServerState,
};
pub use server_channels::MAX_OPENED_CHANNELS;
pub use server_initialize::ServerRulesError;
pub use server_manifest::SharedManifest;
pub use server_pending::{DEFAULT_MAX_PENDING_REQUESTS, DEFAULT_REQUEST_TIMEOUT};
pub use server_report::{DiagnosticKind, ServerDiagnostic, INFERENCE_CHUNKS_HELD};
pub use transmission::Transmission;
pub(crate) use turns::InferenceIds;
pub use turns::{Terminal, ENDED_IDS_REMEMBERED};

#[cfg(test)]
mod tests;
