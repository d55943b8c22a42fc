//! What a user can do with the engine, shared by the dashboard's API and the REPL: each
//! operation goes through the library's [`HostSession`] (gated as a real host gates it) and
//! returns JSON, or an error message to show.

use std::time::{Duration, SystemTime};

use mcpl::capability::Capability;
use mcpl::host::{self, HostSession};
use mcpl::policy::{self, FeatureSets, InjectionDenied};
use mcpl::protocol::push::timestamp_millis;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::engine::{AutoAnswer, Engine, Phase, MAX_HISTORY};
use super::kept::{bound_bytes, push_bounded, HOOK_CUT};
use super::log;

/// How long the Check button's `mcpl check` run may take before it is stopped.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
/// Most bytes of a check's stderr shown.
const CHECK_STDERR_SHOWN: usize = 4096;

/// Most bytes of a check's report read (`mcpl check --json` keeps it under 1 MB); a longer
/// one is no report.
const CHECK_REPORT_BYTES: usize = 4 * 1024 * 1024;

/// Reads `from` to its end (or its first error), keeping its first `keep` bytes.
async fn read_head(from: Option<impl AsyncRead + Unpin>, keep: usize) -> Vec<u8> {
    let mut head = Vec::new();
    let Some(mut from) = from else {
        return head;
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return head,
            Ok(n) => {
                let room = keep.saturating_sub(head.len()).min(n);
                head.extend_from_slice(buf.get(..room).unwrap_or_default());
            }
        }
    }
}

/// The result of an operation: JSON to show, or what went wrong.
pub type OpResult = Result<Value, String>;

/// Every capability path of the vocabulary (§6.2), in the library's order.
pub fn vocabulary() -> Vec<&'static str> {
    Capability::ALL.iter().map(|c| c.as_str()).collect()
}

/// Checks host policy patterns by the library host's rule (§5.4,
/// [`Grant::from_policy`](mcpl::capability::Grant::from_policy)): a malformed one, or one
/// naming no path, which the session would refuse.
pub fn parse_patterns(patterns: &[String]) -> Result<(), String> {
    for p in patterns {
        mcpl::capability::Grant::from_policy([p.as_str()])
            .map_err(|e| format!("invalid pattern {p:?}: {e}"))?;
    }
    Ok(())
}

/// The category of a dropped injection, as the Hooks panel groups them.
fn injection_category(reason: &InjectionDenied) -> &'static str {
    match reason {
        InjectionDenied::Denied(_) => "position not granted",
        InjectionDenied::FeatureSet { .. } | InjectionDenied::Undeclared { .. } => {
            "feature set unavailable"
        }
        InjectionDenied::MissingPosition
        | InjectionDenied::UnknownPosition(_)
        | InjectionDenied::Malformed(_) => "shape",
    }
}

/// Why the Tools panel's list is stale, if it is: it is kept only to be shown, never as
/// tools the host may call. `tools/list` needs no grant but `tools/call` needs `tools`
/// (§5.4, §8.4), so a list kept after the grant in force stopped holding `tools` (a
/// narrower policy, a manifest withdrawal, an MCP-only fallback) or after the connection
/// closed (or the server ended its output) would offer calls the host refuses.
fn tools_stale(listed: bool, phase: Phase, session: Option<&HostSession>) -> Option<String> {
    if !listed {
        return None;
    }
    match phase {
        Phase::Closed => {
            return Some("stale: the connection is closed (restart to list the tools again)".into())
        }
        Phase::Ended => {
            return Some("stale: the server ended its output, so no call can be answered".into())
        }
        _ => {}
    }
    match session {
        Some(s) if s.grant().allows(Capability::Tools) => None,
        Some(_) => Some(
            "stale: the grant in force no longer holds `tools` (§5.4), so the host calls none \
             of these; grant `tools` to list and call them again"
                .into(),
        ),
        None => Some("stale: not connected".into()),
    }
}

impl Engine {
    fn live(&self) -> Result<HostSession, String> {
        self.session()
            .ok_or_else(|| "not connected (restart to connect again)".to_owned())
    }

