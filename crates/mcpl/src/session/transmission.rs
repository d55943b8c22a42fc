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
    /// The answers to one batch the machine read (JSON-RPC 2.0 §6), written as one array,
    /// as the async peer writes them: only `handle_frame` writes it
    /// ([`HostState::handle_frame`](super::HostState::handle_frame),
    /// [`ServerState::handle_frame`](super::ServerState::handle_frame)), with at least one
    /// answer (an array even of one, as the peer writes it), when every answer the batch is
    /// owed was produced while it was read.
    Batch(Vec<Response>),
}

impl Transmission {
    /// The frame as one line of JSON text, as it goes on the wire.
    pub fn to_json(&self) -> String {
        match self {
            Transmission::Message(m) => m.to_json(),
            Transmission::Notification { method, params } => params.notification(method),
            Transmission::Result { id, result } => result.response(id),
            Transmission::Batch(answers) => {
                let mut text = String::from("[");
                for (i, r) in answers.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&Message::Response(r.clone()).to_json());
                }
                text.push(']');
                text
            }
        }
    }

    /// Every message the frame holds, in order: one, or each answer of a
    /// [`Transmission::Batch`].
    pub fn to_messages(&self) -> Vec<Message> {
        match self {
            Transmission::Batch(answers) => {
                answers.iter().cloned().map(Message::Response).collect()
            }
            _ => vec![self.to_message()],
        }
    }

    /// The frame as a [`Message`] (an encoded one read back through its text), for a caller
    /// that inspects what goes out rather than writing it. A [`Transmission::Batch`] holds
    /// several: it reads back as its first answer (each is in [`Self::to_messages`]); an
    /// empty one, which no machine writes, as a `-32603` under `null`.
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
            Transmission::Batch(answers) => {
                Message::Response(answers.first().cloned().unwrap_or(Response {
                    id: None,
                    outcome: Err(crate::jsonrpc::ErrorObject::internal(
                        "an empty batch of answers",
                    )),
                }))
            }
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

    /// JSON-RPC 2.0 §6: a batch's answers are one array of response objects, in order;
    /// each reads back as its message.
    #[test]
    fn a_batch_is_one_array_of_its_answers() {
        let answers = vec![
            Response {
                id: Some(RequestId::Number(1.into())),
                outcome: Ok(json!({})),
            },
            Response {
                id: None,
                outcome: Err(crate::jsonrpc::ErrorObject::invalid_request_because(
                    "empty batch",
                )),
            },
        ];
        let t = Transmission::Batch(answers.clone());
        let text: serde_json::Value = serde_json::from_str(&t.to_json()).expect("JSON");
        let each: Vec<serde_json::Value> = answers
            .iter()
            .map(|r| Message::Response(r.clone()).to_value())
            .collect();
        assert_eq!(text, serde_json::Value::Array(each));
        let back: Vec<Message> = answers.into_iter().map(Message::Response).collect();
        assert_eq!(t.to_messages(), back);
        assert_eq!(t.to_message(), back[0]);
    }

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
