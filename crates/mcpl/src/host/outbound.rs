//! The gated outbound path: what the host sends is checked against the grant first (§5.4).
//! Plain requests and notifications are gated against the published snapshot and go
//! straight out through the peer (module docs): the state machine needs neither their
//! frames nor their answers. The gate and the frame's place on the wire are one step,
//! taken while the snapshot is held ([`HostSession::gated_now`]): the driver publishes a
//! narrowed state before it sends the Request that narrows (§6.7), so nothing decided under
//! the wider grant can follow that Request. A frame the queue has no room for waits for
//! room, holds it (`HostSession::room_for`), and is then gated and written as one that
//! found room at once. A call made while calls are queued for the driver
//! (`HostSession::behind_driver`), also after such a wait, goes through the driver, which
//! gates it and queues it in one step itself: behind them, in the order the application
//! made them.

use super::*;

/// The session API that sends `method`, a method with a dedicated one (the generic path
/// would skip its obligations); `None` for the others.
fn dedicated_api(method: &str) -> Option<&'static str> {
    use session::outbound::Dedicated;
    Some(match session::outbound::dedicated(method)? {
        Dedicated::Hook => "host::before_inference",
        Dedicated::Policy => "HostSession::set_policy",
        Dedicated::Lifecycle => "HostSession::start_turn",
        Dedicated::OutgoingStream => "HostSession::outgoing_stream",
        Dedicated::InferenceChunk => "ChunkSink::send",
    })
}

/// The gate a session puts on its peer's public send methods (§5.4, §6): an MCPL method
/// goes through the session, which gates it against the grant and keeps its state, so
/// sent through the `Peer` it is refused, naming the session method to use instead (its
/// dedicated API, else `HostSession::notify_raw` or `HostSession::request_raw`). So is a
/// surface MCPL removed (§6.7, `protocol::REMOVED_METHODS`), which the session refuses
/// too. MCP and extension methods pass: they are what `HostSession::peer` is documented for.
pub(super) fn peer_gate(method: &str, notification: bool) -> Option<&'static str> {
    let mcpl = crate::protocol::is_mcpl_method(method);
    if !mcpl && crate::protocol::removed_in(method).is_none() {
        return None;
    }
    Some(dedicated_api(method).unwrap_or(if notification {
        "HostSession::notify_raw"
    } else {
        "HostSession::request_raw"
    }))
}

/// A method with a dedicated API refused, naming the session's (not the state machine's,
/// which the driver path would name): asked first, whichever path the call takes.
fn refuse_dedicated(method: &str) -> Result<(), HostError> {
    match dedicated_api(method) {
        Some(instead) => Err(HostError::UseDedicated {
            method: method.to_owned(),
            instead,
        }),
        None => Ok(()),
    }
}