    /// The server's capabilities as the host judges them, if the handshake got that far:
    /// those of the `initialize` answer the host runs under ([`State::server_init`]), with
    /// `experimental.mcpl` the manifest the session has in force (its review: the one of
    /// that answer as the library read it, or a later one fetched, §17.5), and without it
    /// when the session serves the server as plain MCP (§3.3: it grants at most `tools`
    /// however MCPL was advertised). With no session, the answer as it came.
    ///
    /// [`State::server_init`]: super::engine::State::server_init
    fn server_capabilities(&self, session: Option<&HostSession>) -> Option<Value> {
        let mut caps = self
            .state()
            .server_init
            .as_ref()
            .and_then(|r| r.get("capabilities"))
            .cloned()?;
        let Some(s) = session else {
            return Some(caps);
        };
        if let Some(experimental) = caps.get_mut("experimental").and_then(Value::as_object_mut) {
            match s.mode() {
                host::Mode::Mcpl => {
                    if let Some((m, _)) = s.manifest() {
                        experimental.insert("mcpl".into(), m);
                    }
                }
                host::Mode::McpOnly(_) => {
                    experimental.remove("mcpl");
                }
            }
        }
        Some(caps)
    }

    /// What `patterns` would grant and which feature sets they leave available (§5.4, §6.4),
    /// as `mcpl grant --json` reports it.
    pub fn grant_preview(&self, patterns: &[String]) -> OpResult {
        parse_patterns(patterns)?;
        let caps = self
            .server_capabilities(self.session().as_ref())
            .ok_or_else(|| "no initialize result yet".to_owned())?;
        let report = policy::grant_report_from_value(&caps, patterns.iter().map(String::as_str))
            .map_err(|e| e.to_string())?;
        serde_json::to_value(report).map_err(|e| e.to_string())
    }

