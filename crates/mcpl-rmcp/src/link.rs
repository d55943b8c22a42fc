//! rmcp's end of the bridge's in-process channel ([`Link`]) and the routing of what rmcp
//! sends: its answers to the host's requests, its notifications and its own requests.

use std::future::Future;
use std::sync::Arc;

use mcpl::jsonrpc::ErrorObject;
use mcpl::server::SendError;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleServer;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::{clipped, lock, Outgoing, Shared};

/// Why the bridge refused a message rmcp sent.
#[derive(Debug)]
pub struct LinkError(pub(crate) String);

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LinkError {}

impl From<SendError> for LinkError {
    fn from(e: SendError) -> Self {
        LinkError(e.to_string())
    }
}

/// rmcp's end of the in-process channel: an rmcp `Transport` whose incoming side is the
/// bridge's queue (and the host's answers to rmcp's own requests, by a way of their own)
/// and whose outgoing side is the host, through the session.
pub(crate) struct Link {
    pub(crate) rx: mpsc::Receiver<ClientJsonRpcMessage>,
    /// The host's answers to rmcp's own requests ([`crate::QUEUE`] at most waiting), read first.
    /// Apart from the host's messages so that none takes the slot kept for
    /// `notifications/initialized`; no order binds them to the host's messages. Only `rx`
    /// ending ends the service.
    pub(crate) answers: mpsc::Receiver<ClientJsonRpcMessage>,
    /// Where the tasks waiting for those answers put them.
    pub(crate) answer: mpsc::Sender<ClientJsonRpcMessage>,
    pub(crate) shared: Arc<Shared>,
    /// This service's own requests to the host in flight.
    pub(crate) outgoing: Arc<Outgoing>,
}

impl rmcp::transport::Transport<RoleServer> for Link {
    type Error = LinkError;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let shared = self.shared.clone();
        let answer = self.answer.clone();
        let outgoing = self.outgoing.clone();
        async move { from_rmcp(shared, outgoing, answer, item).await }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        let Link { rx, answers, .. } = self;
        async move {
            tokio::select! {
                biased;
                Some(answer) = answers.recv() => Some(answer),
                m = rx.recv() => m,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.rx.close();
        self.answers.close();
        Ok(())
    }
}

fn error_object(e: rmcp::model::ErrorData) -> ErrorObject {
    let o = ErrorObject::new(i64::from(e.code.0), e.message);
    match e.data {
        Some(d) => o.with_data(d),
        None => o,
    }
}

/// The method and params of an rmcp request or notification, as the wire carries them.
pub(crate) fn method_and_params<T: serde::Serialize>(
    m: &T,
) -> Result<(String, Option<Value>), LinkError> {
    let v = serde_json::to_value(m).map_err(|e| LinkError(format!("cannot encode: {e}")))?;
    let method = v
        .get("method")
        .and_then(Value::as_str)
        .ok_or_else(|| LinkError("rmcp sent a message without a method".into()))?
        .to_owned();
    Ok((method, v.get("params").cloned()))
}

/// Routes one message rmcp sent: a response to the host's waiting request, a notification
/// or request to the host through the session's plain MCP senders.
async fn from_rmcp(
    shared: Arc<Shared>,
    outgoing: Arc<Outgoing>,
    answer: mpsc::Sender<ClientJsonRpcMessage>,
    item: ServerJsonRpcMessage,
) -> Result<(), LinkError> {
    let (id, answer) = match item {
        ServerJsonRpcMessage::Response(r) => {
            let v = serde_json::to_value(&r.result)
                .map_err(|e| ErrorObject::internal(format!("cannot encode rmcp's result: {e}")));
            (r.id, v)
        }
        ServerJsonRpcMessage::Error(e) => match e.id {
            Some(id) => (id, Err(error_object(e.error))),
            None => {
                tracing::warn!(
                    "rmcp sent an error with no id: {}",
                    clipped(&e.error.message)
                );
                return Ok(());
            }
        },
        ServerJsonRpcMessage::Notification(n) => {
            let (method, params) = method_and_params(&n.notification)?;
            if method == "notifications/cancelled" {
                // rmcp gives up one of its own requests: dropping the session's request
                // cancels it on the wire with the id the host saw.
                let id = params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(|v| serde_json::from_value(v.clone()).ok());
                if let Some(task) = id.and_then(|id| lock(&outgoing).remove(&id)) {
                    task.abort();
                }
                return Ok(());
            }
            return Ok(shared
                .session
                .send_mcp_notification(&method, params)
                .await?);
        }
        ServerJsonRpcMessage::Request(r) => {
            let (method, params) = method_and_params(&r.request)?;
            let id = r.id;
            let task_shared = shared.clone();
            let task_outgoing = outgoing.clone();
            let task_id = id.clone();
            let mut outgoing = lock(&outgoing);
            let task = tokio::spawn(async move {
                let out = task_shared.session.send_mcp_request(&method, params).await;
                lock(&task_outgoing).remove(&task_id);
                let reply = match out {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": task_id, "result": result}),
                    Err(e) => {
                        let e = match e {
                            SendError::Peer(mcpl::peer::PeerError::Remote(e)) => e,
                            other => ErrorObject::internal(other.to_string()),
                        };
                        json!({"jsonrpc": "2.0", "id": task_id, "error": e})
                    }
                };
                let reply = serde_json::from_value::<ClientJsonRpcMessage>(reply).or_else(|e| {
                    // rmcp's types refuse the host's answer: rmcp gets an error, not silence.
                    let e = ErrorObject::internal(format!("the host's answer to {method}: {e}"));
                    serde_json::from_value(json!({"jsonrpc": "2.0", "id": task_id, "error": e}))
                });
                match reply {
                    // Fails only once the service has ended.
                    Ok(reply) => {
                        let _ = answer.send(reply).await;
                    }
                    Err(e) => {
                        tracing::warn!("no answer for rmcp's {}: {}", clipped(&method), clipped(e))
                    }
                }
            });
            outgoing.insert(id, task.abort_handle());
            return Ok(());
        }
    };
    match lock(&shared.pending).take(&id) {
        Some((tx, _)) => {
            let _ = tx.send(answer);
        }
        None => tracing::debug!("rmcp answered request {id}, which no longer waits"),
    }
    Ok(())
}
