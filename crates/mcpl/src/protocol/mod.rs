//! Typed params and results for every MCPL 0.5 method (§4.1) and the MCP handshake pieces
//! MCPL rides on. Each method is a type implementing [`Method`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::capability::Requirement;

/// Whether a method is sent as a Request, a Notification, or may be either (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Always carries an id and expects a response.
    Request,
    /// Never carries an id.
    Notification,
    /// Either form is valid (`featureSets/update`, `channels/changed`, `channels/publish`).
    Either,
}

/// Who sends a method (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by the host to the server.
    HostToServer,
    /// Sent by the server to the host.
    ServerToHost,
    /// Sent by either side (`channels/list`, `ping`).
    Either,
}

/// A typed JSON-RPC method: its wire name, form, direction, params, result and capability.
pub trait Method {
    /// The wire name, e.g. `"push/event"`.
    const NAME: &'static str;
    /// Request, Notification or either.
    const KIND: Kind;
    /// Who sends it.
    const DIRECTION: Direction;
    /// The `params` type.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// The `result` type (`()`-like for notifications).
    type Result: Serialize + DeserializeOwned + Send + 'static;
    /// The capability the sender's peer must hold for this message (§5.4, §14.1), judged
    /// from the params where the requirement depends on them.
    fn requirement(params: &Self::Params) -> Requirement;
}
