//! Inbound dispatch: readiness and grant checks at receipt (§5.3, §5.4), requests,
//! notifications and `push/event` (§9).

use super::*;

impl HostSession {
    /// The readiness and grant check of one inbound method (§5.3, §5.4). `seq` is the
    /// message's wire position: a widening that came later on the wire does not apply to it,
    /// however late it is handled. `Ok` carries the grant the message is judged under (for
    /// its feature-set check); `Err` the `-32002` error to answer.
    pub(super) fn admit(
        &self,
        method: &str,
        params: Option<&Value>,
        seq: u64,
    ) -> Result<Grant, ErrorObject> {
        let (ready, grant) = self.inner.state().in_force_for(seq);
        let req = policy::method_requirement(method, params).unwrap_or(Requirement::None);
        if req == Requirement::None {
            return Ok(grant);
        }
        if !ready {
            self.inner.diag(HostDiagnostic::PrivilegedBeforeReady {
                method: method.to_owned(),
            });
            let d = denied_of(&Grant::none(), req);
            return Err(d.map(|d| d.to_error()).unwrap_or_else(|| {
                ErrorObject::new(codes::CAPABILITY_DENIED, "Capability denied")
            }));
        }
        match denied_of(&grant, req) {
            None => Ok(grant),
            Some(d) => {
                self.inner.diag(HostDiagnostic::CapabilityDenied {
                    method: method.to_owned(),
                    capability: d.capability,
                });
                Err(d.to_error())
            }
        }
    }

    /// The admission of `channels/changed`. Before the session is ready it is refused like
    /// any privileged method (§5.3; nothing can be registered yet). Once ready, a grant
    /// lacking `channels.register` does not refuse it whole: a removal only narrows, so its
    /// `removed` entries still apply (§14.5, §6.7: reductions are respected whatever the
    /// carrier), while the judged grant, which lacks `channels.register`, rejects every
    /// addition and update item-wise as `capability_denied` (a Notification's are filtered
    /// with a diagnostic). Reading chosen where the spec is silent: removal wins over the
    /// whole-method refusal, never an addition.
    pub(super) fn admit_changed(
        &self,
        params: Option<&Value>,
        seq: u64,
    ) -> Result<Grant, ErrorObject> {
        let (ready, grant) = self.inner.state().in_force_for(seq);
        if ready && !grant.allows(Capability::ChannelsRegister) {
            return Ok(grant);
        }
        self.admit("channels/changed", params, seq)
    }

    pub(super) fn inbound_direction_ok(method: &str) -> bool {
        matches!(
            policy::method_direction(method),
            Some(Direction::ServerToHost) | Some(Direction::Either)
        )
    }

    pub(super) async fn on_request(&self, req: IncomingRequest) {
        let method = req.method().to_owned();
        let params = req.request().params.clone();
        if !Self::inbound_direction_ok(&method) {
            self.inner.diag(HostDiagnostic::UnexpectedMethod {
                method: method.clone(),
            });
            let _ = req
                .respond_error(ErrorObject::method_not_found(&method))
                .await;
            return;
        }
        let admitted = if method == "channels/changed" {
            self.admit_changed(params.as_ref(), req.seq())
        } else {
            self.admit(&method, params.as_ref(), req.seq())
        };
        let judged = match admitted {
            Ok(g) => g,
            Err(e) => {
                let _ = req.respond_error(e).await;
                return;
            }
        };
        let outcome = match method.as_str() {
            "ping" => Ok(json!({})),
            "push/event" => self.on_push(params.as_ref(), &judged),
            "channels/register" => self
                .on_register(params.as_ref(), false, &judged)
                .map(Some)
                .and_then(|r| r.ok_or_else(|| ErrorObject::internal("no result"))),
            "channels/changed" => self
                .on_changed(params.as_ref(), false, &judged)
                .and_then(|r| r.ok_or_else(|| ErrorObject::internal("no result"))),
            "channels/incoming" => self.on_incoming(params.as_ref()),
            "channels/list" => Ok(json!({
                "channels": self.inner.state().channels.values().cloned().collect::<Vec<_>>()
            })),
            "inference/request" | "model/info" => {
                if method == "inference/request" {
                    if let Err(e) = self.check_request_feature_set(params.as_ref(), &judged) {
                        let _ = req.respond_error(e).await;
                        return;
                    }
                }
                let streaming = method == "inference/request"
                    && params
                        .as_ref()
                        .and_then(|p| p.get("stream"))
                        .and_then(Value::as_bool)
                        == Some(true);
                if let (true, Some(h)) = (streaming, self.inner.config.stream_handler.clone()) {
                    // admit() required the streaming leaf for `stream: true` (§11.4).
                    let ended = Arc::new(AtomicBool::new(false));
                    let sink = ChunkSink {
                        session: self.clone(),
                        request_id: req.id().clone(),
                        next: 0,
                        ended: ended.clone(),
                    };
                    let p = params.unwrap_or(Value::Null);
                    tokio::spawn(async move {
                        let r = h(p, sink).await;
                        ended.store(true, Ordering::SeqCst);
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
                            next: 0,
                            ended: Arc::new(AtomicBool::new(false)),
                        });
                        tokio::spawn(async move {
                            let r = h(&method, p).await;
                            if let (Some(sink), Ok(result)) = (sink.as_mut(), &r) {
                                if let Some(text) = result_text(result) {
                                    if let Err(e) = sink.send(&text).await {
                                        tracing::debug!(error = %e, "single chunk not sent");
                                    }
                                }
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

    pub(super) fn on_notification(&self, n: Notification, seq: u64) {
        let method = n.method.clone();
        match method.as_str() {
            "mcpl/manifestChanged" => self.on_manifest_changed(n.params.as_ref()),
            "channels/changed" => {
                let judged = match self.admit_changed(n.params.as_ref(), seq) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "notification refused");
                        return;
                    }
                };
                if let Err(e) = self.on_changed(n.params.as_ref(), true, &judged) {
                    self.inner.diag(HostDiagnostic::BadParams {
                        method,
                        detail: e.message.into_owned(),
                    });
                }
            }
            "channels/register" => {
                let judged = match self.admit(&method, n.params.as_ref(), seq) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "notification refused");
                        return;
                    }
                };
                if let Err(e) = self.on_register(n.params.as_ref(), true, &judged) {
                    self.inner.diag(HostDiagnostic::BadParams {
                        method,
                        detail: e.message.into_owned(),
                    });
                }
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
                        self.inner.event(HostEvent::ManifestChange(r));
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
                } else if let Err(e) = self.admit(&method, n.params.as_ref(), seq) {
                    tracing::debug!(error = %e.message, "notification refused");
                } else {
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                }
            }
        }
    }

