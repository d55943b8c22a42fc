//! # mcpl — MCP Live (MCPL) 0.5 for Rust
//!
//! MCPL extends the Model Context Protocol so that servers can push events, inject context
//! before inference, request inference, run channels and announce manifest changes, all under
//! a host-computed capability grant (SPEC §5.4).
//!
//! The crate has two layers:
//! - the **protocol core** (always available, no I/O): [`jsonrpc`], [`protocol`],
//!   [`capability`], [`policy`], [`manifest`], [`tags`], [`uri`], [`lifecycle`], and
//!   [`session`] (the host's and the server's sans-I/O state machines);
//! - the **runtime** (feature `runtime`, on by default, tokio): [`transport`], [`peer`],
//!   [`server`] and [`host`], and the reference server ([`mod@reference`]).
//!
//! # A complete server
//!
//! A server declares feature sets, registers tools and handlers, and serves a transport. The
//! session answers `initialize` with the manifest, stays inert until the host's policy
//! Request, answers it with the degradation receipt, and refuses any send the grant does not
//! allow (see [`server`]). [`mod@reference`] is a fuller example.
//!
//! When the handlers run: a tool handler per `tools/call`; the
//! [`on_before_inference`](server::ServerBuilder::on_before_inference) hook per
//! `context/beforeInference` while its feature set is available;
//! [`on_ready`](server::ServerBuilder::on_ready) after **every** accepted policy Request of
//! a connection (the first, which makes it ready, and each later re-grant, §5.3, §6.7; never
//! two at once: Requests accepted while it runs are served by one more call after it) and
//! [`on_first_ready`](server::ServerBuilder::on_first_ready) once per connection, after
//! the first one — so start per-connection work (a timer, a first event) in
//! `on_first_ready`, and re-register what depends on the grant in `on_ready`.
//!
//! Where mistakes show: a send the grant does not allow, an injection at a position not
//! granted, a handler that panics … are refused or repaired by the session and logged
//! through `tracing` at `warn` with what to change, under plain [`serve`](server::Server::serve)
//! too; host defects at `info` (see [`server::DiagnosticKind`]). With no subscriber
//! installed the mistakes are written to stderr instead; install one to route them, as
//! below (`tracing-subscriber` with its `fmt` and `env-filter` features). Mistakes in the
//! registrations themselves (a handler no host could reach, a hook under a set that
//! declares no hook path, a tool MCP cannot carry …) are refused earlier, by
//! [`build`](server::ServerBuilder::build).
//!
//! ```no_run
//! use mcpl::capability::Capability;
//! use mcpl::protocol::handshake::ToolsCallResult;
//! use mcpl::server::{PushEvent, Server, Session};
//! use serde_json::json;
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     // The session's diagnostics on stderr (stdout is the stdio transport): `warn` and up
//!     // (every mistake of this code the session refuses or repairs), or what RUST_LOG says.
//!     tracing_subscriber::fmt()
//!         .with_writer(std::io::stderr)
//!         .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
//!         .init();
//!     // Errors print with Display: what happened and what to change.
//!     if let Err(e) = run().await {
//!         eprintln!("error: {e}");
//!         return std::process::ExitCode::FAILURE;
//!     }
//!     std::process::ExitCode::SUCCESS
//! }
//!
//! async fn run() -> Result<(), mcpl::server::BuildError> {
//!     let server = Server::builder("greeter", "1.0.0")
//!         .feature_set("greetings", "Say hello when asked", &[Capability::PushEvents])
//!         .tool("greet", "Greet someone", json!({"type": "object"}), |s: Session, p| async move {
//!             let who = p.arguments.as_ref().and_then(|a| a.get("name")).cloned();
//!             let text = format!("Hello, {}!", who.unwrap_or(json!("world")));
//!             // Refused locally (never sent) unless pushEvents is granted and the set is
//!             // available.
//!             if let Err(e) = s.push_event(PushEvent::text("greetings", text.clone())).await {
//!                 eprintln!("not pushed: {e}");
//!             }
//!             Ok(ToolsCallResult::text(text))
//!         })
//!         .on_turn_end(|turn| eprintln!("turn {} ended: {:?}", turn.inference_id, turn.outcome))
//!         .build()?;
//!     let reason = server.serve(mcpl::transport::stdio::stdio()).await;
//!     eprintln!("connection ended: {reason}");
//!     Ok(())
//! }
//! ```
//!
//! # Content: which type where
//!
//! Three types carry content, each the exact shape of the members that use it:
//!
//! | Type | What it is | Use it for |
//! |---|---|---|
//! | [`Content`](protocol::content::Content) | MCPL's `content` member: a string or blocks (§10.3) | injections, push payloads, channel and inference messages |
//! | [`ContentBlock`](protocol::content::ContentBlock) | one App. B.1 block: text, image, audio, resource | the items of a `Content`, or of a tool result |
//! | [`ToolContent`](protocol::handshake::ToolContent) | one block of an MCP `tools/call` result: App. B.1's, or any other MCP block kept verbatim (§3.1) | [`ToolsCallResult`](protocol::handshake::ToolsCallResult) only |
//!
//! Conversions: a `&str`, `String`, `ContentBlock` or `Vec<ContentBlock>` is `.into()` a
//! `Content`; a `&str`, `String` or `ContentBlock` is `.into()` a `ToolContent`; a `Content`
//! becomes tool-result blocks with `Vec::<ToolContent>::from`; a `ToolContent` is
//! `ContentBlock::try_from` when it is one of App. B.1's. The constructors take what you have:
//! [`ToolsCallResult::text`](protocol::handshake::ToolsCallResult::text) /
//! [`::error`](protocol::handshake::ToolsCallResult::error),
//! [`ContextInjection::new`](protocol::hooks::ContextInjection::new),
//! [`PushPayload::new`](protocol::push::PushPayload::new) and `server::PushEvent::new` /
//! `::text`.
//!
//! # A host
//!
//! A host connects, computes the grant (advertisement ∩ its policy patterns), runs the
//! policy exchange and then enforces the grant on everything the server sends or is sent
//! (see [`host`]). Here it talks to the bundled reference server over an in-memory pair and
//! grants injection without observation: the server never sees the user's text, yet its
//! `beforeUser` injection is accepted.
//!
//! ```
//! use mcpl::host::{before_inference, HostConfig, HostSession};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (host_side, server_side) = mcpl::transport::memory::pair();
//! tokio::spawn(mcpl::reference::serve(server_side));
//! let config = HostConfig {
//!     policy: vec!["pushEvents".into(), "contextHooks.beforeInference.inject.*".into()],
//!     ..HostConfig::default()
//! };
//! let (session, _streams) = HostSession::connect(host_side, config).await?;
//! assert!(session.is_ready());
//! let params = json!({"inferenceId": "inf_1", "conversationId": "c1", "turnIndex": 0,
//!                     "userMessage": "hello"});
//! let injections = before_inference(&[&session], &params).await;
//! assert!(!injections.before_user.is_empty());
//! assert!(injections.system.is_empty());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod bytes;
pub mod capability;
mod config_rules;
pub mod jsonrpc;
pub mod lifecycle;
pub mod manifest;
mod own_keys;
pub mod policy;
pub mod protocol;
pub mod session;
pub mod tags;
pub mod throttle;
pub mod uri;

#[cfg(feature = "runtime")]
pub mod host;
#[cfg(feature = "runtime")]
pub mod peer;
#[cfg(feature = "runtime")]
pub mod reference;
#[cfg(feature = "runtime")]
pub mod server;
#[cfg(feature = "runtime")]
pub mod transport;
