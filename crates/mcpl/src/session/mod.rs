//! Sans-I/O sessions (issue #24): the host's and the server's protocol decisions over plain
//! data, with no tokio, no I/O and no clock (time is passed in).
//!
//! - [`admit`]: the one admission rule of an inbound method (§4.1, §5.3, §5.4).
//! - [`rules`]: the host's inbound judgements and policy decisions (§5.3, §6.7, §9, §11.1,
//!   §16), used by the async `host::HostSession` and by [`HostState`].
//! - [`HostState`] and [`ServerState`]: state machines fed inputs in wire order (a received
//!   message, a timer tick with `now`, an application call) that return outputs (messages
//!   to send, events, diagnostics, the next deadline). Wired back to back they run a whole
//!   session deterministically (`session/tests.rs`).
//!
//! What is not here yet: lifecycle turns and outgoing streams (§10.5, §14.3) are still
//! emitted by the async `host::HostSession` only; [`HostState`] hands anything it does not
//! decide out as [`HostOutput::Unhandled`]. Channels (§14.5) are decided here and by
//! `HostSession` through the same [`ChannelTable`]. Manifest announcements, fetches and review (§17.3–§17.8)
//! are decided here and by `HostSession` through the same `HostPolicy`. Hooks (§10) are sent and judged here one
//! connection at a time ([`HostState::before_inference`]); gathering several servers'
//! answers is the application's (as `host::before_inference` does).

mod admission;
pub mod channels;
mod host;
pub(crate) mod policy_state;
mod report;
pub mod rules;
mod server;

pub use admission::{admit, admit_at_host, admit_outbound, Receiver, Refusal};
pub use channels::{ChannelLimits, ChannelTable};
pub use host::{ConnectError, HostOutput, HostRules, HostState, StateError};
pub use report::{HostDiagnostic, HostEvent, McpOnlyReason, Mode, PolicyChange};
pub use server::{
    answer_policy_request, PolicyAnswer, SendRefusal, ServerOutput, ServerRules, ServerState,
};

#[cfg(test)]
mod tests;
