//! Why a connection ended, what a request failed with, and the other side's defects.

use super::*;

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The other side ended the stream (EOF, WebSocket close, child exit).
    Eof,
    /// [`Peer::close`] was called.
    Local,
    /// Every [`Peer`] handle was dropped.
    Dropped,
    /// Reading or writing failed.
    Io(String),
    /// A write did not complete within [`PeerConfig::write_timeout`].
    WriteTimeout(Duration),
    /// No traffic within [`PeerConfig::idle_timeout`].
    IdleTimeout(Duration),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Eof => f.write_str("the other side ended the connection"),
            CloseReason::Local => f.write_str("closed locally"),
            CloseReason::Dropped => f.write_str("every peer handle was dropped"),
            CloseReason::Io(e) => write!(f, "I/O error: {e}"),
            CloseReason::WriteTimeout(d) => write!(f, "a write did not complete within {d:?}"),
            CloseReason::IdleTimeout(d) => write!(f, "no traffic for {d:?}"),
        }
    }
}

/// Why an outgoing request or notification failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The connection is closed (or closed while waiting).
    #[error("the connection is closed ({0}); reconnect to send more")]
    Closed(CloseReason),
    /// No response arrived in time; a late response is reported as a diagnostic.
    #[error("request {method} (id {id}) got no response within {after:?}; the peer may be stuck, or raise the timeout (PeerConfig::request_timeout or the call's own)")]
    Timeout {
        /// The method of the request.
        method: String,
        /// The id it was sent with.
        id: RequestId,
        /// The timeout in force.
        after: Duration,
    },
    /// The other side answered with an error object (kept verbatim, `data` included).
    #[error(transparent)]
    Remote(ErrorObject),
    /// [`PeerConfig::max_pending_requests`] requests are already awaiting responses.
    #[error("{limit} requests are already awaiting responses (PeerConfig::max_pending_requests); wait for some to finish, or raise the limit")]
    TooManyPending {
        /// The limit in force.
        limit: usize,
    },
    /// The params could not be serialised.
    #[error("the params of {method} cannot be encoded as JSON: {reason}; give params whose Serialize yields a JSON object (no non-string map keys)")]
    Encode {
        /// The method.
        method: String,
        /// The serde error.
        reason: String,
    },
    /// The result did not match the method's result type.
    #[error("the result of {method} does not have the shape the method defines: {reason}; the peer answered outside the spec")]
    Decode {
        /// The method.
        method: String,
        /// The serde error.
        reason: String,
    },
    /// The other side answered with a response that is not valid JSON-RPC.
    #[error("the peer sent a response that is not valid JSON-RPC 2.0: {0}; the fault is the peer's: report it to its author (mcpl check names such defects)")]
    InvalidResponse(String),
    /// An MCPL method sent through a [`Peer`] handle of a connection a
    /// `host::HostSession` owns: only the session's own methods gate it against the grant
    /// (§5.4) and keep its state (§6), so nothing was sent.
    #[error("{method} is an MCPL method and this connection belongs to a HostSession, which gates it against the grant (§5.4): send it with {instead}, not through the Peer")]
    OwnedBySession {
        /// The method refused.
        method: String,
        /// The `HostSession` method that sends it.
        instead: &'static str,
    },
    /// A send made from inside the connection's own [`Tap`], on the thread running it: the
    /// tap runs while the frame it sees is being written (under the writer's lock), so the
    /// send would wait for itself. Nothing was sent.
    #[error("a send from inside this connection's own Tap is refused: the tap runs while the frame it sees is being written, so the send would wait for itself; send from a task instead (e.g. tokio::spawn)")]
    SentFromTap,
    /// An answer sent by id ([`Peer::respond`], [`Peer::respond_error`]) through a handle of
    /// a connection a `host::HostSession` owns: the session answers every request the other
    /// side sends it, so this would be a second answer, or one to a request never made.
    /// Nothing was sent.
    #[error("an answer to request {id} through the Peer of a connection a HostSession owns is refused: the session answers the server's requests itself (its handlers), and a second answer breaks JSON-RPC's one response per request")]
    AnswerOwnedBySession {
        /// The id the answer named.
        id: String,
    },
    /// An answer sent by id ([`Peer::respond`], [`Peer::respond_error`]) naming no request
    /// this side owes an answer by id: none was received under it, it was answered already,
    /// or its [`IncomingRequest`] guard still holds it (and answers it). Only a request
    /// taken with [`IncomingRequest::into_id`] and not yet answered is answered by id
    /// (JSON-RPC 2.0 §5: one response per request received). Nothing was sent.
    #[error("an answer by id to request {id} is refused: no request under that id is owed an answer by id on this connection (never received, already answered, or still held by its IncomingRequest, which answers it); answer by id only what IncomingRequest::into_id handed over, once")]
    NotOwed {
        /// The id the answer named.
        id: String,
    },
}