    /// Refuses a message carrying more items than `limit` (a documented, configurable bound).
    pub(super) fn over_limit(
        &self,
        method: &str,
        what: &str,
        count: usize,
        limit: usize,
    ) -> Option<ErrorObject> {
        (count > limit).then(|| {
            self.bad(
                method,
                &format!("{count} {what} exceed the limit of {limit} per message"),
            )
            .with_data(json!({ "limit": limit, "count": count }))
        })
    }

    pub(super) fn bad(&self, method: &str, detail: &str) -> ErrorObject {
        self.inner.diag(HostDiagnostic::BadParams {
            method: method.to_owned(),
            detail: detail.to_owned(),
        });
        ErrorObject::invalid_params(detail.to_owned())
    }

    pub(super) fn expand_tags(
        &self,
        method: &str,
        tags: Option<&Value>,
        ev: AdmittedEvent<'_>,
    ) -> ExpandedTags {
        let (set, issues): (TagSet, Vec<TagIssue>) = TagSet::from_json(tags);
        for i in issues {
            self.inner.diag(HostDiagnostic::TagIssue {
                method: method.to_owned(),
                issue: format!("{i:?}"),
            });
        }
        // Producer `implies` edges apply only under a standing acceptance bound to the
        // ontology's current digest (§16.3, §16.5).
        let ontology = ev
            .feature_set
            .and_then(|fs| self.current_accepted_ontology(fs));
        match &ontology {
            Some((onto, digest)) => {
                let fs = ev.feature_set.unwrap_or_default();
                match OntologyAcceptance::accept(ev.source, fs, digest.as_str())
                    .bind(onto, ev.source, fs, digest)
                {
                    Ok(accepted) => set.expand(&ev, &[accepted]),
                    Err(_) => set.expand(&ev, &[]),
                }
            }
            None => set.expand(&ev, &[]),
        }
    }

    /// The tag ontology of `feature_set` in the manifest in force, when its acceptance is
    /// standing (the accepted digest equals the current one), with that digest.
    pub(super) fn current_accepted_ontology(
        &self,
        feature_set: &str,
    ) -> Option<(TagOntology, String)> {
        let st = self.inner.state();
        let review = st.review.as_ref()?;
        let accepted = review.accepted_ontology(feature_set)?;
        let value = review
            .manifest()
            .get("featureSets")?
            .get(feature_set)?
            .get("tagOntology")?;
        let current = crate::manifest::ontology_digest(value).ok()?;
        if current != accepted {
            return None;
        }
        let (onto, _issues) = TagOntology::parse(value).ok()?;
        Some((onto, current))
    }

