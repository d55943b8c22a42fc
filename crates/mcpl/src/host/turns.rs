//! Lifecycle turns (§10.5) and outgoing channel streams (§14.3).

use super::*;
use crate::protocol::channels::{ChannelsOutgoingChunk, ChannelsOutgoingComplete};
use crate::protocol::lifecycle::InferenceLifecycle;

/// A started turn (§10.5): exactly one terminal per `started` on every exit path the host
/// controls. Finish it with [`Turn::complete`], [`Turn::fail`] or [`Turn::abort`]; dropping it
/// unfinished sends `aborted` (from a spawned task, when a tokio runtime is running).
#[derive(Debug)]
#[must_use = "dropping a turn sends `aborted`"]
pub struct Turn {
    pub(super) session: HostSession,
    /// Whether the terminal is still owed: true until a terminal frame is queued (or refused
    /// and reported), so a finish whose future is dropped mid-send still ends the turn from
    /// `Drop` (§10.5: every exit path the host controls).
    pub(super) owed: bool,
    pub(super) inference_id: String,
    pub(super) conversation_id: String,
    pub(super) turn_index: u64,
}

impl Turn {
    /// The inference id.
    pub fn inference_id(&self) -> &str {
        &self.inference_id
    }

    pub(super) fn params(&self, t: Terminal, usage: Option<Value>) -> Value {
        let mut p = json!({
            "inferenceId": self.inference_id,
            "conversationId": self.conversation_id,
            "turnIndex": self.turn_index,
            "phase": t.as_str(),
        });
        if let (Some(u), Some(o)) = (usage, p.as_object_mut()) {
            o.insert("usage".into(), u);
        }
        p
    }

    /// Sends terminal `t`. The turn stays owed while the frame waits for room in the
    /// outgoing queue: if this future is cancelled (a timeout, a `select!`), nothing was
    /// queued and `Drop` sends `aborted` instead, so exactly one terminal is still attempted
    /// (§10.5). Once the frame is queued, or refused and reported, nothing more is owed.
    pub(super) async fn finish(
        mut self,
        t: Terminal,
        usage: Option<Value>,
    ) -> Result<(), HostError> {
        if !self.owed {
            return Ok(());
        }
        let params = self.params(t, usage);
        let r = self
            .session
            .notify_gated(InferenceLifecycle::NAME, params)
            .await;
        self.owed = false;
        if let Err(e) = &r {
            self.session.inner.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: self.inference_id.clone(),
                detail: e.to_string(),
            });
        }
        r
    }

    /// Sends `completed`, with `usage` (`{inputTokens, outputTokens}`) when given.
    pub async fn complete(self, usage: Option<Value>) -> Result<(), HostError> {
        self.finish(Terminal::Completed, usage).await
    }

    /// Sends `failed`.
    pub async fn fail(self) -> Result<(), HostError> {
        self.finish(Terminal::Failed, None).await
    }

    /// Sends `aborted`.
    pub async fn abort(self) -> Result<(), HostError> {
        self.finish(Terminal::Aborted, None).await
    }
}

/// A turn's claim on its inference id while `started` is being sent (see
/// [`HostSession::start_turn`]).
pub(super) struct TurnClaim<'a> {
    pub(super) inner: &'a Inner,
    pub(super) inference_id: &'a str,
    pub(super) armed: bool,
}

impl Drop for TurnClaim<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.state().turns.release(self.inference_id);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.session.inner.state().turns.end(&self.inference_id);
        if !std::mem::replace(&mut self.owed, false) {
            return;
        }
        let s = self.session.clone();
        let params = self.params(Terminal::Aborted, None);
        let id = self.inference_id.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    if let Err(e) = s.notify_gated(InferenceLifecycle::NAME, params).await {
                        s.inner.diag(HostDiagnostic::LifecycleNotSent {
                            inference_id: id,
                            detail: e.to_string(),
                        });
                    }
                });
            }
            Err(_) => s.inner.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: id,
                detail: "no runtime to send `aborted` from".into(),
            }),
        }
    }
}

// Outgoing channel streams (§14.3)

/// Emits one inference's `channels/outgoing/chunk` and `channels/outgoing/complete` to one
/// server (§14.3): `index` is one counter across all channels of the inference, each channel
/// that received chunks gets exactly one `complete` carrying its whole text, on every exit
/// path — [`OutgoingStream::finish`], or dropping the stream (sent from a spawned task).
/// Every send is gated like any channel method: `channels.streaming` granted, and a channel
/// this server registered as outbound and the host's patterns permit. The text passed in is
/// what the host's delivery path would deliver (moderated: §14.3 fail closed).
#[derive(Debug)]
#[must_use = "dropping the stream completes its open channels"]
pub struct OutgoingStream {
    pub(super) session: HostSession,
    /// The index counter, open texts and completed channels: [`session::Outgoing`].
    pub(super) stream: session::Outgoing,
}

