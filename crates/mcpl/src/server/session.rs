//! [`Session`]: one live connection from the server's side, and its senders.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::conn::{Conn, StreamTx};
use super::dispatch::is_reserved;
use super::driver::Command;
use super::*;
use crate::capability::Capability;
use crate::manifest::ManifestTracker;
use crate::peer::{CloseReason, PeerError};
use crate::protocol::channels::{
    ChangedParams, ChannelDescriptor, ChannelsChanged, ChannelsIncoming, ChannelsRegister,
    IncomingMessage as ChannelMessage, IncomingParams, IncomingResult, ItemizedResult,
    RegisterParams,
};
use crate::protocol::content::Content;
use crate::protocol::inference::{
    InferenceChunkParams, InferenceRequest, InferenceRequestParams, InferenceResult,
};
use crate::protocol::model::{ModelInfo, ModelInfoRequest};
use crate::protocol::push::{self, PushEventParams, PushEventResult, PushPayload};
use crate::protocol::{EmptyObject, Method};

/// One live connection, from the server's side: read the negotiated state, send what the
/// grant allows. Cheap to clone.
#[derive(Clone)]
pub struct Session {
    pub(super) conn: Arc<Conn>,
    /// What the negotiated state and the channels were when a [`Session::deferred`] handle
    /// was taken: its sends count as begun then. `None`: each send begins when it is made.
    began: Option<Began>,
}

/// The versions of the negotiated state and of the channels a deferred send began with.
#[derive(Clone)]
struct Began {
    grant: watch::Receiver<GrantState>,
    channels: watch::Receiver<Vec<ChannelDescriptor>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("state", &*self.conn.grant_tx.borrow())
            .finish_non_exhaustive()
    }
}

/// A streaming `inference/request` (§11.4): chunks as they arrive, then the final result.
/// Dropped before its result came, the request is cancelled toward the host (MCP
/// `notifications/cancelled`), as any request of the server's whose caller goes away.
#[derive(Debug)]
pub struct InferenceStream {
    pub(super) chunks: mpsc::Receiver<InferenceChunkParams>,
    pub(super) result: Option<super::caller::Reply>,
    pub(super) done: Option<Result<InferenceResult, SendError>>,
}

/// The final result as the driver delivered it: decoded, or why there is none.
fn final_result(r: Option<Result<Value, SendError>>) -> Result<InferenceResult, SendError> {
    match r {
        Some(out) => out.and_then(|v| Ok(decode_result(v)?)),
        None => Err(SendError::Peer(PeerError::Closed(CloseReason::Dropped))),
    }
}

impl InferenceStream {
    /// The next chunk; `None` once the final response has arrived (then call
    /// [`Self::finish`]).
    pub async fn next_chunk(&mut self) -> Option<InferenceChunkParams> {
        if self.done.is_some() {
            return self.chunks.try_recv().ok();
        }
        let rx = self.result.as_mut()?;
        tokio::select! {
            biased;
            c = self.chunks.recv() => c,
            r = rx => {
                self.result = None;
                self.done = Some(final_result(r));
                self.chunks.try_recv().ok()
            }
        }
    }

    /// The final `inference/request` result (skipping any unread chunks).
    pub async fn finish(mut self) -> Result<InferenceResult, SendError> {
        if let Some(done) = self.done.take() {
            return done;
        }
        match self.result.take() {
            Some(rx) => final_result(rx.await),
            None => Err(SendError::Peer(PeerError::Closed(CloseReason::Dropped))),
        }
    }
}

impl Session {
    /// A handle to the connection `conn` whose sends each begin when they are made.
    pub(super) fn of(conn: Arc<Conn>) -> Self {
        Session { conn, began: None }
    }

