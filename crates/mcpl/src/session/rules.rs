//! The host's inbound judgements over plain data: `push/event` admission and dedupe (§9),
//! the `inference/request` feature-set check (§11.1), tag expansion (§16.3, §16.5) and the
//! feature-set refusal (§6.4 rule 2, §6.6). Every host decides through these: the async
//! `host::HostSession` and the sans-I/O [`HostState`](super::HostState). Diagnostics go to
//! the caller's sink, never dropped.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{json, Value};

use super::HostDiagnostic;
use crate::capability::{Capability, Grant, Requirement};
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::manifest::review::ManifestReview;
use crate::policy::{self, SetRefusal};
use crate::protocol::inference::InferenceRequest;
use crate::protocol::push::PushEvent;
use crate::protocol::Method as _;
use crate::tags::{AdmittedEvent, ExpandedTags, OntologyAcceptance, TagOntology, TagSet};

/// Where a judgement's diagnostics go.
pub type Diagnostics = Vec<HostDiagnostic>;

/// A `-32602` for `method` with `detail` (clipped as a diagnostic's text is), reported as
/// [`HostDiagnostic::BadParams`].
pub fn bad_params(diags: &mut Diagnostics, method: &str, detail: &str) -> ErrorObject {
    // Bounded as the diagnostic is ([`super::clip_text`]): the detail may quote the peer.
    let mut detail = detail.to_owned();
    super::clip_text(&mut detail);
    diags.push(HostDiagnostic::BadParams {
        method: method.to_owned(),
        detail: detail.clone(),
    });
    ErrorObject::invalid_params(detail)
}

/// The error for a use [`policy::feature_set_gate`] refused (§6.6); a use the exercising set
/// did not declare is also a [`HostDiagnostic::DeclarationMismatch`] (§6.4 rule 2).
pub fn set_refused(
    diags: &mut Diagnostics,
    method: &str,
    feature_set: &str,
    refusal: SetRefusal,
) -> ErrorObject {
    if let SetRefusal::Undeclared(missing) = &refusal {
        diags.push(HostDiagnostic::DeclarationMismatch {
            method: method.to_owned(),
            feature_set: feature_set.to_owned(),
            missing: missing.sorted_paths(),
        });
    }
    refusal.to_error(feature_set)
}

/// The feature-set step of a host's answer to a feature-set-tagged server request
/// (`push/event`, `inference/request`), run after admission, so it can only narrow: the
/// `featureSet` the params name (§6.5; missing: `-32602`), gated by
/// [`policy::feature_set_gate`] under the declarations `decls` and the statuses `statuses`
/// in force for what the method exercises (§6.4 rule 2, §6.6). Every host and the
/// checkers' strict hosts answer by it.
pub fn gate_tagged_request(
    diags: &mut Diagnostics,
    method: &str,
    params: Option<&Value>,
    decls: &policy::FeatureSets,
    statuses: &std::collections::BTreeMap<String, policy::FeatureSetStatus>,
) -> Result<(), ErrorObject> {
    let Some(fs) = params
        .and_then(|p| p.get("featureSet"))
        .and_then(Value::as_str)
    else {
        return Err(bad_params(diags, method, "featureSet is required"));
    };
    let req = policy::method_requirement(method, params).unwrap_or(Requirement::None);
    policy::feature_set_gate(decls, statuses, fs, req)
        .map_err(|refusal| set_refused(diags, method, fs, refusal))
}

/// The tag ontology of `feature_set` in the manifest in force, when its acceptance is
/// standing (the accepted digest equals the current one, §16.5), with that digest. A copy:
/// [`expand_tags`] borrows it instead, as a per-event copy would cost the ontology's size.
pub fn accepted_ontology(
    review: Option<&ManifestReview>,
    feature_set: &str,
) -> Option<(TagOntology, String)> {
    let (onto, digest) = review?.standing_ontology(feature_set)?;
    Some((onto.clone(), digest.to_owned()))
}

