//! Lifecycle turns (§10.5) and outgoing channel streams (§14.3): guards over the state
//! machine's turns and streams, each call an input to the driver.

use std::sync::Arc;

use super::*;
use crate::protocol::channels::{ChannelsOutgoingChunk, ChannelsOutgoingComplete};
use crate::protocol::lifecycle::InferenceLifecycle;

/// A started turn (§10.5): exactly one terminal per `started` on every exit path the host
/// controls. Finish it with [`Turn::complete`], [`Turn::fail`] or [`Turn::abort`]; dropping it
/// unfinished sends `aborted`.
#[derive(Debug)]
#[must_use = "dropping a turn sends `aborted`"]
pub struct Turn {
    session: HostSession,
    /// Whether the terminal is still owed: true until the driver took the terminal, so a
    /// finish whose future is dropped before that still ends the turn from `Drop` (§10.5:
    /// every exit path the host controls).
    owed: bool,
    /// Shared with the driver's commands and the state's open turn: one copy per turn.
    inference_id: Arc<str>,
}

impl Turn {
    /// The inference id.
    pub fn inference_id(&self) -> &str {
        &self.inference_id
    }

    /// Sends terminal `t` (gated on `inferenceLifecycle`: one the grant no longer allows is
    /// not sent, reported, and returned as the refusal; the turn ends either way).
    async fn finish(mut self, t: Terminal, usage: Option<Value>) -> Result<(), HostError> {
        let inference_id = Arc::clone(&self.inference_id);
        let r = self
            .session
            .call_bounded(InferenceLifecycle::NAME, |reply| Cmd::EndTurn {
                inference_id,
                terminal: t,
                usage,
                reply: Some(reply),
            })
            .await;
        // Given up before the driver took it: still owed, so `Drop` ends the turn.
        self.owed = gave_up(&r);
        r?
    }

    /// Sends `completed`, with `usage` (`{inputTokens, outputTokens}`) when given; a `usage`
    /// that is not token usage (§10.5) is left out, `completed` still sent, and the call is
    /// [`HostError::UsageNotSent`].
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

impl Drop for Turn {
    fn drop(&mut self) {
        if !std::mem::replace(&mut self.owed, false) {
            return;
        }
        self.session.call_detached(Cmd::EndTurn {
            inference_id: Arc::clone(&self.inference_id),
            terminal: Terminal::Aborted,
            usage: None,
            reply: None,
        });
    }
}

// Outgoing channel streams (§14.3)

/// Emits one inference's `channels/outgoing/chunk` and `channels/outgoing/complete` to one
/// server (§14.3): `index` is one counter across all channels of the inference, each channel
/// that received chunks gets exactly one `complete` carrying its whole text, on every exit
/// path — [`OutgoingStream::finish`], or dropping the stream. Every send is gated like any
/// channel method: `channels.streaming` granted, and a channel this server registered as
/// outbound and the host's patterns permit. The text passed in is what the host's delivery
/// path would deliver (moderated: §14.3 fail closed). The stream's state lives in the
/// session's state machine ([`crate::session::HostState::start_stream`]).
#[derive(Debug)]
#[must_use = "dropping the stream completes its open channels"]
pub struct OutgoingStream {
    session: HostSession,
    inference_id: String,
    /// Whether the stream still has to be ended (completing what is owed).
    open: bool,
}

impl OutgoingStream {
    /// Sends the next delta for `channel_id`. A channel already completed is refused with
    /// [`HostError::ChannelCompleted`] and nothing is sent: a reopened channel would get a
    /// second `complete` carrying only its later text (§14.3).
    pub async fn chunk(&mut self, channel_id: &str, delta: &str) -> Result<(), HostError> {
        let (inference_id, channel_id) = (self.inference_id.clone(), channel_id.to_owned());
        let delta = delta.to_owned();
        self.session
            .call_bounded(ChannelsOutgoingChunk::NAME, |reply| Cmd::StreamChunk {
                inference_id,
                channel_id,
                delta,
                reply,
            })
            .await?
    }

    /// Sends `complete` for `channel_id` with the whole text it streamed; a channel that got
    /// no chunk gets nothing (§14.3: one per channel that received chunks), and one already
    /// completed is refused with [`HostError::ChannelCompleted`].
    pub async fn complete(&mut self, channel_id: &str) -> Result<(), HostError> {
        let (inference_id, channel_id) = (self.inference_id.clone(), channel_id.to_owned());
        self.session
            .call_bounded(ChannelsOutgoingComplete::NAME, |reply| {
                Cmd::StreamComplete {
                    inference_id,
                    channel_id,
                    reply,
                }
            })
            .await?
    }

    /// Completes every channel still open and ends the stream; a `complete` the gate no
    /// longer allows is not sent and reported as [`HostDiagnostic::OutgoingNotCompleted`].
    pub async fn finish(mut self) -> Result<(), HostError> {
        let inference_id = self.inference_id.clone();
        let r = self
            .session
            .call_bounded(ChannelsOutgoingComplete::NAME, |reply| Cmd::EndStream {
                inference_id,
                reply: Some(reply),
            })
            .await;
        // Given up before the driver took it: still open, so `Drop` ends the stream.
        self.open = gave_up(&r);
        r?
    }
}

impl Drop for OutgoingStream {
    fn drop(&mut self) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        self.session.call_detached(Cmd::EndStream {
            inference_id: std::mem::take(&mut self.inference_id),
            reply: None,
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
        let id: Arc<str> = Arc::from(inference_id);
        let conversation_id = conversation_id.to_owned();
        // The guard exists before the call: a future dropped once the driver took `started`
        // still ends the turn (an end for a turn never started is refused and ignored).
        let mut turn = Turn {
            session: self.clone(),
            owed: true,
            inference_id: Arc::clone(&id),
        };
        let r = self
            .call_bounded(InferenceLifecycle::NAME, |reply| Cmd::StartTurn {
                inference_id: id,
                conversation_id,
                turn_index,
                reply,
            })
            .await;
        // Refused: nothing to end. Given up: the driver will not start it, and the guard's
        // `Drop` ends it should it have started all the same.
        turn.owed = gave_up(&r) || matches!(r, Ok(Ok(())));
        r.and_then(|decided| decided).map(|()| turn)
    }

    /// Starts the outgoing stream of inference `inference_id` to this server (§14.3). One
    /// stream per inference and server, carrying all its channels: a second one for the same
    /// inference, while the first is open or after it ended, is [`HostError::StreamExists`].
    pub async fn outgoing_stream(
        &self,
        inference_id: &str,
        conversation_id: Option<&str>,
    ) -> Result<OutgoingStream, HostError> {
        let id = inference_id.to_owned();
        let conversation_id = conversation_id.map(str::to_owned);
        let mut stream = OutgoingStream {
            session: self.clone(),
            inference_id: id.clone(),
            open: true,
        };
        let r = self
            .call_bounded(ChannelsOutgoingChunk::NAME, |reply| Cmd::StartStream {
                inference_id: id,
                conversation_id,
                reply,
            })
            .await;
        stream.open = gave_up(&r) || matches!(r, Ok(Ok(())));
        r.and_then(|decided| decided).map(|()| stream)
    }
}

/// Whether a call was given up before the driver took it
/// ([`HostSession::call_bounded`](super::HostSession)'s timeout).
fn gave_up<T>(r: &Result<T, HostError>) -> bool {
    matches!(r, Err(HostError::Peer(PeerError::Timeout { .. })))
}
