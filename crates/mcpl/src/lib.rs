//! # mcpl — MCP Live (MCPL) 0.5 for Rust
//!
//! MCPL extends the Model Context Protocol so that servers can push events, inject context
//! before inference, request inference, run channels and announce manifest changes, all under
//! a host-computed capability grant (SPEC §5.4).
//!
//! The crate has two layers:
//! - the **protocol core** (always available, no I/O): [`jsonrpc`], [`protocol`],
//!   [`capability`], [`policy`], [`manifest`], [`tags`], [`uri`], [`lifecycle`];
//! - the **runtime** (feature `runtime`, on by default, tokio): [`transport`], [`peer`],
//!   [`server`] and [`host`].
#![warn(missing_docs)]

pub mod capability;
pub mod jsonrpc;
pub mod lifecycle;
pub mod manifest;
pub mod policy;
pub mod protocol;
pub mod tags;
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