/// Expands a message's `tags` (§16.3): producer `implies` edges apply only under a standing
/// acceptance of the declaring set's ontology (§16.5). Tag issues are reported (as many as
/// [`crate::protocol::listed_defects`] lists, the rest counted), never a refusal (§16.6:
/// admission is decided before tags are read).
pub fn expand_tags(
    diags: &mut Diagnostics,
    review: Option<&ManifestReview>,
    method: &str,
    tags: Option<&Value>,
    ev: AdmittedEvent<'_>,
) -> ExpandedTags {
    let (set, issues) = TagSet::from_json(tags);
    // As many reported as a defect list names, the rest counted in one more (one message
    // may carry millions).
    let listed = crate::protocol::listed_defects(issues.iter().map(ToString::to_string));
    for issue in listed {
        diags.push(HostDiagnostic::TagIssue {
            method: method.to_owned(),
            issue,
        });
    }
    // Borrowed, never cloned: an event's cost must not grow with the accepted ontology
    // (a copy per event made each small push cost megabytes; `host_ontology_per_event.rs`).
    let ontology = ev
        .feature_set
        .and_then(|fs| review?.standing_ontology(fs).map(|(o, d)| (fs, o, d)));
    match ontology {
        Some((fs, onto, digest)) => {
            match OntologyAcceptance::accept(ev.source, fs, digest)
                .bind(onto, ev.source, fs, digest)
            {
                Ok(accepted) => set.expand(&ev, &[accepted]),
                Err(_) => set.expand(&ev, &[]),
            }
        }
        None => set.expand(&ev, &[]),
    }
}

/// The `push/event` ids a host remembers (§9.4), each stored once and forgotten oldest
/// first past the window.
#[derive(Debug, Default)]
pub struct Dedupe {
    seen: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
}

impl Dedupe {
    /// Whether `event_id` was delivered within the window.
    pub fn contains(&self, event_id: &str) -> bool {
        self.seen.contains(event_id)
    }

    /// Remembers a delivered `event_id`, keeping at most `window` (at least 1).
    pub fn remember(&mut self, event_id: &str, window: usize) {
        let id: Arc<str> = Arc::from(event_id);
        if !self.seen.insert(id.clone()) {
            return;
        }
        self.order.push_back(id);
        while self.order.len() > window.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }
}

/// What [`judge_push`] decided for an admitted `push/event`.
#[derive(Debug, Clone, PartialEq)]
pub enum PushVerdict {
    /// Hand `event` (a [`HostEvent::Push`](super::HostEvent::Push)) to the application; once taken,
    /// [`Dedupe::remember`] `event_id`, and answer with [`push_answer`].
    Deliver {
        /// The event.
        event: super::HostEvent,
        /// Its `eventId`.
        event_id: String,
    },
    /// Already delivered (§9.4): answer `accepted: true, reason: "duplicate"`; reported as
    /// [`HostDiagnostic::DuplicateEvent`].
    Duplicate,
}

/// The answer to a delivered `push/event` (`delivered`: the application took it; otherwise
/// `accepted: false, reason: "host_busy"`, never blocking the connection).
pub fn push_answer(delivered: bool) -> Value {
    if delivered {
        json!({ "accepted": true })
    } else {
        json!({ "accepted": false, "reason": "host_busy" })
    }
}

/// The answer to a duplicate `push/event` (§9.4: acknowledged, not redelivered).
pub fn duplicate_answer() -> Value {
    json!({ "accepted": true, "reason": "duplicate" })
}

/// The limits a host judges `push/event` under.
#[derive(Debug, Clone, Copy)]
pub struct PushLimits {
    /// The longest `eventId` remembered for dedupe, in bytes (§9.4 sets no length).
    pub max_event_id_bytes: usize,
}