impl OutgoingStream {
    /// Sends the next delta for `channel_id`. A channel already completed is refused with
    /// [`HostError::ChannelCompleted`] and nothing is sent: a reopened channel would get a
    /// second `complete` carrying only its later text (§14.3).
    pub async fn chunk(&mut self, channel_id: &str, delta: &str) -> Result<(), HostError> {
        let params = self.stream.chunk(channel_id, delta)?;
        self.session
            .notify_gated(ChannelsOutgoingChunk::NAME, params)
            .await?;
        self.stream.chunk_sent(channel_id, delta);
        Ok(())
    }

    /// Sends `complete` for `channel_id` with the whole text it streamed; a channel that got
    /// no chunk gets nothing (§14.3: one per channel that received chunks), and one already
    /// completed is refused with [`HostError::ChannelCompleted`].
    pub async fn complete(&mut self, channel_id: &str) -> Result<(), HostError> {
        let Some(params) = self.stream.complete(channel_id)? else {
            return Ok(());
        };
        // Still owed (and completed on drop) until it is sent.
        self.session
            .notify_gated(ChannelsOutgoingComplete::NAME, params)
            .await?;
        self.stream.complete_sent(channel_id);
        Ok(())
    }

    /// Completes every channel still open; the first failure is returned after all tried.
    pub async fn finish(mut self) -> Result<(), HostError> {
        let mut first = Ok(());
        for ch in self.stream.open_channels() {
            if let Err(e) = self.complete(&ch).await {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for OutgoingStream {
    fn drop(&mut self) {
        let inference = self.stream.inference_id().to_owned();
        lock(&self.session.inner.state).streams.end(&inference);
        let owed = self.stream.take_owed();
        if owed.is_empty() {
            return;
        }
        let s = self.session.clone();
        let Ok(h) = tokio::runtime::Handle::try_current() else {
            for (channel_id, _) in owed {
                s.inner.diag(HostDiagnostic::OutgoingNotCompleted {
                    inference_id: inference.clone(),
                    channel_id,
                    detail: "no runtime to send `complete` from".into(),
                });
            }
            return;
        };
        h.spawn(async move {
            for (channel_id, params) in owed {
                if let Err(e) = s.notify_gated(ChannelsOutgoingComplete::NAME, params).await {
                    s.inner.diag(HostDiagnostic::OutgoingNotCompleted {
                        inference_id: inference.clone(),
                        channel_id,
                        detail: e.to_string(),
                    });
                }
            }
        });
    }
}

impl HostSession {
    /// Starts a turn: sends `inference/lifecycle` `started` (gated on `inferenceLifecycle`)
    /// and returns a guard that sends exactly one terminal (§10.5): `completed`, `failed`,
    /// or `aborted` when dropped unfinished. An `inference_id` whose turn is open, or among
    /// the recently ended ones, is [`HostError::TurnExists`] and sends nothing.
    pub async fn start_turn(
        &self,
        inference_id: &str,
        conversation_id: &str,
        turn_index: u64,
    ) -> Result<Turn, HostError> {
        let params = json!({
            "inferenceId": inference_id,
            "conversationId": conversation_id,
            "turnIndex": turn_index,
            "phase": "started",
        });
        if !self.inner.state().turns.start(inference_id) {
            return Err(HostError::TurnExists(inference_id.to_owned()));
        }
        // Released if `started` is never queued (refused, or this future cancelled).
        let mut claim = TurnClaim {
            inner: &self.inner,
            inference_id,
            armed: true,
        };
        self.notify_gated(InferenceLifecycle::NAME, params).await?;
        claim.armed = false;
        Ok(Turn {
            session: self.clone(),
            owed: true,
            inference_id: inference_id.to_owned(),
            conversation_id: conversation_id.to_owned(),
            turn_index,
        })
    }

    /// Starts the outgoing stream of inference `inference_id` to this server (§14.3). One
    /// stream per inference and server, carrying all its channels: a second one for the same
    /// inference, while the first is open or after it ended, is [`HostError::StreamExists`].
    pub fn outgoing_stream(
        &self,
        inference_id: &str,
        conversation_id: Option<&str>,
    ) -> Result<OutgoingStream, HostError> {
        if !lock(&self.inner.state).streams.start(inference_id) {
            return Err(HostError::StreamExists(inference_id.to_owned()));
        }
        Ok(OutgoingStream {
            session: self.clone(),
            stream: session::Outgoing::new(inference_id, conversation_id),
        })
    }
}