    /// A handle to this connection whose sends count as begun now, for a handler that
    /// checks the grant ([`Self::granted`], [`Self::feature_available`]) and hands the send
    /// to a task it spawns: a send through it that the policy refuses after the host changed
    /// the negotiated state since this call (or, for `channels/incoming`, the channels) is
    /// reported as a notice (`send_refused_policy_changed`, `send_refused_channels_changed`),
    /// not as the author's mistake. The send itself is gated as any other (§6.7).
    pub fn deferred(&self) -> Session {
        Session {
            conn: self.conn.clone(),
            began: Some(Began {
                grant: self.conn.grant_tx.subscribe(),
                channels: self.conn.channels.subscribe(),
            }),
        }
    }

    /// The negotiated state now.
    pub fn grant_state(&self) -> GrantState {
        self.conn.grant_state()
    }

    /// Hands request `method` with `params` to the connection's driver, whose session
    /// state gates it (§5.4, §6.6: `session::ServerState::request`), sends it and delivers
    /// its outcome; with `stream`, the chunks of a streaming `inference/request` go there
    /// and the call returns once the request is sent (or refused).
    ///
    /// The driver takes no calls while the host reads too little of what it already sent
    /// (`Outbox::takes_calls`): a call it has not taken within the peer's
    /// `request_timeout` fails with [`PeerError::Timeout`] (id 0: nothing was sent) and is
    /// dropped unsent; once taken, the request's own timeout runs.
    async fn send_command(
        &self,
        method: &'static str,
        params: Value,
        stream: Option<StreamTx>,
    ) -> Result<super::caller::Reply, SendError> {
        let (reply, rx) = oneshot::channel();
        // Dropped unanswered, it tells the driver (`caller::CallersGone`).
        let rx = super::caller::Reply::new(rx, self.conn.callers_gone.clone());
        let (accepted, sent) = oneshot::channel();
        let command = Command::Request {
            method,
            params,
            reply,
            stream,
            accepted: Some(accepted),
        };
        let taken = async {
            if self.conn.commands.send(command).await.is_err() {
                return false;
            }
            sent.await.is_ok()
        };
        let taken = match self.conn.server.peer_config.request_timeout {
            None => taken.await,
            Some(after) => match tokio::time::timeout(after, taken).await {
                Ok(taken) => taken,
                // Dropped with `rx`: the driver sees the reply closed and never sends it.
                Err(_) => {
                    return Err(SendError::Peer(PeerError::Timeout {
                        method: method.to_owned(),
                        id: crate::jsonrpc::RequestId::from(0u64),
                        after,
                    }))
                }
            },
        };
        if !taken {
            // Not sent: the reply says why.
            return match rx.await {
                Some(Err(e)) => Err(e),
                _ => Err(self.closed_error()),
            };
        }
        Ok(rx)
    }

    /// Waits until every frame the connection's driver took before now has left its outbox,
    /// so a frame sent straight through the peer next is written after them (the driver
    /// holds frames a host that reads slowly has no room for). Within `timeout` (a request:
    /// the peer's `request_timeout`, then [`PeerError::Timeout`], id 0: nothing was sent);
    /// without one, as long as a write would wait.
    pub(super) async fn in_order(
        &self,
        method: &str,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), SendError> {
        let (tx, rx) = oneshot::channel();
        let wait = async {
            if self.conn.commands.send(Command::Barrier(tx)).await.is_ok() {
                // Err: the driver ended; the send that follows says how.
                let _ = rx.await;
            }
        };
        match timeout {
            None => wait.await,
            Some(after) => {
                if tokio::time::timeout(after, wait).await.is_err() {
                    return Err(SendError::Peer(PeerError::Timeout {
                        method: method.to_owned(),
                        id: crate::jsonrpc::RequestId::from(0u64),
                        after,
                    }));
                }
            }
        }
        Ok(())
    }

    fn closed_error(&self) -> SendError {
        SendError::Peer(PeerError::Closed(
            self.conn
                .peer
                .close_reason()
                .unwrap_or(CloseReason::Dropped),
        ))
    }

    /// Whether behaviour needing `c` may run now (MCPL active, policy received, granted).
    pub fn granted(&self, c: Capability) -> bool {
        self.conn.grant_tx.borrow().granted(c)
    }