/// Judges one admitted `push/event` (§9) under `judged`, the grant in force where it was
/// read: shape (§9.2), `eventId` length, the feature-set gate (§6.6) and dedupe (§9.4).
/// `source` is the host's id for the server (the tag expansion's `source`).
pub fn judge_push(
    diags: &mut Diagnostics,
    params: Option<&Value>,
    judged: &Grant,
    review: Option<&ManifestReview>,
    dedupe: &Dedupe,
    limits: PushLimits,
    source: &str,
) -> Result<PushVerdict, ErrorObject> {
    const M: &str = PushEvent::NAME;
    let defects = crate::protocol::push::push_event_defects(params);
    if !defects.is_empty() {
        return Err(bad_params(diags, M, &defects.join("; ")));
    }
    let Some(p) = params.and_then(Value::as_object) else {
        return Err(bad_params(diags, M, "params is not an object"));
    };
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let Some(fs) = s("featureSet") else {
        return Err(bad_params(diags, M, "featureSet is required"));
    };
    let Some(event_id) = s("eventId") else {
        return Err(bad_params(diags, M, "eventId is required"));
    };
    let id_limit = limits.max_event_id_bytes;
    if event_id.len() > id_limit {
        let detail = format!(
            "eventId of {} bytes exceeds the limit of {id_limit}",
            event_id.len()
        );
        return Err(bad_params(diags, M, &detail)
            .with_data(json!({ "limit": id_limit, "length": event_id.len() })));
    }
    let Some(r) = review else {
        return Err(ErrorObject::unknown_feature_set(fs));
    };
    gate_tagged_request(
        diags,
        M,
        params,
        r.declarations(),
        &r.statuses_under(judged),
    )?;
    if dedupe.contains(event_id) {
        diags.push(HostDiagnostic::DuplicateEvent {
            event_id: event_id.to_owned(),
        });
        return Ok(PushVerdict::Duplicate);
    }
    let tags = expand_tags(
        diags,
        review,
        M,
        p.get("tags"),
        AdmittedEvent {
            source,
            feature_set: Some(fs),
            channel: None,
        },
    );
    Ok(PushVerdict::Deliver {
        event: super::HostEvent::Push {
            params: Value::Object(p.clone()),
            feature_set: fs.to_owned(),
            event_id: event_id.to_owned(),
            tags,
        },
        event_id: event_id.to_owned(),
    })
}

/// The server's answer to a host request other than `initialize` or `ping` before
/// `initialize` (MCP's lifecycle): `-32600`, naming the method (cut to
/// [`super::DIAGNOSTIC_TEXT_BYTES`], as the host chose it). The server session and
/// `mcpl check-host` answer by it.
pub fn before_initialize(method: &str) -> ErrorObject {
    let mut method = method.to_owned();
    super::clip_text(&mut method);
    ErrorObject::invalid_request(format!("{method} before initialize"))
}

/// The host application's `inference/request` result, checked before it is sent (§11.3, by
/// [`crate::protocol::inference::result_defects`]): a malformed one is the application's
/// mistake, answered `-32603` in its place so the server never reads it (and reported by
/// [`HostState::answer`](super::HostState::answer) as `HostDiagnostic::AnswerReplaced`).
pub fn checked_inference_result(result: Value) -> Result<Value, ErrorObject> {
    let (fails, _warnings) = crate::protocol::inference::result_defects(&result);
    if fails.is_empty() {
        return Ok(result);
    }
    let detail = format!(
        "the host application's inference/request result is malformed (§11.3): {}; return \
         {{content: string, finishReason: one of App. B.4's, ...}}",
        fails.join("; ")
    );
    Err(ErrorObject::internal(detail))
}

