//! The server's own `inference/request`s (§11): the host's result held to §11.3, and the
//! host's `inference/chunk`s routed to the streaming request they name (§11.4). Part of
//! [`ServerState`](super::ServerState), which `server::Server` drives.

use std::collections::{HashMap, HashSet};

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

/// Routes one `inference/chunk` (§11.4) to the stream its `requestId` names among
/// `streams` (the server's streaming requests still in flight): params that do not parse
/// are `invalid_notification`, a chunk for no streaming request is
/// `unknown_inference_chunk`; each is reported, never dropped silently.
pub(crate) fn route_chunk<T>(
    streams: &HashMap<RequestId, T>,
    params: Option<Value>,
) -> Result<(&T, InferenceChunkParams), ServerDiagnostic> {
    let p: InferenceChunkParams = crate::jsonrpc::parse_params(params).map_err(|e| {
        ServerDiagnostic::InvalidNotification {
            method: InferenceChunk::NAME.into(),
            error: e.message.into_owned(),
        }
    })?;
    match streams.get(&p.request_id) {
        Some(stream) => Ok((stream, p)),
        None => Err(ServerDiagnostic::UnknownInferenceChunk {
            request_id: p.request_id,
        }),
    }
}

/// [`ServerState`](super::ServerState)'s `inference/request`s in flight.
#[derive(Debug, Default)]
pub(crate) struct InferenceRequests {
    /// Every one, by the id [`ServerState::request`](super::ServerState::request) returned.
    open: HashSet<u64>,
    /// The streaming ones (`stream: true`, §11.4), by wire id: their chunks are routed.
    streams: HashMap<RequestId, u64>,
}

impl InferenceRequests {
    /// Request `id` of `method` with `params` was sent: tracked if it is an
    /// `inference/request`, as a stream if it asks for one.
    pub(crate) fn sent(&mut self, id: u64, method: &str, params: &Value) {
        if method != InferenceRequest::NAME {
            return;
        }
        self.open.insert(id);
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
        if !self.open.remove(&id) {
            return false;
        }
        self.streams.remove(&RequestId::from(id));
        true
    }

    /// The streaming request an `inference/chunk` with `params` belongs to, by
    /// [`route_chunk`].
    pub(crate) fn chunk(
        &self,
        params: Option<Value>,
    ) -> Result<(u64, InferenceChunkParams), ServerDiagnostic> {
        route_chunk(&self.streams, params).map(|(id, p)| (*id, p))
    }
}