    /// The grant panel: the vocabulary, what the server advertises, the patterns, the grant
    /// in force and the feature sets under it, and each set's `uses`.
    fn grant_view(&self, session: Option<&HostSession>) -> Value {
        let patterns = self.state().patterns.clone();
        let caps = self.server_capabilities(session);
        let in_force: Vec<String> = session
            .map(|s| {
                s.grant()
                    .to_effective_capabilities()
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let report = caps.as_ref().and_then(|c| {
            policy::grant_report_from_value(c, in_force.iter().map(String::as_str))
                .ok()
                .and_then(|r| serde_json::to_value(r).ok())
        });
        let mcpl = caps
            .as_ref()
            .and_then(|c| c.pointer("/experimental/mcpl"))
            .cloned()
            .unwrap_or(Value::Null);
        let uses: serde_json::Map<String, Value> = FeatureSets::from_mcpl(&mcpl)
            .0
            .sets
            .iter()
            .map(|(name, d)| {
                let uses = d
                    .validated_uses()
                    .map(|u| u.sorted_paths())
                    .unwrap_or_default();
                (
                    name.clone(),
                    json!({ "uses": uses, "description": d.description }),
                )
            })
            .collect();
        json!({
            "vocabulary": vocabulary(),
            "patterns": patterns,
            "inForce": in_force,
            "report": report,
            "featureSets": uses,
        })
    }

    /// Everything the dashboard shows but the log, as one document.
    pub fn snapshot(&self) -> Value {
        let session = self.session();
        let grant = self.grant_view(session.as_ref());
        let (manifest, channels) = match &session {
            Some(s) => {
                let m = s.manifest().map(|(m, recomputed)| {
                    let declared = m.get("revision").and_then(Value::as_str).map(str::to_owned);
                    let matches = declared.is_some() && declared == recomputed;
                    json!({ "manifest": m, "declared": declared, "recomputed": recomputed,
                            "matches": matches })
                });
                (m, s.channel_descriptors())
            }
            None => (None, Vec::new()),
        };
        let log = {
            let l = self.log();
            json!({ "lastSeq": l.last_seq(), "kept": l.len(),
                    "bounds": { "entries": log::MAX_ENTRIES, "textBytes": log::MAX_TEXT_BYTES,
                                "frameBytes": log::MAX_KEPT_FRAME } })
        };
        let st = self.state();
        let server = st.server_init.as_ref();
        let channels: Vec<Value> = channels
            .iter()
            .map(|(id, d)| json!({ "id": id, "descriptor": d }))
            .collect();
        let pending: Vec<Value> = st
            .pending
            .iter()
            .map(|(id, p)| {
                json!({ "id": id, "wireId": p.wire_id, "method": p.method, "params": p.params,
                        "since": p.since, "generation": p.generation,
                        "suggested": p.suggested,
                        "revoked": p.revoked(session.as_ref()) })
            })
            .collect();
        let recent = |l: &std::collections::VecDeque<Value>, n: usize| -> Vec<Value> {
            l.iter().rev().take(n).rev().cloned().collect()
        };
        json!({
            "target": self.inner.settings.label,
            "connection": {
                "generation": st.generation,
                "phase": st.phase,
                "detail": st.shown_detail(),
                "mode": session.as_ref().map(|s| format!("{:?}", s.mode())),
                "ready": session.as_ref().map(HostSession::is_ready),
                "protocolVersion": server.and_then(|r| r.get("protocolVersion")),
                "serverInfo": server.and_then(|r| r.get("serverInfo")),
                "hostAdvertisement": st.host_init.as_ref()
                    .and_then(|p| p.pointer("/capabilities/experimental/mcpl")),
                "serverAdvertisement": server
                    .and_then(|r| r.pointer("/capabilities/experimental/mcpl")),
                "hostInitialize": st.host_init,
                "serverInitialize": st.server_init,
                "ignoredInitializeAnswers": st.ignored_init.as_ref()
                    .map(|(count, last)| json!({ "count": count, "last": last })),
            },
            "grant": grant,
            "policy": st.policy,
            "narrowings": st.narrowings,
            "tools": st.tools,
            "toolsStale": tools_stale(st.tools.is_some(), st.phase, session.as_ref()),
            "channels": channels,
            "streams": st.streams,
            "events": recent(&st.events, 200),
            "eventCount": st.events.len(),
            "pending": pending,
            "answered": recent(&st.answered, 20),
            "autoAnswer": st.auto_answer.to_value(),
            "manifest": manifest,
            "manifestChanges": st.manifest_changes,
            "hooks": recent(&st.hooks, 10),
            "check": { "running": st.check_running, "last": st.check },
            "log": log,
            "treatment": {
                "rules": serde_json::from_str::<Value>(super::engine::TREATMENT_RULES)
                    .unwrap_or(Value::Null),
                "default": super::engine::DEFAULT_BEHAVIOR,
            },
        })
    }

    /// Applies host policy `patterns` with a `featureSets/update` Request (§6.7): a narrowing
    /// at once, a widening only on an accepting receipt. Returns the change and its receipt.
    /// A grant that holds `tools` again lists the tools anew: the list the Tools panel kept
    /// while it was stale ([`tools_stale`]) may be out of date.
    pub async fn apply_grant(&self, patterns: Vec<String>) -> OpResult {
        parse_patterns(&patterns)?;
        let s = self.live()?;
        let held_before = s.grant().allows(Capability::Tools);
        let change = s
            .set_policy(patterns.clone())
            .await
            .map_err(|e| e.to_string())?;
        let v = json!({
            "patterns": patterns,
            "narrowed": change.narrowed.sorted_paths(),
            "activated": change.activated.sorted_paths(),
            "notActivated": change.not_activated.sorted_paths(),
            "receipt": change.receipt.as_ref().map(|r| r.to_value()),
            "grant": change.grant.to_effective_capabilities(),
            "time": timestamp_millis(SystemTime::now()),
        });
        {
            let mut st = self.state();
            st.patterns = patterns;
            st.policy = Some(v.clone());
        }
        if !held_before && change.grant.allows(Capability::Tools) {
            self.relist_tools();
        }
        self.changed();
        Ok(v)
    }

    /// Sends a `featureSets/update` **Notification** disabling `sets`: not a grant change
    /// (the host's grant stays as it is, §6.7 says grant changes go by Request) but the
    /// narrowing a server must respect whatever the carrier. The session applies it to its
    /// own judgement first and repeats it in later policy Requests
    /// ([`mcpl::host::HostSession::disable_by_notification`]), so the inspector refuses what
    /// the server should no longer send.
    pub async fn narrow_by_notification(&self, sets: Vec<String>) -> OpResult {
        if sets.is_empty() {
            return Err("name at least one feature set to disable".into());
        }
        let s = self.live()?;
        let params = json!({ "disabled": sets });
        s.disable_by_notification(&sets)
            .await
            .map_err(|e| e.to_string())?;
        let v = json!({ "params": params, "time": timestamp_millis(SystemTime::now()) });
        let mut kept = v.clone();
        bound_bytes(&mut kept, &["params"]);
        push_bounded(&mut self.state().narrowings, kept, MAX_HISTORY);
        self.changed();
        Ok(v)
    }

    /// `tools/list`.
    pub async fn tools_list(&self) -> OpResult {
        let s = self.live()?;
        let r = s
            .request_raw("tools/list", json!({}))
            .await
            .map_err(|e| e.to_string())?;
        self.state().tools = Some(r.clone());
        self.changed();
        Ok(r)
    }

    /// `tools/list` again in the background, when the server announced a change of its
    /// tools (§17.7's surface change, or plain MCP's `list_changed`): the Tools panel
    /// follows without the user asking. One at a time: changes announced while one runs
    /// make one more, so a server flooding announcements costs two requests, not one each
    /// (which would fill the peer's pending requests and refuse the user's own).
    pub fn relist_tools(&self) {
        {
            let mut st = self.state();
            if st.relisting.0 {
                st.relisting.1 = true;
                return;
            }
            st.relisting = (true, false);
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let _ = me.tools_list().await;
                let mut st = me.state();
                if !std::mem::take(&mut st.relisting.1) {
                    st.relisting.0 = false;
                    return;
                }
            }
        });
    }