/// Whether `inference/request` params ask for a stream (§11.4: `stream: true`).
pub fn is_streamed(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("stream"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// The `inference/chunk` params of chunk `index` of request `request_id` (§11.4).
pub fn chunk_params(request_id: &RequestId, index: u64, delta: &str) -> Value {
    json!({ "requestId": request_id.to_value(), "index": index, "delta": delta })
}

/// The one chunk owed before the response to a streamed `inference/request` that got none
/// (§11.4: with `stream: true` the host sends chunks before the final response): the
/// result's generated text (§11.3 `content`: a string, or its text blocks joined); `None`
/// when chunks were sent already or there is no text.
pub fn owed_chunk(chunks_sent: u64, result: &Value) -> Option<String> {
    if chunks_sent > 0 {
        return None;
    }
    let text = match result.get("content")? {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// `inference/request` names its `featureSet` (§11.1, §11.2): a malformed request `-32602`,
/// an undeclared set `-32003`, an unavailable one `-32001` — after the grant allowed the
/// method, so it can only narrow.
pub fn check_inference_feature_set(
    diags: &mut Diagnostics,
    params: Option<&Value>,
    judged: &Grant,
    review: Option<&ManifestReview>,
) -> Result<(), ErrorObject> {
    const M: &str = InferenceRequest::NAME;
    let defects = crate::protocol::inference::request_defects(params);
    if !defects.is_empty() {
        return Err(bad_params(diags, M, &defects.join("; ")));
    }
    let Some(fs) = params
        .and_then(|p| p.get("featureSet"))
        .and_then(Value::as_str)
    else {
        return Err(bad_params(diags, M, "featureSet is required"));
    };
    let Some(r) = review else {
        return Err(ErrorObject::unknown_feature_set(fs));
    };
    gate_tagged_request(
        diags,
        M,
        params,
        r.declarations(),
        &r.statuses_under(judged),
    )
}

/// How a policy Request (§5.3, §6.7) was answered, as a host driver saw it.
#[derive(Debug, Clone)]
pub enum PolicyAnswer {
    /// A result, read by [`read_receipt`] (`None`: unusable).
    Receipt(Option<crate::policy::Receipt>),
    /// `-32601`: a server predating MCPL 0.5.
    MethodNotFound,
    /// No answer within the policy timeout.
    Timeout,
    /// Any other error.
    Failed(String),
}

/// The decision on the initial policy Request (§5.3), each outcome failing closed.
#[derive(Debug, Clone, PartialEq)]
pub enum InitialDecision {
    /// An accepting receipt: MCPL is in force.
    Mcpl(crate::policy::Receipt),
    /// A refusal with `fallback: "close"`: the connection ends.
    Close,
    /// MCP-only, for the recorded reason.
    McpOnly(super::McpOnlyReason),
}

impl InitialDecision {
    /// Whether the server chose this outcome itself (a `-32601`, a refusal naming
    /// `mcp-only`): a grant reduction is then not told again.
    pub fn server_named_it(&self) -> bool {
        matches!(
            self,
            InitialDecision::McpOnly(
                super::McpOnlyReason::PolicyMethodNotFound | super::McpOnlyReason::Refused
            )
        )
    }
}

/// Parses a receipt (§6.7), reporting its defects; `None` when unusable. Reads at most
/// [`crate::manifest::DEFAULT_MAX_FEATURE_SETS`] `unavailableFeatures` entries
/// ([`read_receipt_within`]).
pub fn read_receipt(diags: &mut Diagnostics, v: &Value) -> Option<crate::policy::Receipt> {
    read_receipt_within(diags, v, crate::manifest::DEFAULT_MAX_FEATURE_SETS)
}

/// The most heap a policy receipt's parsed JSON may take (`jsonrpc::held_bytes`):
/// 4 MiB. A host keeps the last usable receipt for the connection's life (and its driver
/// a copy for its getters); a larger one is unusable, refused with the one defect
/// `receipt_too_large` before it is read (fail closed, as any unusable receipt). A
/// conforming receipt names at most one entry per declared feature set (about 1 MB at
/// 1,024 sets); before, a receipt's free-form `notes` were kept whatever they held (a
/// 16 MiB receipt some 128 MiB parsed, kept twice).
pub const MAX_RECEIPT_BYTES: usize = 4 * 1024 * 1024;

/// [`read_receipt`] for a host reading at most `max_entries` feature sets in a manifest:
/// a receipt whose `unavailableFeatures` holds more entries than that names sets the host
/// never read (§6.7: one entry per degraded declared set), so it is unusable, refused with
/// the one defect `unavailable_features_too_many` before any entry is read (fail closed, as
/// any unusable receipt). The defects are reported as a refusal's are listed
/// ([`crate::protocol::MAX_LISTED_DEFECTS`], then one `defects_not_listed` counting the
/// rest): a receipt of 100,000 malformed entries was 100,000 diagnostics, each logged.
pub fn read_receipt_within(
    diags: &mut Diagnostics,
    v: &Value,
    max_entries: usize,
) -> Option<crate::policy::Receipt> {
    if let Some(entries) = v.get("unavailableFeatures").and_then(Value::as_array) {
        if entries.len() > max_entries {
            diags.push(HostDiagnostic::ReceiptDefect {
                code: "unavailable_features_too_many",
                path: format!(
                    "/unavailableFeatures: {} entries exceed the limit of {max_entries}",
                    entries.len()
                ),
            });
            return None;
        }
    }
    let size = crate::jsonrpc::held_bytes(v);
    if size > MAX_RECEIPT_BYTES {
        diags.push(HostDiagnostic::ReceiptDefect {
            code: "receipt_too_large",
            path: format!("(receipt): {size} bytes parsed exceed the limit of {MAX_RECEIPT_BYTES}"),
        });
        return None;
    }
    let report = policy::parse_receipt(v);
    let listed = crate::protocol::MAX_LISTED_DEFECTS;
    let more = report.defects.len().saturating_sub(listed);
    for d in report.defects.into_iter().take(listed) {
        diags.push(HostDiagnostic::ReceiptDefect {
            code: d.code,
            path: d.path,
        });
    }
    if more > 0 {
        diags.push(HostDiagnostic::ReceiptDefect {
            code: "defects_not_listed",
            path: format!("… and {more} more not listed"),
        });
    }
    report.receipt
}

/// Decides the initial exchange from its answer (§5.3; the readings are
/// `host`'s module documentation).
pub fn initial_decision(answer: PolicyAnswer) -> InitialDecision {
    use super::McpOnlyReason as R;
    use crate::policy::{Fallback, Receipt};
    match answer {
        PolicyAnswer::Receipt(receipt) => match receipt {
            Some(Receipt::Refused {
                fallback: Fallback::Close,
                ..
            }) => InitialDecision::Close,
            Some(Receipt::Refused { .. }) => InitialDecision::McpOnly(R::Refused),
            Some(r @ Receipt::Accepted { .. }) => InitialDecision::Mcpl(r),
            None => InitialDecision::McpOnly(R::PolicyFailed("unusable receipt".into())),
        },
        PolicyAnswer::MethodNotFound => InitialDecision::McpOnly(R::PolicyMethodNotFound),
        PolicyAnswer::Timeout => InitialDecision::McpOnly(R::PolicyTimeout),
        PolicyAnswer::Failed(why) => InitialDecision::McpOnly(R::PolicyFailed(why)),
    }
}

/// The grant MCP-only keeps (§3.2): `tools` at most, only if the server advertised it and
/// the host's `policy` allows it; once a grant was in force (`ready`), never more than
/// `current` (§6.7: a refused expansion naming `tools` does not activate it).
pub fn mcp_only_grant<'a, I>(
    current: Grant,
    ready: bool,
    review: Option<&ManifestReview>,
    policy: I,
) -> Grant
where
    I: IntoIterator<Item = &'a str>,
{
    use crate::capability::CapabilitySet;
    let tools = CapabilitySet::EMPTY.with(Capability::Tools);
    let mut grant = current.intersect(tools);
    if let Some(r) = review {
        let adv = r.advertised().intersection(tools);
        if let Ok(hg) = policy::HostGrant::compute(adv, policy) {
            grant = hg.effective;
        }
    }
    if ready {
        grant = grant.intersect(current.capabilities());
    }
    grant
}

/// The `initialize` params a host sends (§5.2): MCPL advertised under
/// `capabilities.experimental.mcpl` with what the host's policy `host_allows`, the version
/// and `featureSets: true`.
pub fn initialize_params(
    host_allows: &Grant,
    protocol_version: &str,
    client_name: &str,
    client_version: &str,
) -> Value {
    let mut adv = crate::capability::advertisement_to_value(host_allows.capabilities());
    if let Some(o) = adv.as_object_mut() {
        o.insert(
            "version".into(),
            json!(crate::protocol::handshake::MCPL_VERSION),
        );
        o.insert("featureSets".into(), json!(true));
    }
    json!({
        "protocolVersion": protocol_version,
        "capabilities": { "experimental": { "mcpl": adv } },
        "clientInfo": { "name": client_name, "version": client_version },
    })
}

/// One hook answer judged (§10.4, §5.4): each injection accepted at the position it
/// authorises, or rejected with the reason; or the whole answer refused (fail-open).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookVerdict {
    /// Accepted injections, with the inject leaf each was authorised by.
    pub accepted: Vec<(Capability, Value)>,
    /// Rejected injections and why.
    pub rejected: Vec<(Value, policy::InjectionDenied)>,
    /// Why the answer contributed nothing, when it did not (an error, a timeout, a malformed
    /// or oversized `contextInjections`, a result that is not an object).
    pub failure: Option<String>,
}

/// Judges the answer to `context/beforeInference` under `grant`, the grant current where
/// the answer was read (§5.4): every injection by its `position` (never by the claimed
/// `featureSet` or `namespace`), against the manifest's declarations and the statuses under
/// that grant; more than `limit` injections refuse the whole answer.
pub fn judge_hook_answer(
    answer: Result<Value, String>,
    grant: &Grant,
    review: Option<&ManifestReview>,
    limit: usize,
) -> HookVerdict {
    let mut v = match answer {
        Ok(v) => v,
        Err(why) => {
            return HookVerdict {
                failure: Some(why),
                ..HookVerdict::default()
            }
        }
    };
    let fail = |why: String| HookVerdict {
        failure: Some(why),
        ..HookVerdict::default()
    };
    if !v.is_object() {
        // §10.2: the result is an object; anything else carries nothing (fail closed).
        return fail("the result is not an object (§10.2); the answer is refused".into());
    }
    // Absent or `null`: nothing to inject (`protocol::given`).
    let items = match v.get_mut("contextInjections") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() > limit => {
            return fail(format!(
                "{} contextInjections exceed the limit of {limit}; the answer is refused",
                a.len()
            ))
        }
        Some(Value::Array(a)) => std::mem::take(a),
        Some(_) => return fail("contextInjections is not an array".into()),
    };
    let feature_set = v.get("featureSet").and_then(Value::as_str);
    let none = (
        policy::FeatureSets::default(),
        std::collections::BTreeMap::new(),
    );
    let (decls, statuses) = match review {
        Some(r) => (r.declarations(), r.statuses_under(grant)),
        None => (&none.0, std::borrow::Cow::Borrowed(&none.1)),
    };
    let mut verdict = HookVerdict::default();
    for inj in items {
        match policy::judge_injection(grant, decls, &statuses, feature_set, &inj) {
            Ok(c) => verdict.accepted.push((c, inj)),
            Err(reason) => verdict.rejected.push((inj, reason)),
        }
    }
    verdict
}

/// What a server's hook answer lost before it was sent ([`hook_answer_to_send`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DroppedInjections {
    /// Every injection: the answer's feature set is missing, undeclared or unavailable
    /// (§6.5, §6.6); the answer then names the hook's own set.
    All {
        /// The set the answer claimed (after the hook's default).
        feature_set: Option<String>,
        /// How many were dropped.
        count: usize,
        /// Why the set cannot carry them.
        reason: String,
    },
    /// One injection the host would refuse by its own rule ([`policy::judge_injection`]).
    One {
        /// The answer's feature set.
        feature_set: String,
        /// The injection's position.
        position: String,
        /// Why.
        denied: policy::InjectionDenied,
    },
}