    /// Whether the named feature set is available now.
    pub fn feature_available(&self, name: &str) -> bool {
        self.conn.grant_tx.borrow().feature_available(name)
    }

    /// Whether the host advertised MCPL (false: MCP-only, §3.2).
    pub fn is_mcpl(&self) -> bool {
        self.conn.grant_tx.borrow().mcpl
    }

    /// A `watch` receiver that sees every change of the negotiated state.
    pub fn grant_changes(&self) -> watch::Receiver<GrantState> {
        self.conn.grant_tx.subscribe()
    }

    /// The session's diagnostics from now on (host defects, dropped injections …).
    pub fn diagnostics(&self) -> broadcast::Receiver<ServerDiagnostic> {
        self.conn
            .diag_tx
            .get_or_init(|| broadcast::channel(256).0)
            .subscribe()
    }

    /// How many mistakes of the server's own code this connection has reported so far
    /// ([`DiagnosticKind::AuthorMistake`]: refused sends, dropped injections, panicking
    /// handlers …); each was also logged at `warn`.
    pub fn author_mistakes(&self) -> u64 {
        self.conn
            .author_mistakes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the send `out` and reports a refusal before the wire as the author's mistake
    /// (`send_refused`); a failure on the wire ([`SendError::Peer`]) is the caller's to
    /// handle, not reported.
    ///
    /// Reading (§6.7: the host may reduce the policy at any time, a Notification applied
    /// before anything else is read): a refusal by the policy (not ready, capability
    /// denied, feature set unavailable) after the negotiated state changed since the call
    /// began is a race the caller could not win, checking [`Self::granted`] or
    /// [`Self::feature_available`] first or not: it is reported as
    /// `send_refused_policy_changed`, a notice. "Changed" is any change the driver
    /// published (a `watch` version), so a refusal the caller's view already held is a
    /// notice too when an unrelated change came between; the call still fails as before.
    ///
    /// The same reading for the channels (§14.3, §14.5: the host may close a channel, or
    /// answer a change, while the call waits to be taken): a `channels/incoming` refused
    /// naming a channel no longer held ([`SendError::UnknownChannel`]) after the channels
    /// the driver published ([`Self::channels`]) changed since the call began is reported
    /// as `send_refused_channels_changed`, a notice.
    ///
    /// Through a [`Self::deferred`] handle the call began when the handle was taken: a
    /// tool that checked the grant and spawned its send (the reference server's
    /// `schedule_event`) could not win a narrowing that came between its check and the
    /// spawned send either.
    pub(super) async fn reported<T>(
        &self,
        method: &str,
        out: impl std::future::Future<Output = Result<T, SendError>>,
    ) -> Result<T, SendError> {
        let (seen, seen_channels) = match &self.began {
            Some(b) => (b.grant.clone(), b.channels.clone()),
            None => (
                self.conn.grant_tx.subscribe(),
                self.conn.channels.subscribe(),
            ),
        };
        let r = out.await;
        if let Err(e) = &r {
            let by_policy = matches!(
                e,
                SendError::NotReady { .. }
                    | SendError::CapabilityDenied { .. }
                    | SendError::FeatureSetUnavailable { .. }
            );
            let (method, reason, detail) = (method.to_owned(), e.code(), e.to_string());
            let d = match e {
                SendError::UnknownChannel(channel_id)
                    if seen_channels.has_changed().unwrap_or(false) =>
                {
                    let channel_id = channel_id.clone();
                    ServerDiagnostic::SendRefusedChannelsChanged {
                        method,
                        channel_id,
                        detail,
                    }
                }
                _ if by_policy && seen.has_changed().unwrap_or(false) => {
                    ServerDiagnostic::SendRefusedPolicyChanged {
                        method,
                        reason,
                        detail,
                    }
                }
                SendError::Peer(_) => return r,
                _ => ServerDiagnostic::SendRefused {
                    method,
                    reason,
                    detail,
                },
            };
            self.conn.diagnostic(d);
        }
        r
    }

    /// The manifest tracker this connection's manifest comes from: the server's, shared by
    /// its connections ([`Server::tracker`]), or the connection's own once
    /// [`Self::own_manifest`] has been called. A change installed here is what `initialize`
    /// and `mcpl/manifest` answer with, and is announced to every connection attached to it.
    pub fn tracker(&self) -> &Arc<ManifestTracker> {
        self.conn.tracker()
    }

    /// This connection's own manifest tracker: on the first call the connection leaves the
    /// server's shared tracker for a tracker of its own that starts from the manifest
    /// installed now (the snapshot is shared, not copied, until it is changed); later calls
    /// return the same tracker. Changes installed through it are seen and announced
    /// (§17.3) on this connection only, and it goes away with the connection; changes to the
    /// server's tracker no longer reach this connection.
    ///
    /// Reading (§17, silent on several connections): the manifest is what a server presents
    /// to one connection at `initialize` (§17.1) and the host reviews it per connection
    /// (§17.5, §17.8), as it computes the grant per connection (§5.4); so one connection's
    /// manifest may change without the others'. A server whose tools change the manifest on
    /// a client's request (the reference server's `add_topic`) uses this, so one client
    /// cannot change what another is told. The fork itself announces nothing: the connection
    /// keeps the baseline it was last told about (an unknown one is told the current revision
    /// with every domain, the over-announcing direction).
    pub fn own_manifest(&self) -> &Arc<ManifestTracker> {
        self.conn.own_manifest()
    }

    /// This connection's state ([`ServerBuilder::connection_state`]), made by the registered
    /// factory on the first call and dropped when the connection ends. `None` when the
    /// server registers no state of type `T`, or once the connection has ended.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.conn.state::<T>()
    }