    /// `tools/call` (gated on `tools`, §5.4).
    pub async fn tools_call(&self, name: &str, arguments: Value) -> OpResult {
        let s = self.live()?;
        s.request_raw(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// One turn: `inference/lifecycle` `started` when granted (§10.5), a
    /// `context/beforeInference` fan-out with `text` as the user message (§10.1; the library
    /// redacts it without `observe`), then `completed`. Shows the params as sent (`null`
    /// for a withheld message, said in `userMessageWithheld`), every injection by position
    /// and every one the host dropped, with why.
    pub async fn hook(&self, text: &str) -> OpResult {
        let s = self.live()?;
        let (generation, turn) = {
            let mut st = self.state();
            st.turns += 1;
            (st.generation, st.turns - 1)
        };
        let inference_id = format!("inspect-{generation}-{turn}");
        let params = json!({
            "inferenceId": inference_id, "conversationId": "mcpl-inspect",
            "turnIndex": turn, "userMessage": text,
            "model": { "id": "mcpl-inspect-echo" },
        });
        let lifecycle_granted = s.grant().allows(Capability::InferenceLifecycle);
        let turn_guard = if lifecycle_granted {
            Some(
                s.start_turn(&inference_id, "mcpl-inspect", turn)
                    .await
                    .map_err(|e| e.to_string()),
            )
        } else {
            None
        };
        // The params as the servers get them: without `observe` the library sends
        // `userMessage: null` (§10.1, `policy::redact_before_inference`), judged under the
        // grant in force when it sends; read here just before, so a grant changing at that
        // very moment may differ. The typed text was shown as if sent.
        let mut sent = params.clone();
        let withheld = !mcpl::policy::user_message_allowed(&s.grant());
        mcpl::policy::redact_before_inference(&s.grant(), &mut sent);
        let out = host::before_inference(&[&s], &params).await;
        let lifecycle = match turn_guard {
            None => json!("inferenceLifecycle not granted: no lifecycle sent"),
            Some(Err(e)) => json!(format!("started not sent: {e}")),
            Some(Ok(t)) => match t.complete(None).await {
                Ok(()) => json!("started, completed"),
                Err(e) => json!(format!("started; completed not sent: {e}")),
            },
        };
        let accepted = |l: &[host::AcceptedInjection]| -> Vec<Value> {
            l.iter()
                .map(|a| json!({ "server": a.server, "injection": a.injection }))
                .collect()
        };
        let mut v = json!({
            "inferenceId": inference_id,
            "params": sent,
            "consulted": out.consulted,
            "system": accepted(&out.system),
            "beforeUser": accepted(&out.before_user),
            "afterUser": accepted(&out.after_user),
            "rejected": out.rejected.iter().map(|r| json!({
                "server": r.server, "injection": r.injection,
                "category": injection_category(&r.reason), "reason": r.reason.to_string(),
            })).collect::<Vec<_>>(),
            "failures": out.failures.iter()
                .map(|f| json!({ "server": f.server, "detail": f.detail }))
                .collect::<Vec<_>>(),
            "lifecycle": lifecycle,
            "time": timestamp_millis(SystemTime::now()),
        });
        if withheld {
            v["userMessageWithheld"] = json!(format!(
                "{} is not granted: the servers got userMessage null, not the text typed (§10.1)",
                Capability::Observe.as_str()
            ));
        }
        // Remembered within the bound of an event (the servers size their injections); the
        // answer to this call is whole.
        let mut kept = v.clone();
        bound_bytes(&mut kept, HOOK_CUT);
        push_bounded(&mut self.state().hooks, kept, MAX_HISTORY);
        self.changed();
        Ok(v)
    }

    /// `channels/open` (§14.3) of a channel of `kind` at `address`.
    pub async fn channel_open(&self, kind: &str, address: Option<Value>) -> OpResult {
        let s = self.live()?;
        let mut params = json!({ "type": kind });
        if let Some(a) = address {
            params["address"] = a;
        }
        s.request_raw("channels/open", params)
            .await
            .map_err(|e| e.to_string())
    }

    /// `channels/close` (§14.3).
    pub async fn channel_close(&self, channel_id: &str) -> OpResult {
        let s = self.live()?;
        s.request_raw("channels/close", json!({ "channelId": channel_id }))
            .await
            .map_err(|e| e.to_string())
    }

    /// `channels/publish` as a Request (§14.3), one text block.
    pub async fn publish(&self, channel_id: &str, text: &str) -> OpResult {
        let s = self.live()?;
        s.request_raw(
            "channels/publish",
            json!({ "channelId": channel_id, "content": [{ "type": "text", "text": text }] }),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// An outgoing stream (§14.3): `text` word by word as `channels/outgoing/chunk`, then
    /// `channels/outgoing/complete`, through the library's [`mcpl::host::OutgoingStream`].
    pub async fn stream(&self, channel_id: &str, text: &str) -> OpResult {
        let s = self.live()?;
        let (generation, n) = {
            let mut st = self.state();
            st.turns += 1;
            (st.generation, st.turns)
        };
        let inference_id = format!("inspect-stream-{generation}-{n}");
        let mut stream = s
            .outgoing_stream(&inference_id, Some("mcpl-inspect"))
            .await
            .map_err(|e| e.to_string())?;
        let mut sent = 0u64;
        let mut result = Ok(());
        for word in text.split_inclusive(' ') {
            if let Err(e) = stream.chunk(channel_id, word).await {
                result = Err(e.to_string());
                break;
            }
            sent += 1;
        }
        if result.is_ok() {
            result = stream.finish().await.map_err(|e| e.to_string());
        }
        let v = json!({ "inferenceId": inference_id, "channelId": channel_id, "text": text,
                        "chunks": sent, "outcome": result.as_ref().err(),
                        "time": timestamp_millis(SystemTime::now()) });
        let mut kept = v.clone();
        bound_bytes(&mut kept, &["text", "channelId", "outcome"]);
        push_bounded(&mut self.state().streams, kept, MAX_HISTORY);
        self.changed();
        result.map(|()| v)
    }

    /// Fetches `mcpl/manifest` now (§17.4) and reviews it; returns the change receipt, if the
    /// manifest changed.
    pub async fn manifest_refresh(&self) -> OpResult {
        let s = self.live()?;
        let r = s.refresh_manifest().await.map_err(|e| e.to_string())?;
        let (manifest, recomputed) = s.manifest().unzip();
        self.changed();
        Ok(json!({
            "receipt": r.map(|r| serde_json::to_value(r).unwrap_or(Value::Null)),
            "manifest": manifest, "recomputed": recomputed.flatten(),
        }))
    }

    /// Any method, through the session's gate (methods with a dedicated API are refused
    /// there and say which to use). `notify` sends a Notification.
    pub async fn raw(&self, method: &str, params: Value, notify: bool) -> OpResult {
        let s = self.live()?;
        if notify {
            s.notify_raw(method, params)
                .await
                .map(|()| json!({ "sent": true }))
                .map_err(|e| e.to_string())
        } else {
            s.request_raw(method, params)
                .await
                .map_err(|e| e.to_string())
        }
    }

    /// Sets how server → host requests are answered from now on.
    pub fn set_auto_answer(&self, auto: AutoAnswer) -> Value {
        let shown = auto.to_value();
        self.state().auto_answer = auto;
        self.changed();
        shown
    }

    /// Re-spawns or re-dials the target and redoes the handshake, keeping the log.
    pub async fn restart(&self) -> OpResult {
        self.connect().await?;
        Ok(self.snapshot()["connection"].clone())
    }

    /// Runs the `mcpl check` suite against the same target, as a child process of the same
    /// executable (`mcpl check --json …`), bounded by [`CHECK_TIMEOUT`].
    pub async fn run_check(&self) -> OpResult {
        {
            let mut st = self.state();
            if st.check_running {
                return Err("a check is already running".into());
            }
            st.check_running = true;
        }
        self.changed();
        let outcome = self.check_once().await;
        {
            let mut st = self.state();
            st.check_running = false;
            st.check = Some(match &outcome {
                Ok(v) => v.clone(),
                Err(e) => json!({ "error": e }),
            });
        }
        self.changed();
        outcome
    }

    async fn check_once(&self) -> OpResult {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot locate the mcpl executable: {e}"))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("check")
            .arg("--json")
            .args(&self.inner.settings.check_args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run mcpl check: {e}"))?;
        // Read as it comes, only the head kept: `mcpl check` passes a spawned server's
        // stderr through, so its stderr is as long as the server makes it.
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let run = async {
            tokio::join!(
                read_head(stdout, CHECK_REPORT_BYTES),
                read_head(stderr, CHECK_STDERR_SHOWN * 4),
                child.wait()
            )
        };
        let (stdout, stderr, status) = tokio::time::timeout(CHECK_TIMEOUT, run)
            .await
            .map_err(|_| format!("mcpl check took longer than {CHECK_TIMEOUT:?}; stopped"))?;
        let status = status.map_err(|e| format!("mcpl check failed to run: {e}"))?;
        let stderr = String::from_utf8_lossy(&stderr);
        let stderr: String = stderr.chars().take(CHECK_STDERR_SHOWN).collect();
        let report: Value = serde_json::from_slice(&stdout)
            .map_err(|e| format!("mcpl check printed no JSON report ({e}); stderr: {stderr}"))?;
        Ok(json!({
            "exitCode": status.code(),
            "report": report,
            "stderr": stderr,
            "time": timestamp_millis(SystemTime::now()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list kept once the server ended its output (EOF) offered calls no answer can come
    /// to, under a grant that holds `tools`; an unlisted panel has nothing to mark.
    #[tokio::test]
    async fn a_tools_list_is_stale_once_the_server_ended_or_the_connection_closed() {
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        let config = host::HostConfig {
            policy: vec!["tools".into()],
            ..host::HostConfig::default()
        };
        let (session, _streams) = HostSession::connect(host_side, config)
            .await
            .expect("connects");
        assert!(session.grant().allows(Capability::Tools));
        assert_eq!(tools_stale(true, Phase::Ready, Some(&session)), None);
        for phase in [Phase::Ended, Phase::Closed] {
            let why = tools_stale(true, phase, Some(&session)).unwrap_or_default();
            assert!(why.starts_with("stale:"), "{phase:?}: {why}");
        }
        assert_eq!(tools_stale(false, Phase::Ended, Some(&session)), None);
        session.close();
    }
}