impl std::fmt::Display for DroppedInjections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DroppedInjections::All {
                feature_set,
                count,
                reason,
            } => write!(
                f,
                "{count} injection(s) under feature set {feature_set:?} dropped: {reason}"
            ),
            DroppedInjections::One {
                feature_set,
                position,
                denied,
            } => write!(
                f,
                "feature set {feature_set:?}: dropped an injection at position {position}: {denied}"
            ),
        }
    }
}

/// Makes a server's `context/beforeInference` answer one the host accepts whole (§10.1,
/// §10.8): the server sends only what the host would accept at response-receipt, judged by
/// the host's own rule ([`policy::judge_injection`]) under `grant` (the grant in force; empty
/// before readiness) and the set statuses the server derived. An answer without a
/// `featureSet` claims `default_set`, the hook's own (§6.5 is silent; other libraries
/// require one on every answer). Returns what was dropped, for the author to be told.
pub fn hook_answer_to_send(
    r: &mut crate::protocol::hooks::BeforeInferenceResult,
    default_set: Option<&str>,
    grant: &Grant,
    decls: &policy::FeatureSets,
    statuses: &std::collections::BTreeMap<String, policy::FeatureSetStatus>,
) -> Vec<DroppedInjections> {
    if r.feature_set.is_none() {
        r.feature_set = default_set.map(str::to_owned);
    }
    if r.context_injections.is_empty() {
        return Vec::new();
    }
    let set_ok = match r.feature_set.as_deref() {
        Some(name) => policy::feature_set_gate(decls, statuses, name, Requirement::None)
            .map_err(|refusal| refusal.to_error(name).message.into_owned()),
        None => Err("the answer names no featureSet and the hook has none".to_owned()),
    };
    if let Err(reason) = set_ok {
        let dropped = DroppedInjections::All {
            feature_set: r.feature_set.take(),
            count: r.context_injections.len(),
            reason,
        };
        r.context_injections.clear();
        r.feature_set = default_set.map(str::to_owned);
        return vec![dropped];
    }
    let name = r.feature_set.clone().unwrap_or_default();
    let mut dropped = Vec::new();
    r.context_injections.retain(|inj| {
        let judged = serde_json::to_value(inj)
            .map_err(|e| policy::InjectionDenied::Malformed(e.to_string()))
            .and_then(|v| policy::judge_injection(grant, decls, statuses, Some(&name), &v));
        match judged {
            Ok(_) => true,
            Err(denied) => {
                dropped.push(DroppedInjections::One {
                    feature_set: name.clone(),
                    position: inj.position.as_str().to_owned(),
                    denied,
                });
                false
            }
        }
    });
    dropped
}