    /// The [`Server`] this connection belongs to, e.g. for a handler to change its tools at
    /// runtime ([`Server::add_tool`]). A handle: keeping it keeps the server, not the
    /// connection.
    pub fn server(&self) -> Server {
        Server {
            inner: self.conn.server.clone(),
        }
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.conn.peer.close();
    }

    /// Waits until the connection has ended.
    pub async fn closed(&self) -> CloseReason {
        self.conn.peer.closed().await
    }

    /// Sends the typed request `M` through the connection's driver, whose session state
    /// gates it (the one rule, `session::gate_to_host`), and decodes its result.
    pub(super) async fn request<M: Method>(
        &self,
        params: &M::Params,
    ) -> Result<M::Result, SendError> {
        let value = serde_json::to_value(params).map_err(|e| PeerError::Encode {
            method: M::NAME.into(),
            reason: e.to_string(),
        })?;
        let rx = self.send_command(M::NAME, value, None).await?;
        let out = rx.await.unwrap_or_else(|| Err(self.closed_error()))?;
        serde_json::from_value(out).map_err(|e| {
            SendError::Peer(PeerError::Decode {
                method: M::NAME.to_owned(),
                reason: e.to_string(),
            })
        })
    }

    /// Sends a plain MCP request to the host (`sampling/createMessage`, `roots/list`,
    /// `elicitation/create`, `ping` …) and returns its result; for an [`McpFallback`]. MCP
    /// needs no MCPL grant, so this works on MCP-only connections and before the policy
    /// (§3.2); every MCPL method is refused ([`SendError::NotMcp`]), since those go only
    /// through the gated senders. The connection's request timeout applies.
    pub async fn send_mcp_request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, SendError> {
        let out = async {
            if is_reserved(method) && method != crate::protocol::handshake::Ping::NAME {
                return Err(SendError::NotMcp(method.to_owned()));
            }
            self.in_order(method, self.conn.server.peer_config.request_timeout)
                .await?;
            Ok(self.conn.peer.request_raw(method, params).await?)
        };
        self.reported(method, out).await
    }