impl PeerError {
    /// The remote error object, if the other side answered with one.
    pub fn remote(&self) -> Option<&ErrorObject> {
        match self {
            PeerError::Remote(e) => Some(e),
            _ => None,
        }
    }
}

/// A defect of the other side or of the connection, never fatal, reported on the
/// diagnostics stream and through `tracing`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Diagnostic {
    /// A line that is not JSON at all (e.g. log output); skipped without a reply.
    JunkLine {
        /// The start of the line.
        excerpt: String,
    },
    /// A frame that looked like JSON but did not parse; answered `-32700`.
    ParseError {
        /// The parser's message.
        error: String,
    },
    /// A frame larger than the limit, discarded; what its first bytes show is handled as a
    /// message over [`PeerConfig::max_parsed_cost`] is: a request is answered `-32600`, a
    /// response to a request of ours fails that request at once
    /// ([`crate::transport::FrameReader::discarded_head`]).
    Oversized {
        /// Bytes discarded.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A frame that is not text (bad UTF-8, binary WebSocket frame), discarded; one that
    /// began as a message does is also answered `-32700` with a null id
    /// ([`crate::transport::FrameReader::not_text_began_as_json`]).
    NotText {
        /// Why.
        reason: String,
    },
    /// JSON that is not a valid JSON-RPC 2.0 message; answered `-32600` if it was a request
    /// with an id.
    InvalidMessage {
        /// Its id, if one could be read.
        id: Option<RequestId>,
        /// What was wrong.
        reason: String,
        /// Whether a `-32600` reply was sent.
        answered: bool,
    },
    /// An empty JSON array (invalid batch); answered `-32600`.
    EmptyBatch,
    /// A frame (a line) holding several complete messages separated by whitespace, where
    /// one is expected (MCP stdio framing: one message per line): the sender's framing
    /// defect, reported once; each message is then read as if it had come alone
    /// (`jsonrpc::several_values`). Past [`PeerConfig::max_batch_entries`] of them the rest
    /// is refused unread with one `-32600` under a null id (`refused_past`).
    SeveralOnALine {
        /// How many were read.
        count: usize,
        /// Whether more followed past the bound, refused.
        refused_past: bool,
    },
    /// A message that would cost more than [`PeerConfig::max_parsed_cost`] once parsed;
    /// never built. A request is answered `-32600`, a response fails its request.
    TooCostly {
        /// Its id, if one could be read.
        id: Option<RequestId>,
        /// Its method, if it had one.
        method: Option<String>,
        /// Its parsed cost ([`crate::jsonrpc::parsed_cost`] units).
        cost: usize,
        /// The limit.
        limit: usize,
    },
    /// A batch of more entries than [`PeerConfig::max_batch_entries`]; answered with one
    /// `-32600` error, none of its entries handled.
    BatchTooLarge {
        /// How many entries it had.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A request arrived while [`PeerConfig::max_in_flight_requests`] were in flight; it was
    /// answered `-32000` ([`crate::jsonrpc::codes::BUSY`]) and not delivered.
    Busy {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// The limit.
        limit: usize,
    },
    /// A request arrived while requests weighing [`PeerConfig::max_in_flight_bytes`] were
    /// in flight; it was answered `-32000` ([`crate::jsonrpc::codes::BUSY`], `data: { limit,
    /// bytes, reason: "in_flight_bytes" }`) and not delivered.
    BusyBytes {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// The bytes in flight.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A partial message refused because the shared
    /// [`MessageBudget`](crate::transport::MessageBudget) could not cover it
    /// ([`PeerConfig::message_budget`]); a request answered `-32000` under the id its first
    /// bytes show (`null` when that id is none or cut), `data: { limit, reason:
    /// "message_budget" }`, a response of ours failing its request at once, by the rule of
    /// every refused message; the rest of it discarded unread (over WebSocket the
    /// connection then ends).
    OverBudget {
        /// Bytes of it read when it was refused.
        bytes: usize,
        /// The budget's size.
        limit: usize,
    },
    /// A response for a request that had already timed out or been cancelled; dropped.
    LateResponse {
        /// Its id.
        id: RequestId,
    },
    /// A response whose id was written with a fraction or an exponent (`1.0`, `1e0`) and is,
    /// as a value, the integer id of a request of ours still outstanding: taken as that
    /// request's answer (JSON-RPC 2.0 §5 asks for the same value) and reported for its form.
    IntegralId {
        /// The request's id, the one it answered.
        id: RequestId,
        /// The id as read (`1e0` reads `1.0`).
        written: String,
    },
    /// A request whose id is a number written with a fraction or an exponent (`2.0`,
    /// `2.5`): JSON-RPC 2.0 §4 says an id SHOULD NOT have a fractional part, a SHOULD NOT,
    /// so it is taken and answered under the same value (§5,
    /// [`crate::jsonrpc::request_id_number`]) and reported for its form, once per request.
    FractionalId {
        /// The id, as it is answered under.
        id: RequestId,
        /// The request's method.
        method: String,
    },
    /// A response whose id matches no request this side sent; dropped.
    UnknownResponse {
        /// Its id (`None` for `"id": null`).
        id: Option<RequestId>,
        /// The error it carried, if it was an error response.
        error: Option<ErrorObject>,
    },
    /// A notification arrived while nobody was receiving incoming messages.
    UnhandledNotification {
        /// Its method.
        method: String,
    },
    /// This many diagnostics were lost because the stream's reader fell behind.
    Dropped {
        /// How many.
        count: u64,
    },
}

impl Diagnostic {
    /// Cuts every text the other side chose (an excerpt, a reason, a method, a string id,
    /// an error's message) with `clip`, and drops an error's `data` whose compact JSON is
    /// longer than `session::DIAGNOSTIC_TEXT_BYTES`: what `session::HostDiagnostic::clipped`
    /// applies.
    pub(crate) fn clip(&mut self, clip: fn(&mut String)) {
        let id = |id: &mut RequestId| {
            if let RequestId::String(s) = id {
                clip(s);
            }
        };
        match self {
            Diagnostic::JunkLine { excerpt: s }
            | Diagnostic::ParseError { error: s }
            | Diagnostic::NotText { reason: s }
            | Diagnostic::UnhandledNotification { method: s } => clip(s),
            Diagnostic::InvalidMessage { id: i, reason, .. } => {
                i.as_mut().map(id);
                clip(reason);
            }
            Diagnostic::TooCostly { id: i, method, .. } => {
                i.as_mut().map(id);
                method.as_mut().map(clip);
            }
            Diagnostic::Busy { id: i, method, .. }
            | Diagnostic::BusyBytes { id: i, method, .. } => {
                id(i);
                clip(method);
            }
            Diagnostic::LateResponse { id: i } | Diagnostic::IntegralId { id: i, .. } => id(i),
            Diagnostic::FractionalId { id: i, method } => {
                id(i);
                clip(method);
            }
            Diagnostic::UnknownResponse { id: i, error } => {
                i.as_mut().map(id);
                if let Some(e) = error {
                    let mut message = e.message.to_string();
                    clip(&mut message);
                    e.message = message.into();
                    let limit = crate::session::DIAGNOSTIC_TEXT_BYTES;
                    let large = e
                        .data
                        .as_ref()
                        .is_some_and(|d| !crate::session::channels::encoded_within(d, limit));
                    if large {
                        e.data = None;
                    }
                }
            }
            Diagnostic::Oversized { .. }
            | Diagnostic::EmptyBatch
            | Diagnostic::SeveralOnALine { .. }
            | Diagnostic::BatchTooLarge { .. }
            | Diagnostic::OverBudget { .. }
            | Diagnostic::Dropped { .. } => {}
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Diagnostic::JunkLine { excerpt } => write!(f, "skipped a non-JSON line: {excerpt:?}"),
            Diagnostic::ParseError { error } => write!(f, "unparseable JSON: {error}"),
            Diagnostic::Oversized { bytes, limit } => {
                write!(f, "discarded a {bytes}-byte message (limit {limit})")
            }
            Diagnostic::NotText { reason } => write!(f, "discarded a frame: {reason}"),
            Diagnostic::InvalidMessage {
                id,
                reason,
                answered,
            } => {
                write!(f, "invalid message")?;
                if let Some(id) = id {
                    write!(f, " (id {id})")?;
                }
                write!(f, ": {reason}")?;
                if *answered {
                    write!(f, "; answered -32600")?;
                }
                Ok(())
            }
            Diagnostic::EmptyBatch => f.write_str("empty batch; answered -32600"),
            Diagnostic::SeveralOnALine {
                count,
                refused_past,
            } => {
                write!(
                    f,
                    "{count} messages on one line, where one is expected; each read alone"
                )?;
                if *refused_past {
                    f.write_str(", those past the bound refused -32600")?;
                }
                Ok(())
            }
            Diagnostic::TooCostly {
                id,
                method,
                cost,
                limit,
            } => {
                write!(f, "message")?;
                if let Some(m) = method {
                    write!(f, " {m}")?;
                }
                if let Some(id) = id {
                    write!(f, " (id {id})")?;
                }
                write!(
                    f,
                    " would cost {cost} units parsed, over the limit of {limit} \
                     (PeerConfig::max_parsed_cost); not read"
                )
            }
            Diagnostic::BatchTooLarge { count, limit } => write!(
                f,
                "batch of {count} entries over the limit of {limit}; answered -32600, entries not handled"
            ),
            Diagnostic::Busy { id, method, limit } => write!(
                f,
                "request {id} ({method}) refused -32000: {limit} requests already in flight"
            ),
            Diagnostic::BusyBytes {
                id,
                method,
                bytes,
                limit,
            } => write!(
                f,
                "request {id} ({method}) refused -32000: the requests in flight weigh {bytes} bytes, the limit is {limit}"
            ),
            Diagnostic::OverBudget { bytes, limit } => write!(
                f,
                "refused a partial message after {bytes} bytes: the {limit}-byte budget for \
                 buffered partial messages is exhausted; answered -32000"
            ),
            Diagnostic::LateResponse { id } => {
                write!(f, "dropped a late response to timed-out request {id}")
            }
            Diagnostic::IntegralId { id, written } => write!(
                f,
                "read the response id {written} as the id {id} of our request: JSON-RPC 2.0 §5 \
                 asks for the id as sent"
            ),
            Diagnostic::FractionalId { id, method } => write!(
                f,
                "took request {id} ({method}) and answer it under that id: JSON-RPC 2.0 §4 says \
                 a numeric id SHOULD NOT have a fractional part"
            ),
            Diagnostic::UnknownResponse { id: Some(id), .. } => {
                write!(f, "dropped a response to unknown request {id}")
            }
            Diagnostic::UnknownResponse { id: None, error } => match error {
                Some(e) => write!(f, "the other side reported an error without id: {e}"),
                None => f.write_str("dropped a response with a null id"),
            },
            Diagnostic::UnhandledNotification { method } => {
                write!(f, "notification {method} arrived with nobody receiving")
            }
            Diagnostic::Dropped { count } => write!(f, "{count} diagnostics were dropped"),
        }
    }
}

/// The bounded stream of [`Diagnostic`]s of one connection. Falling behind loses the oldest
/// entries and yields one [`Diagnostic::Dropped`] with their count.
#[derive(Debug)]
pub struct Diagnostics {
    pub(super) rx: super::diag::Receiver,
}

impl Diagnostics {
    /// The next diagnostic; `None` once the connection has ended and all were read.
    pub async fn recv(&mut self) -> Option<Diagnostic> {
        self.rx.recv().await
    }

    /// A diagnostic if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Diagnostic> {
        self.rx.try_recv()
    }
}
