//! [`Transmission`]: one frame a state machine asks its driver to write.

use crate::jsonrpc::{Encoded, Message, Notification, RequestId, Response};

/// One frame to write to the peer, in the order the machine output it. Every frame comes
/// out as [`HostOutput::Transmit`](super::HostOutput::Transmit) or
/// [`ServerOutput::Transmit`](super::ServerOutput::Transmit), whatever its form, so a
/// driver that handles that one variant writes them all.
#[derive(Debug, Clone, PartialEq)]
pub enum Transmission {
    /// A message built as one.
    Message(Message),
    /// A notification whose params the session encoded straight from their type (the
    /// host's `inference/lifecycle`): no `Value` tree in between.
    Notification {
        /// Its method.
        method: &'static str,
        /// Its params.
        params: Encoded,
    },
    /// The answer to request `id` with a result the application encoded
    /// ([`ServerState::answer_encoded`](super::ServerState::answer_encoded)).
    Result {
        /// The request answered.
        id: RequestId,
        /// Its result.
        result: Encoded,
    },
}

impl Transmission {
    /// The frame as one line of JSON text, as it goes on the wire.
    pub fn to_json(&self) -> String {
        match self {
            Transmission::Message(m) => m.to_json(),
            Transmission::Notification { method, params } => params.notification(method),
            Transmission::Result { id, result } => result.response(id),
        }
    }

    /// The frame as a [`Message`] (an encoded one read back through its text), for a caller
    /// that inspects what goes out rather than writing it.
    pub fn to_message(&self) -> Message {
        match self {
            Transmission::Message(m) => m.clone(),
            Transmission::Notification { method, params } => Message::Notification(Notification {
                method: (*method).to_owned(),
                params: params.to_value().ok(),
            }),
            Transmission::Result { id, result } => Message::Response(Response {
                id: Some(id.clone()),
                outcome: result
                    .to_value()
                    .map_err(|e| crate::jsonrpc::ErrorObject::internal(e.to_string())),
            }),
        }
    }
}

impl From<Message> for Transmission {
    fn from(m: Message) -> Transmission {
        Transmission::Message(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each form reads back as the message its text is.
    #[test]
    fn every_form_reads_back_as_its_text() {
        let params =
            Encoded::encode(&json!({"inferenceId": "i", "phase": "started"})).expect("encodes");
        let result = Encoded::encode(&json!({"content": []})).expect("encodes");
        let forms = [
            Transmission::Message(Message::Notification(Notification {
                method: "ping".into(),
                params: None,
            })),
            Transmission::Notification {
                method: "inference/lifecycle",
                params,
            },
            Transmission::Result {
                id: RequestId::Number(7.into()),
                result,
            },
        ];
        for t in forms {
            let parsed = Message::parse(&t.to_json()).expect("one message");
            assert_eq!(parsed, t.to_message(), "{t:?}");
        }
    }
}