    /// Sends a plain MCP notification to the host (`notifications/message`,
    /// `notifications/progress`, `notifications/tools/list_changed` …); MCPL methods are
    /// refused as by [`Self::send_mcp_request`].
    pub async fn send_mcp_notification(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), SendError> {
        let out = async {
            if is_reserved(method) {
                return Err(SendError::NotMcp(method.to_owned()));
            }
            self.in_order(method, None).await?;
            Ok(self.conn.peer.notify_raw(method, params).await?)
        };
        self.reported(method, out).await
    }

    /// Sends `push/event` (§9): needs `pushEvents` and an available `featureSet`; stamps
    /// `eventId` ([`PushEvent::stable_event_id`]) and `timestamp`.
    pub async fn push_event(&self, event: PushEvent) -> Result<PushEventResult, SendError> {
        let out = async {
            checked_content(&event.content, "payload.content")?;
            checked_timestamp(event.timestamp.as_deref())?;
            let params = PushEventParams {
                event_id: event.stable_event_id(),
                timestamp: event.timestamp.clone().unwrap_or_else(utc_now_iso8601),
                feature_set: event.feature_set,
                origin: event.origin,
                payload: PushPayload {
                    // §9.2: `payload.content` is ContentBlock[]; the string form becomes a block.
                    content: Content::Blocks(event.content.to_blocks()),
                    extra: Map::new(),
                },
                tags: producer_tags(event.tags)?,
                extra: Map::new(),
            };
            self.request::<push::PushEvent>(&params).await
        };
        self.reported(push::PushEvent::NAME, out).await
    }

    /// Sends `channels/register` (§14.3; needs `channels.register`); the host answers per
    /// descriptor (§14.5). The results of a connection's channel changes are applied in the
    /// order the changes were sent, whatever order the answers come in.
    pub async fn channels_register(
        &self,
        channels: Vec<ChannelDescriptor>,
    ) -> Result<ItemizedResult, SendError> {
        let out = async {
            let params = RegisterParams {
                channels,
                extra: Map::new(),
            };
            self.request::<ChannelsRegister>(&params).await
        };
        self.reported(ChannelsRegister::NAME, out).await
    }

    /// The channels the host has accepted from this connection (by the itemized results of
    /// [`Self::channels_register`] and [`Self::channels_changed`]), less one an
    /// `on_channels_close` handler since closed; what an inbound `channels/list` is answered
    /// with when no handler is set, before the channels `on_channels_open` opened.
    pub fn channels(&self) -> Vec<ChannelDescriptor> {
        self.conn.channels.borrow().clone()
    }

    /// Sends `channels/changed` in the Request form (§14.5; needs `channels.register`); its
    /// result is applied after those of the channel changes sent before it.
    pub async fn channels_changed(
        &self,
        change: ChangedParams,
    ) -> Result<ItemizedResult, SendError> {
        let out = async { self.request::<ChannelsChanged>(&change).await };
        self.reported(ChannelsChanged::NAME, out).await
    }

    /// Sends `channels/incoming` (§14.3; needs `channels.incoming`); a message's `timestamp`
    /// that is not ISO 8601 is refused before the wire ([`SendError::InvalidTimestamp`]).
    pub async fn channels_incoming(
        &self,
        messages: Vec<ChannelMessage>,
    ) -> Result<IncomingResult, SendError> {
        let out = async {
            let mut messages = messages;
            for (i, m) in messages.iter_mut().enumerate() {
                checked_content(&m.content, &format!("messages[{i}].content"))?;
                checked_timestamp(m.timestamp.as_deref())?;
                m.tags = producer_tags(m.tags.take())?;
            }
            let params = IncomingParams {
                messages,
                extra: Map::new(),
            };
            self.request::<ChannelsIncoming>(&params).await
        };
        self.reported(ChannelsIncoming::NAME, out).await
    }

