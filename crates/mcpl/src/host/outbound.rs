//! The gated outbound path: what the host sends is checked against the grant first (§5.4).
//! Plain requests and notifications are gated against the published snapshot and go
//! straight out through the peer (module docs): the state machine needs neither their
//! frames nor their answers.

use super::*;

impl HostSession {
    /// The gate of the public send paths: methods with a dedicated API are refused here
    /// (the generic path would skip their obligations), then the core outbound gate
    /// ([`session::outbound::gate`]) under the published state, then the form §4.1 gives
    /// the method ([`session::outbound::gate_form`]; `notification` when sent as one).
    pub(super) fn gate_public(
        &self,
        method: &str,
        params: Option<&Value>,
        notification: bool,
    ) -> Result<(), HostError> {
        use session::outbound::Dedicated;
        if let Some(d) = session::outbound::dedicated(method) {
            let instead = match d {
                Dedicated::Hook => "host::before_inference",
                Dedicated::Policy => "HostSession::set_policy",
                Dedicated::Lifecycle => "HostSession::start_turn",
                Dedicated::OutgoingStream => "HostSession::outgoing_stream",
                Dedicated::InferenceChunk => "ChunkSink::send",
            };
            return Err(HostError::UseDedicated {
                method: method.to_owned(),
                instead,
            });
        }
        let snap = self.snapshot();
        session::outbound::gate(
            method,
            params,
            &snap.mode,
            snap.ready,
            &snap.grant,
            &snap.channels,
            &self.inner.shared.channel_limits,
        )
        .map_err(HostError::from)?;
        Ok(session::outbound::gate_form(method, notification)?)
    }

    /// [`Self::gate_public`] of a typed request naming no channel, its requirement from its
    /// type (`Method::requirement`): the same decision without a `Value` of its params.
    fn gate_typed<M: Method>(&self, params: &M::Params) -> Result<(), HostError> {
        if session::outbound::dedicated(M::NAME).is_some() {
            return self.gate_public(M::NAME, None, false);
        }
        let snap = self.snapshot();
        session::outbound::gate_typed(
            M::NAME,
            M::requirement(params),
            &snap.mode,
            snap.ready,
            &snap.grant,
        )?;
        Ok(session::outbound::gate_form(M::NAME, false)?)
    }

    /// Sends a typed request after outbound gating (refused locally if not granted). One
    /// that names no channel and opens or closes none is gated by its type's requirement
    /// and goes out as [`Peer::request`] sends it (issue #24: its params written and its
    /// result read without a `Value` tree); the others are made a `Value` once, for the
    /// gate and the wire alike, and go as [`Self::request_raw`] sends them.
    pub async fn request<M: Method>(&self, params: &M::Params) -> Result<M::Result, HostError> {
        if session::ChannelLifecycle::is_lifecycle(M::NAME)
            || session::outbound::names_a_channel(M::NAME)
        {
            let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
            let value = self.request_raw(M::NAME, v).await?;
            return Ok(crate::peer::decode_result::<M>(value)?);
        }
        self.in_order(M::NAME, true).await?;
        self.gate_typed::<M>(params)?;
        Ok(self.inner.peer.request::<M>(params).await?)
    }

    /// Sends a typed notification after outbound gating (refused locally if not granted):
    /// `channels/outgoing/*` needs `channels.streaming`, `inference/lifecycle` needs
    /// `inferenceLifecycle`, and so on through the method table.
    pub async fn notify<M: Method>(&self, params: &M::Params) -> Result<(), HostError> {
        let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
        self.in_order(M::NAME, false).await?;
        self.gate_public(M::NAME, Some(&v), true)?;
        Ok(self.inner.peer.notify_raw(M::NAME, Some(v)).await?)
    }

    /// Sends a raw request after outbound gating (`Value::Null` sends no `params` member;
    /// a scalar is refused, JSON-RPC 2.0 §4.2). A `channels/open` or `channels/close` goes
    /// through the session's state machine, so that its confirmed answer changes the
    /// channels where it is read, before any message the server sends after it
    /// ([`session::ChannelLifecycle`], §14.3, §14.5).
    ///
    /// Dropping the returned future before it ends gives the request up, as the bare
    /// [`Peer`] does: the server is sent MCP's `notifications/cancelled { requestId,
    /// reason }` and a later answer is a late response; a `channels/open` or
    /// `channels/close` given up never changes the channels
    /// ([`session::HostState::abandon_request`]), unless its answer had already been
    /// received: the server acted on it, so it is applied and nothing is cancelled.
    pub async fn request_raw(&self, method: &str, params: Value) -> Result<Value, HostError> {
        if session::ChannelLifecycle::is_lifecycle(method) {
            let mut give_up = GiveUp::new(self);
            let call = give_up.call;
            let method_owned = method.to_owned();
            let make = |reply| Cmd::Request {
                method: method_owned,
                params,
                call,
                reply,
            };
            let r = self.call_bounded(method, make).await;
            // Answered by the driver (its outcome, or a refusal): nothing is left to give up.
            // A call given up unanswered (`call_bounded`'s own bound) is forgotten too.
            if r.is_ok() {
                give_up.answered();
            }
            return r?;
        }
        self.in_order(method, true).await?;
        self.gate_public(method, Some(&params), false)?;
        Ok(self.inner.peer.request_raw(method, Some(params)).await?)
    }

    /// Sends a raw notification after outbound gating (`params` as for
    /// [`Self::request_raw`]).
    pub async fn notify_raw(&self, method: &str, params: Value) -> Result<(), HostError> {
        self.in_order(method, false).await?;
        self.gate_public(method, Some(&params), true)?;
        Ok(self.inner.peer.notify_raw(method, Some(params)).await?)
    }
}
