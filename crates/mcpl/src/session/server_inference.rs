//! The server's own `inference/request`s (§11): the host's result held to §11.3, and the
//! host's `inference/chunk`s routed to the streaming request they name (§11.4). Part of
//! [`ServerState`](super::ServerState), which `server::Server` drives.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::ServerDiagnostic;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::protocol::inference::{
    result_defects, InferenceChunk, InferenceChunkParams, InferenceRequest,
};
use crate::protocol::Method;

/// The host's `inference/request` result held to §11.3 ([`result_defects`], the rule
/// `mcpl check-host` reports): what fails it is an `inference_result_malformed` diagnostic
/// (a host defect; the result still reaches the application, decoded as far as it goes).
pub(crate) fn result_diagnostic(result: &Value) -> Option<ServerDiagnostic> {
    let (fails, _warnings) = result_defects(result);
    (!fails.is_empty()).then_some(ServerDiagnostic::InferenceResultMalformed { defects: fails })
}

/// Reads one `inference/chunk` (§11.4): params that do not parse are
/// `invalid_notification`, reported, never dropped silently.
fn read_chunk(params: Option<Value>) -> Result<InferenceChunkParams, ServerDiagnostic> {
    crate::jsonrpc::parse_params(params).map_err(|e| ServerDiagnostic::InvalidNotification {
        method: InferenceChunk::NAME.into(),
        error: e.message.into_owned(),
    })
}

/// [`ServerState`](super::ServerState)'s `inference/request`s in flight.
#[derive(Debug, Default)]
pub(crate) struct InferenceRequests {
    /// Every one, by the id [`ServerState::request`](super::ServerState::request) returned,
    /// with the id it went out under when that is another ([`Self::sent_as`]).
    open: HashMap<u64, Option<RequestId>>,
    /// The streaming ones (`stream: true`, §11.4) that went out under their own id: their
    /// chunks are routed.
    streams: HashMap<RequestId, u64>,
    /// The streaming ones that went out under another id ([`Self::sent_as`]), by that id.
    /// Apart from [`Self::streams`]: a wire id may equal another request's own id.
    wire_streams: HashMap<RequestId, u64>,
    /// The newest [`ABANDONED_STREAMS_KEPT`] streams the application gave up
    /// ([`Self::abandoned`]), by the id the host names them by, and whether a chunk of one
    /// was reported since.
    abandoned: VecDeque<(RequestId, bool)>,
}

/// How many streams given up by the application ([`InferenceRequests::abandoned`]) are
/// remembered, so the chunks the host sent before it read the cancel are reported once
/// per stream (`inference_chunks_dropped`, `cancelled`), not each as a host defect.
pub(crate) const ABANDONED_STREAMS_KEPT: usize = 64;

impl InferenceRequests {
    /// Request `id` of `method` with `params` was sent: tracked if it is an
    /// `inference/request`, as a stream if it asks for one.
    pub(crate) fn sent(&mut self, id: u64, method: &str, params: &Value) {
        if method != InferenceRequest::NAME {
            return;
        }
        self.open.insert(id, None);
        if super::rules::is_streamed(Some(params)) {
            self.streams.insert(RequestId::from(id), id);
        }
    }

    /// Request `id` was answered with `outcome`: its stream ends, and a result that breaks
    /// §11.3 is reported ([`result_diagnostic`]).
    pub(crate) fn answered(
        &mut self,
        id: u64,
        outcome: &Result<Value, ErrorObject>,
    ) -> Option<ServerDiagnostic> {
        if !self.ended(id) {
            return None;
        }
        outcome.as_ref().ok().and_then(result_diagnostic)
    }

    /// Request `id` ends without a result (answered, or given up at its deadline): it and
    /// its stream are no longer tracked, so a later chunk naming it is
    /// `unknown_inference_chunk`. Whether it was an `inference/request` in flight.
    pub(crate) fn ended(&mut self, id: u64) -> bool {
        let Some(wire) = self.open.remove(&id) else {
            return false;
        };
        match wire {
            Some(wire) => self.wire_streams.remove(&wire),
            None => self.streams.remove(&RequestId::from(id)),
        };
        true
    }

    /// Request `id` ended as [`Self::ended`] because the application gave it up (its caller
    /// went away, the host told by `notifications/cancelled`): a stream's later chunks, in
    /// flight before the host read the cancel, are reported once ([`Self::chunk`]).
    pub(crate) fn abandoned(&mut self, id: u64) {
        let wire = self
            .open
            .get(&id)
            .map(|w| w.clone().unwrap_or(RequestId::from(id)));
        let streamed = (self.wire_streams.values())
            .chain(self.streams.values())
            .any(|s| *s == id);
        self.ended(id);
        if let Some(wire) = wire.filter(|_| streamed) {
            if self.abandoned.len() >= ABANDONED_STREAMS_KEPT {
                self.abandoned.pop_front();
            }
            self.abandoned.push_back((wire, false));
        }
    }

    /// Request `id` went out under `wire`, not its own id (a driver whose peer numbers
    /// requests itself): the host names its stream by `wire` (§11.4), and its own id names
    /// it no longer.
    #[cfg(feature = "runtime")]
    pub(crate) fn sent_as(&mut self, id: u64, wire: RequestId) {
        let Some(slot) = self.open.get_mut(&id) else {
            return;
        };
        // Whether it streams: named by its own id until now, or by an earlier wire id.
        let streamed = match slot.replace(wire.clone()) {
            Some(old) => self.wire_streams.remove(&old).is_some(),
            None => self.streams.remove(&RequestId::from(id)).is_some(),
        };
        if streamed {
            self.wire_streams.insert(wire, id);
        }
    }

    /// The streaming request an `inference/chunk` with `params` belongs to, by the id its
    /// `requestId` names: params that do not parse are `invalid_notification`, a chunk for
    /// no streaming request is `unknown_inference_chunk`; each is reported, never dropped
    /// silently. The chunks of a stream the application gave up ([`Self::abandoned`]) are
    /// reported once (`inference_chunks_dropped`, `cancelled`), then `Ok(None)`: the host
    /// may have sent them before it read the cancel (MCP cancellation is asynchronous).
    pub(crate) fn chunk(
        &mut self,
        params: Option<Value>,
    ) -> Result<Option<(u64, InferenceChunkParams)>, ServerDiagnostic> {
        let p = read_chunk(params)?;
        let id = self
            .wire_streams
            .get(&p.request_id)
            .or_else(|| self.streams.get(&p.request_id));
        if let Some(id) = id {
            return Ok(Some((*id, p)));
        }
        let gone = self.abandoned.iter_mut().find(|(w, _)| *w == p.request_id);
        match gone {
            Some((_, true)) => Ok(None),
            Some((_, told)) => {
                *told = true;
                Err(ServerDiagnostic::InferenceChunkDropped {
                    request_id: p.request_id,
                    reason: "cancelled",
                })
            }
            None => Err(ServerDiagnostic::UnknownInferenceChunk {
                request_id: p.request_id,
            }),
        }
    }
}
