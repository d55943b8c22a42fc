//! Outgoing streams at the host (§14.3): one per inference, carrying all its channels,
//! each chunk and `complete` gated like every channel method.

use super::*;

impl HostState {
    /// Starts the outgoing stream of inference `inference_id` (§14.3): one per inference,
    /// carrying all its channels; refused while one for the id is open or among the
    /// recently ended ones, and past [`crate::session::ENDED_IDS_REMEMBERED`] open streams.
    pub fn start_stream(
        &mut self,
        inference_id: &str,
        conversation_id: Option<&str>,
    ) -> Result<(), StateError> {
        self.open()?;
        // A duplicate is refused as one even at the open limit (as a turn's).
        if self.streams.knows(inference_id) {
            return Err(StateError::Stream(format!(
                "a stream for inference {inference_id:?} is open or recently ended"
            )));
        }
        if self.open_streams.len() >= crate::session::ENDED_IDS_REMEMBERED {
            return Err(StateError::TooManyOpen {
                what: "outgoing streams",
                limit: crate::session::ENDED_IDS_REMEMBERED,
            });
        }
        self.streams.start(inference_id);
        self.open_streams.insert(
            inference_id.to_owned(),
            crate::session::Outgoing::new(inference_id, conversation_id),
        );
        Ok(())
    }

    fn open_stream(&self, inference_id: &str) -> Result<&crate::session::Outgoing, StateError> {
        self.open_streams.get(inference_id).ok_or_else(|| {
            StateError::Stream(format!("no stream for inference {inference_id:?} is open"))
        })
    }

    /// Sends the next `channels/outgoing/chunk` of the stream (§14.3), gated like every
    /// channel method (`channels.streaming`, a channel this server registered as outbound
    /// that the host's patterns permit); a refused chunk takes no index.
    pub fn stream_chunk(
        &mut self,
        inference_id: &str,
        channel_id: &str,
        delta: &str,
    ) -> Result<(), StateError> {
        self.open()?;
        let params = self.open_stream(inference_id)?.chunk(channel_id, delta)?;
        self.gate(ChannelsOutgoingChunk::NAME, &params)?;
        if let Some(s) = self.open_streams.get_mut(inference_id) {
            s.chunk_sent(channel_id, delta);
        }
        self.write_notification(ChannelsOutgoingChunk::NAME, params);
        Ok(())
    }

    /// Sends `channels/outgoing/complete` for one channel of the stream with the whole text
    /// it streamed (§14.3); a channel that got no chunk owes nothing and gets nothing.
    pub fn stream_complete(
        &mut self,
        inference_id: &str,
        channel_id: &str,
    ) -> Result<(), StateError> {
        self.open()?;
        let Some(params) = self.open_stream(inference_id)?.complete(channel_id)? else {
            return Ok(());
        };
        self.gate(ChannelsOutgoingComplete::NAME, &params)?;
        if let Some(s) = self.open_streams.get_mut(inference_id) {
            s.complete_sent(channel_id);
        }
        self.write_notification(ChannelsOutgoingComplete::NAME, params);
        Ok(())
    }

    /// Ends the stream: every channel still owed its `complete` gets it (§14.3: on every exit
    /// path); one the gate no longer allows is not sent and reported as
    /// [`HostDiagnostic::OutgoingNotCompleted`].
    pub fn end_stream(&mut self, inference_id: &str) -> Result<(), StateError> {
        self.open()?;
        let Some(mut stream) = self.open_streams.remove(inference_id) else {
            return Err(StateError::Stream(format!(
                "no stream for inference {inference_id:?} is open"
            )));
        };
        self.streams.end(inference_id);
        for (channel_id, params) in stream.take_owed() {
            match self.gate(ChannelsOutgoingComplete::NAME, &params) {
                Ok(()) => self.write_notification(ChannelsOutgoingComplete::NAME, params),
                Err(r) => self.diag(HostDiagnostic::OutgoingNotCompleted {
                    inference_id: inference_id.to_owned(),
                    channel_id,
                    detail: r.to_string(),
                }),
            }
        }
        Ok(())
    }
}
