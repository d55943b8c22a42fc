//! Inbound dispatch: readiness and grant checks at receipt (§5.3, §5.4), requests,
//! notifications and `push/event` (§9).

use super::*;
use crate::protocol::channels::{
    ChannelsChanged, ChannelsIncoming, ChannelsList, ChannelsRegister,
};
use crate::protocol::handshake::Ping;
use crate::protocol::inference::InferenceRequest;
use crate::protocol::manifest::ManifestChanged;
use crate::protocol::model::ModelInfoRequest;
use crate::protocol::push::PushEvent;

impl HostSession {
    /// The readiness and grant check of one inbound method (§5.3, §5.4), by the one
    /// admission rule ([`crate::session::admit`]), under the state in force now: the dispatch
    /// loop handles messages and receipts in wire order, so that is the state in force where
    /// the message was read. `Ok` carries the grant the message is judged under (for its
    /// feature-set check); `Err` the error to answer.
    pub(super) fn admit(&self, method: &str, params: Option<&Value>) -> Result<Grant, ErrorObject> {
        let (ready, grant) = {
            let st = self.inner.state();
            (st.ready, st.grant)
        };
        match session::admit_at_host(method, params, ready, &grant) {
            Ok(_) => Ok(grant),
            Err(r) => {
                match r {
                    Refusal::NotReceived => self.inner.diag(HostDiagnostic::UnexpectedMethod {
                        method: method.to_owned(),
                    }),
                    Refusal::NotReady(_) => {
                        self.inner.diag(HostDiagnostic::PrivilegedBeforeReady {
                            method: method.to_owned(),
                        })
                    }
                    Refusal::Denied(d) => self.inner.diag(HostDiagnostic::CapabilityDenied {
                        method: method.to_owned(),
                        capability: d.capability,
                    }),
                }
                Err(r.to_error(method))
            }
        }
    }

    pub(super) fn inbound_direction_ok(method: &str) -> bool {
        Receiver::Host.receives(method)
    }

    pub(super) async fn on_request(&self, req: IncomingRequest) {
        let method = req.method().to_owned();
        let params = req.request().params.clone();
        // Direction, readiness and grant: the one admission rule (`Self::admit`).
        let admitted = self.admit(&method, params.as_ref());
        let judged = match admitted {
            Ok(g) => g,
            Err(e) => {
                let _ = req.respond_error(e).await;
                return;
            }
        };
        let outcome = match method.as_str() {
            Ping::NAME => Ok(json!({})),
            PushEvent::NAME => self.on_push(params.as_ref(), &judged),
            ChannelsRegister::NAME => self.on_register(params.as_ref(), false, &judged),
            ChannelsChanged::NAME => self.on_changed(params.as_ref(), false, &judged),
            ChannelsIncoming::NAME => self.on_incoming(params.as_ref()),
            ChannelsList::NAME => Ok(self.inner.state().channels.list()),
            InferenceRequest::NAME | ModelInfoRequest::NAME => {
                if method == InferenceRequest::NAME {
                    if let Err(e) = self.check_request_feature_set(params.as_ref(), &judged) {
                        let _ = req.respond_error(e).await;
                        return;
                    }
                }
                let streaming =
                    method == InferenceRequest::NAME && rules::is_streamed(params.as_ref());
                if let (true, Some(h)) = (streaming, self.inner.config.stream_handler.clone()) {
                    // admit() required the streaming leaf for `stream: true` (§11.4).
                    let ended = Arc::new(AtomicBool::new(false));
                    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
                    let sink = ChunkSink {
                        session: self.clone(),
                        request_id: req.id().clone(),
                        sent: sent.clone(),
                        ended: ended.clone(),
                    };
                    let mut owed = ChunkSink {
                        session: self.clone(),
                        request_id: req.id().clone(),
                        sent,
                        ended: Arc::new(AtomicBool::new(false)),
                    };
                    let p = params.unwrap_or(Value::Null);
                    tokio::spawn(async move {
                        let r = h(p, sink).await.and_then(rules::checked_inference_result);
                        ended.store(true, Ordering::SeqCst);
                        owed.send_owed(&r).await;
                        let _ = req.finish(r).await;
                    });
                    return;
                }
                match self.inner.config.request_handler.clone() {
                    None => Err(ErrorObject::method_not_found(&method)),
                    Some(h) => {
                        // Answered from its own task so the connection keeps flowing.
                        let p = params.unwrap_or(Value::Null);
                        // §11.4 without a stream handler: the final text goes out as one
                        // chunk before the response, so a streamed request still gets its
                        // chunks.
                        let mut sink = streaming.then(|| ChunkSink {
                            session: self.clone(),
                            request_id: req.id().clone(),
                            sent: Arc::default(),
                            ended: Arc::new(AtomicBool::new(false)),
                        });
                        tokio::spawn(async move {
                            let r = h(&method, p).await;
                            let r = match method.as_str() {
                                InferenceRequest::NAME => {
                                    r.and_then(rules::checked_inference_result)
                                }
                                _ => r,
                            };
                            if let Some(sink) = sink.as_mut() {
                                sink.send_owed(&r).await;
                            }
                            let _ = req.finish(r).await;
                        });
                        return;
                    }
                }
            }
            _ => Err(ErrorObject::method_not_found(&method)),
        };
        let _ = req.finish(outcome).await;
    }