    /// Sends a non-streaming `inference/request` (§11; needs `inferenceRequest` and an
    /// available `featureSet`). `stream` is forced off; use [`Self::inference_stream`].
    pub async fn inference_request(
        &self,
        mut params: InferenceRequestParams,
    ) -> Result<InferenceResult, SendError> {
        let out = async {
            params.stream = None;
            inference_content(&params)?;
            self.request::<InferenceRequest>(&params).await
        };
        self.reported(InferenceRequest::NAME, out).await
    }

    /// Sends a streaming `inference/request` (§11.4; needs `inferenceRequest` and
    /// `inferenceRequest.streaming`): chunks arrive on the returned stream.
    pub async fn inference_stream(
        &self,
        mut params: InferenceRequestParams,
    ) -> Result<InferenceStream, SendError> {
        let out = async {
            params.stream = Some(true);
            inference_content(&params)?;
            let value = serde_json::to_value(&params).map_err(|e| PeerError::Encode {
                method: InferenceRequest::NAME.into(),
                reason: e.to_string(),
            })?;
            let (chunk_tx, chunk_rx) = mpsc::channel(crate::session::INFERENCE_CHUNKS_HELD);
            // Returns once the request is sent, its chunks routed here (§11.4).
            let result = self
                .send_command(InferenceRequest::NAME, value, Some(chunk_tx))
                .await?;
            Ok(InferenceStream {
                chunks: chunk_rx,
                result: Some(result),
                done: None,
            })
        };
        self.reported(InferenceRequest::NAME, out).await
    }

    /// Sends `model/info` (§12; needs `modelInfo`).
    pub async fn model_info(&self) -> Result<ModelInfo, SendError> {
        let out = async {
            let params = EmptyObject::default();
            self.request::<ModelInfoRequest>(&params).await
        };
        self.reported(ModelInfoRequest::NAME, out).await
    }
}

/// `content` as the wire will carry it passes App. B.1 ([`content_defect`]): the typed
/// blocks have public fields, so a block can be built with neither or both media forms.
pub(super) fn checked_content(content: &Content, at: &str) -> Result<(), SendError> {
    let v = serde_json::to_value(content).map_err(|e| SendError::InvalidContent(e.to_string()))?;
    match crate::protocol::content::content_defect(Some(&v), at, true) {
        Some(defect) => Err(SendError::InvalidContent(defect)),
        None => Ok(()),
    }
}

/// A caller-set `timestamp` passes the one ISO 8601 rule ([`crate::protocol::time`]) the host
/// judges it by (§9.2, §14.3): one check for every sender that carries one.
pub(super) fn checked_timestamp(ts: Option<&str>) -> Result<(), SendError> {
    match ts.map(|t| (t, crate::protocol::time::timestamp_defect(t))) {
        Some((t, Some(defect))) => Err(SendError::InvalidTimestamp {
            timestamp: t.to_owned(),
            defect,
        }),
        _ => Ok(()),
    }
}

/// Every §11.2 message's content passes [`checked_content`].
pub(super) fn inference_content(params: &InferenceRequestParams) -> Result<(), SendError> {
    for (i, m) in params.messages.iter().enumerate() {
        checked_content(&m.content, &format!("messages[{i}].content"))?;
    }
    Ok(())
}

/// A producer's tags as sent (§16.1): each one namespaced, well-formed and outside the
/// reserved namespaces unless core vocabulary; a set, so repeats are dropped (first kept).
pub(super) fn producer_tags(tags: Option<Vec<String>>) -> Result<Option<Vec<String>>, SendError> {
    let Some(tags) = tags else { return Ok(None) };
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        crate::tags::Tag::parse_producer(&t)?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(Some(out))
}

/// A host's `inference/request` result, streamed or not, decoded as far as it can be (a
/// typed decode failure is the caller's [`PeerError::Decode`]); the session reported each
/// §11.3 defect of it already (`inference_result_malformed`, by the one rule
/// `session::result_diagnostic`).
fn decode_result(result: Value) -> Result<InferenceResult, PeerError> {
    serde_json::from_value(result).map_err(|e| PeerError::Decode {
        method: InferenceRequest::NAME.into(),
        reason: e.to_string(),
    })
}