    /// `push/event` (§9): required members, feature set, dedupe, delivery. Its feature set judged under `judged`, the grant the message is
    /// judged under (see [`Self::admit`]).
    pub(super) fn on_push(
        &self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        const M: &str = "push/event";
        // §9.2 (timestamp ISO 8601, payload.content ContentBlock[] of App. B.1, origin an
        // object), by the rule `mcpl check` reports.
        let defects = crate::protocol::push::push_event_defects(params);
        if !defects.is_empty() {
            return Err(self.bad(M, &defects.join("; ")));
        }
        let p = params
            .and_then(Value::as_object)
            .ok_or_else(|| self.bad(M, "params is not an object"))?;
        let s = |k: &str| p.get(k).and_then(Value::as_str);
        let fs = s("featureSet").ok_or_else(|| self.bad(M, "featureSet is required"))?;
        let event_id = s("eventId").ok_or_else(|| self.bad(M, "eventId is required"))?;
        // §9.4 dedupe remembers ids: their length is bounded before anything is stored.
        let id_limit = self.inner.config.max_event_id_bytes;
        if event_id.len() > id_limit {
            let detail = format!(
                "eventId of {} bytes exceeds the limit of {id_limit}",
                event_id.len()
            );
            return Err(self
                .bad(M, &detail)
                .with_data(json!({ "limit": id_limit, "length": event_id.len() })));
        }
        {
            let st = self.inner.state();
            let Some(review) = st.review.as_ref() else {
                return Err(ErrorObject::unknown_feature_set(fs));
            };
            let statuses = review.statuses_under(judged);
            let required = Requirement::One(Capability::PushEvents);
            if let Err(r) = policy::feature_set_gate(review.declarations(), &statuses, fs, required)
            {
                drop(st);
                return Err(self.set_refused(M, fs, r));
            }
            if st.seen_events.contains(event_id) {
                drop(st);
                self.inner.diag(HostDiagnostic::DuplicateEvent {
                    event_id: event_id.to_owned(),
                });
                return Ok(json!({ "accepted": true, "reason": "duplicate" }));
            }
        }
        let label = self.label();
        let tags = self.expand_tags(
            M,
            p.get("tags"),
            AdmittedEvent {
                source: &label,
                feature_set: Some(fs),
                channel: None,
            },
        );
        let delivered = self.inner.event(HostEvent::Push {
            params: Value::Object(p.clone()),
            feature_set: fs.to_owned(),
            event_id: event_id.to_owned(),
            tags,
        });
        if !delivered {
            return Ok(json!({ "accepted": false, "reason": "host_busy" }));
        }
        let mut st = self.inner.state();
        let id: Arc<str> = Arc::from(event_id);
        st.seen_events.insert(id.clone());
        st.seen_order.push_back(id);
        while st.seen_order.len() > self.inner.config.dedupe_window.max(1) {
            if let Some(old) = st.seen_order.pop_front() {
                st.seen_events.remove(&old);
            }
        }
        Ok(json!({ "accepted": true }))
    }

    /// `inference/request` names its `featureSet` (§11.1): undeclared `-32003`, unavailable
    /// `-32001` — after the grant allowed the method, so it can only narrow.
    pub(super) fn check_request_feature_set(
        &self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<(), ErrorObject> {
        const M: &str = "inference/request";
        // §11.2, by the rule `mcpl check` reports.
        let defects = crate::protocol::inference::request_defects(params);
        if !defects.is_empty() {
            return Err(self.bad(M, &defects.join("; ")));
        }
        let fs = params
            .and_then(|p| p.get("featureSet"))
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad(M, "featureSet is required"))?;
        let gate = {
            let st = self.inner.state();
            let Some(r) = st.review.as_ref() else {
                return Err(ErrorObject::unknown_feature_set(fs));
            };
            let req = policy::method_requirement(M, params).unwrap_or(Requirement::None);
            policy::feature_set_gate(r.declarations(), &r.statuses_under(judged), fs, req)
        };
        gate.map_err(|r| self.set_refused(M, fs, r))
    }

    /// The error for a use [`policy::feature_set_gate`] refused (§6.6); §6.4 rule 2: a use
    /// the exercising set did not declare is also a declaration-mismatch diagnostic, and its
    /// `-32002` names the capability exercised and the set that failed to declare it.
    pub(super) fn set_refused(
        &self,
        method: &str,
        feature_set: &str,
        refusal: SetRefusal,
    ) -> ErrorObject {
        if let SetRefusal::Undeclared(missing) = refusal {
            self.inner.diag(HostDiagnostic::DeclarationMismatch {
                method: method.to_owned(),
                feature_set: feature_set.to_owned(),
                missing: missing.sorted_paths(),
            });
        }
        refusal.to_error(feature_set)
    }
}