    pub(super) fn on_notification(&self, n: Notification) {
        let method = n.method.clone();
        match method.as_str() {
            ManifestChanged::NAME => self.on_manifest_changed(n.params.as_ref()),
            ChannelsChanged::NAME | ChannelsRegister::NAME => {
                let judged = match self.admit(&method, n.params.as_ref()) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "notification refused");
                        return;
                    }
                };
                // Applied as a Request would be (§14.3, §14.5); a refusal has no one to
                // answer and the channel table already reported it.
                let _ = if method == ChannelsChanged::NAME {
                    self.on_changed(n.params.as_ref(), true, &judged)
                } else {
                    self.on_register(n.params.as_ref(), true, &judged)
                };
            }
            m if m.starts_with("notifications/") => {
                if let Some(surface) = m
                    .strip_prefix("notifications/")
                    .and_then(|s| s.strip_suffix("/list_changed"))
                {
                    let r = self
                        .inner
                        .state()
                        .review
                        .as_mut()
                        .and_then(|r| r.surface_changed(surface));
                    if let Some(r) = r {
                        self.inner.event_or_report(HostEvent::ManifestChange(r));
                    }
                } else {
                    // An MCP notification the host session does not act on: reported, not
                    // silently dropped.
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                }
            }
            _ => {
                if !Self::inbound_direction_ok(&method) {
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                } else if let Err(e) = self.admit(&method, n.params.as_ref()) {
                    tracing::debug!(error = %e.message, "notification refused");
                } else {
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                }
            }
        }
    }

    /// Reports judgement diagnostics, in order.
    pub(super) fn report(&self, diags: rules::Diagnostics) {
        for d in diags {
            self.inner.diag(d);
        }
    }

    /// `push/event` (§9), judged by [`rules::judge_push`] under `judged`, the grant the
    /// message is judged under (see [`Self::admit`]); delivered, then remembered for dedupe.
    pub(super) fn on_push(
        &self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let label = self.label();
        let mut diags = Vec::new();
        let verdict = {
            let st = self.inner.state();
            let limits = rules::PushLimits {
                max_event_id_bytes: self.inner.config.max_event_id_bytes,
            };
            rules::judge_push(
                &mut diags,
                params,
                judged,
                st.review.as_ref(),
                &st.seen_events,
                limits,
                &label,
            )
        };
        self.report(diags);
        let (event, event_id) = match verdict? {
            PushVerdict::Deliver { event, event_id } => (event, event_id),
            PushVerdict::Duplicate => return Ok(rules::duplicate_answer()),
        };
        let delivered = self.inner.event(event);
        if delivered {
            self.inner
                .state()
                .seen_events
                .remember(&event_id, self.inner.config.dedupe_window);
        }
        Ok(rules::push_answer(delivered))
    }

    /// `inference/request`'s feature set (§11.1), by [`rules::check_inference_feature_set`].
    pub(super) fn check_request_feature_set(
        &self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<(), ErrorObject> {
        let mut diags = Vec::new();
        let r = {
            let st = self.inner.state();
            rules::check_inference_feature_set(&mut diags, params, judged, st.review.as_ref())
        };
        self.report(diags);
        r
    }
}