impl HostSession {
    /// The gate of the public send paths: methods with a dedicated API are refused here
    /// (the generic path would skip their obligations), then the core outbound gate
    /// ([`session::outbound::gate`]) under snapshot `snap`, then the form §4.1 gives
    /// the method ([`session::outbound::gate_form`]; `notification` when sent as one).
    fn gate_in(
        &self,
        snap: &Snapshot,
        method: &str,
        params: Option<&Value>,
        notification: bool,
    ) -> Result<(), HostError> {
        if let Some(instead) = dedicated_api(method) {
            return Err(HostError::UseDedicated {
                method: method.to_owned(),
                instead,
            });
        }
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

    /// [`Self::gate_in`] of a typed request naming no channel, `req` its requirement as the
    /// method this crate types under its name judges its params
    /// ([`crate::protocol::typed_requirement`]): the same decision without a `Value` of them.
    fn gate_typed<M: Method>(
        &self,
        snap: &Snapshot,
        req: crate::capability::Requirement,
    ) -> Result<(), HostError> {
        if session::outbound::dedicated(M::NAME).is_some() {
            return self.gate_in(snap, M::NAME, None, false);
        }
        session::outbound::gate_typed(M::NAME, req, &snap.mode, snap.ready, &snap.grant)?;
        Ok(session::outbound::gate_form(M::NAME, false)?)
    }

    /// What the `Value` way ([`Self::gate_in`] of the params made a `Value`) refuses a typed
    /// request with that the typed way refused with `typed`: the same refusal, word for word,
    /// whatever the order the two judge in. `typed` when the `Value` way lets it pass.
    fn refusal_by_value<M: Method>(
        &self,
        snap: &Snapshot,
        params: &M::Params,
        typed: HostError,
    ) -> HostError {
        match serde_json::to_value(params) {
            Err(e) => HostError::Encode(e.to_string()),
            Ok(v) => self
                .gate_in(snap, M::NAME, Some(&v), false)
                .err()
                .unwrap_or(typed),
        }
    }

    /// Sends a typed request after outbound gating (refused locally if not granted). One
    /// that names no channel and opens or closes none is gated by its type's requirement
    /// and goes out as [`Peer::request`] sends it (issue #24: its params written and its
    /// result read without a `Value` tree); the others are made a `Value` once, for the
    /// gate and the wire alike, and go as [`Self::request_raw`] sends them.
    pub async fn request<M: Method>(&self, params: &M::Params) -> Result<M::Result, HostError> {
        // The requirement of the method this crate types under the name, from the params
        // when they are its params type; else (a channel's method, one the state machine
        // sends, an application's own type under any name) the `Value` way decides.
        let req = crate::protocol::typed_requirement(M::NAME, params).filter(|_| {
            !session::ChannelLifecycle::is_lifecycle(M::NAME)
                && !session::outbound::names_a_channel(M::NAME)
        });
        let Some(req) = req else {
            let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
            let value = self.request_raw(M::NAME, v).await?;
            return Ok(crate::peer::decode_result::<M>(value)?);
        };
        let mut room = None;
        // When it first waited for room: its one deadline counts from there (the call).
        let mut since = None;
        loop {
            // Room held is given back before the driver's path, which may wait long: held
            // there it would keep the driver's own frames out of the queue.
            let held = room.take();
            if self.behind_driver() {
                drop(held);
                refuse_dedicated(M::NAME)?;
                let v =
                    serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
                let value = Box::pin(self.request_by_driver(M::NAME, v)).await?;
                return Ok(crate::peer::decode_result::<M>(value)?);
            }
            let started = self.gated_now(|snap| {
                let started = self
                    .gate_typed::<M>(snap, req)
                    .and_then(|()| Ok(self.inner.peer.start_typed_now::<M>(params, held)?));
                // A refusal (rare) is the `Value` way's own, in its order: the params' shape
                // is judged before the grant, and a shape refused is `HostError::Encode`.
                started.map_err(|e| self.refusal_by_value::<M>(snap, params, e))
            })?;
            if let Some(started) = started {
                return Ok(started.typed::<M>(since).await?);
            }
            let call = *since.get_or_insert_with(tokio::time::Instant::now);
            room = Some(Box::pin(self.room_for(M::NAME, Some(call))).await?);
        }
    }

    /// Waits for room for one frame in the peer's queue (`Peer::room`), for a send that
    /// found none: it is then gated and written straight out as one that found room at
    /// once, never through the driver's `Value` path (issue #24: a burst of concurrent
    /// calls past the queue's room). Room goes to waiting senders in the order they began
    /// waiting. A request's (`since`: when its call began to wait, as it was made) is
    /// bounded by one deadline from the call, its request timeout: given up at it
    /// (`PeerError::Timeout`, id 0: nothing was sent), and once sent it waits for its
    /// answer only what is left (`Started::value`), as a bare `Peer::request` does. Before,
    /// its own timeout started again once sent, so a call could take twice its timeout. A
    /// notification's wait (`None`) is not bounded, as the driver's path would wait for it.
    async fn room_for(
        &self,
        method: &str,
        since: Option<tokio::time::Instant>,
    ) -> Result<crate::peer::Room, HostError> {
        let deadline = since.zip(self.inner.shared.config.request_timeout);
        Ok(self.inner.peer.room(method, deadline).await?)
    }

    /// Decides a send and puts its frame on the wire in one step, while the published
    /// snapshot is held (§5.4, §6.7): the driver publishes a narrowed state before it sends
    /// what narrowed it, so a message decided under the wider grant is on the wire before
    /// that Request, and one decided after it is decided under the narrower grant. Before,
    /// the gate read the snapshot and the frame was written afterwards, and a narrowing
    /// published and sent in between let a message it revoked follow its Request.
    /// `send` gates against the snapshot and writes or queues the frame without waiting.
    fn gated_now<T>(
        &self,
        send: impl FnOnce(&Snapshot) -> Result<T, HostError>,
    ) -> Result<T, HostError> {
        // From the peer's own tap the snapshot may be held by this very thread (the tap of
        // a send made under it): refused before waiting for it (`PeerError::SentFromTap`).
        if self.inner.peer.in_own_tap() {
            return Err(PeerError::SentFromTap.into());
        }
        let snap = self.inner.shared.snapshot_held();
        send(&snap)
    }

    /// Sends a request through the driver, which gates it against the state in force and
    /// queues it in one step ([`session::HostState::request`]), and waits for its answer.
    async fn request_by_driver(&self, method: &str, params: Value) -> Result<Value, HostError> {
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
        r?
    }

    /// Sends a typed notification after outbound gating (refused locally if not granted):
    /// `channels/outgoing/*` needs `channels.streaming`, `inference/lifecycle` needs
    /// `inferenceLifecycle`, and so on through the method table.
    pub async fn notify<M: Method>(&self, params: &M::Params) -> Result<(), HostError> {
        let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
        self.notify_raw(M::NAME, v).await
    }

    /// Sends a raw request after outbound gating (`Value::Null` sends no `params` member;
    /// a scalar is refused, JSON-RPC 2.0 §4.2). A `channels/open` or `channels/close` goes
    /// through the session's state machine, so that its confirmed answer changes the
    /// channels where it is read, before any message the server sends after it
    /// ([`session::ChannelLifecycle`], §14.3, §14.5). Any other answer (a `tools/call`
    /// result …) is returned as it came, not judged at its receipt: the §5.4 reading is at
    /// [`session::HostState::request`].
    ///
    /// Dropping the returned future before it ends gives the request up, as the bare
    /// [`Peer`] does: the server is sent MCP's `notifications/cancelled { requestId,
    /// reason }` and a later answer is a late response; a `channels/open` or
    /// `channels/close` given up never changes the channels
    /// ([`session::HostState::abandon_request`]), unless its answer had already been
    /// received: the server acted on it, so it is applied and nothing is cancelled.
    pub async fn request_raw(&self, method: &str, params: Value) -> Result<Value, HostError> {
        if session::ChannelLifecycle::is_lifecycle(method) {
            return Box::pin(self.request_by_driver(method, params)).await;
        }
        refuse_dedicated(method)?;
        let mut room = None;
        // When it first waited for room: its one deadline counts from there (the call).
        let mut since = None;
        loop {
            let held = room.take();
            if self.behind_driver() {
                drop(held);
                return Box::pin(self.request_by_driver(method, params)).await;
            }
            let started = self.gated_now(|snap| {
                self.gate_in(snap, method, Some(&params), false)?;
                Ok(self.inner.peer.start_now(method, &params, held)?)
            })?;
            if let Some(started) = started {
                return Ok(started.value(method, since).await?);
            }
            let call = *since.get_or_insert_with(tokio::time::Instant::now);
            room = Some(Box::pin(self.room_for(method, Some(call))).await?);
        }
    }

    /// Sends a raw notification after outbound gating (`params` as for
    /// [`Self::request_raw`]), gated and put on the wire in one step as a request is.
    pub async fn notify_raw(&self, method: &str, params: Value) -> Result<(), HostError> {
        refuse_dedicated(method)?;
        let mut room: Option<crate::peer::Room> = None;
        while !self.behind_driver() {
            let held = room.take();
            let sent = self.gated_now(|snap| {
                self.gate_in(snap, method, Some(&params), true)?;
                Ok(self.inner.peer.notify_now(method, &params, held)?)
            })?;
            if sent {
                return Ok(());
            }
            room = Some(Box::pin(self.room_for(method, None)).await?);
        }
        drop(room);
        // It waits for the driver as its write would have waited for room: unbounded, as
        // every notification (a request's wait is bounded by its timeout).
        let make = |reply| Cmd::Notify(method.to_owned(), params, reply);
        self.call_within(method, None, make).await?
    }
}
