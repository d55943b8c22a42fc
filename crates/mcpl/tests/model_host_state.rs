//! Model-based security test of the sans-I/O host state machine (§5.3, §5.4, §6.7, §10.1,
//! §14.5, §17.5): the model and the kinds of steps of `model_host.rs`, driven
//! deterministically through the real `HostState` (issue #24 item 4), with no tokio and no
//! clock: time is an `Instant` the script advances, and an unanswered policy Request expires
//! by moving it to the policy timeout and calling `handle_timeout`. The server is scripted
//! here: it writes JSON-RPC frames as text, which the host reads through `Message::parse` as
//! the wire would, and it reads what the host wrote from its JSON text.
//!
//! Steps: policy changes (narrowing and widening at once) accepted, refused with an error,
//! never answered (and then, or not, answered late), or accepted only after more server
//! traffic; manifest changes (`mcpl/manifestChanged`, then the fetched `mcpl/manifest`),
//! also while a policy Request is in flight and before the initial receipt; push events,
//! channel registrations, incoming channel messages and `context/beforeInference` rounds,
//! also while the initial policy Request is outstanding; hook answers read before and after
//! a widening receipt.
//!
//! The model is plain set algebra, independent of the library:
//! - initial: nothing before the accepting receipt; then G = P ∩ A;
//! - policy change to P': before the Request goes out G = G ∩ P' ∩ A (narrowing first);
//!   after an accepting receipt G = P' ∩ A; otherwise (an error, no answer, or an answer
//!   read after the host stopped waiting) it stays G ∩ P' ∩ A;
//! - manifest change to A': G = G ∩ A' at once, told by Request when it narrowed; a
//!   re-advertisement widens nothing until the next accepted policy exchange. A receipt
//!   read later activates at most what its Request told, within what is advertised then
//!   and within what any reduction sent after that Request told (the server applies the
//!   reduction last; the reading is in `ChangePlan::cap`).
//!
//! After every step: the host's grant equals the model's and lies within what the last
//! policy Request told; nothing was admitted or delivered whose capability was not in G at
//! that moment; what G allows was admitted; an injection is accepted iff its leaf is in G
//! where the answer is read; `userMessage` goes only with observe; every output the host
//! produced is accounted for by the step that caused it.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::jsonrpc::Message;
use mcpl::session::rules::HookVerdict;
use mcpl::session::{HostDiagnostic, HostEvent, HostOutput, HostRules, HostState, PolicyChange};
use proptest::prelude::*;
use serde_json::{json, Value};

#[path = "support/host_model.rs"]
mod host_model;
use host_model::{
    accepted_injections, check_incoming, check_push, check_register, effective_of, hook_answer,
    hook_params, incoming_params, is_channel_message, is_push, manifest, patterns, push_params,
    register_params, set_of, HOOK_CAPS, INJECT,
};

const POLICY_TIMEOUT: Duration = Duration::from_secs(5);

/// How the scripted server answers a policy Request.
#[derive(Debug, Clone)]
enum Answer {
    Accept,
    Error,
    /// Never answered: the host's policy timeout expires. With `late`, an accepting receipt
    /// arrives after that, which must widen nothing.
    Silent {
        late: bool,
    },
    /// Server traffic while the Request is outstanding, then an accepting receipt.
    AcceptAfter(Vec<Msg>),
}

/// A server message.
#[derive(Debug, Clone)]
enum Msg {
    Push,
    Register(u8),
    Incoming(u8),
    /// A `context/beforeInference` round whose answer injects at these positions (indices
    /// into `host_model::INJECT`, 3 = an unknown position).
    Hook(Vec<u8>),
    /// `mcpl/manifestChanged`, then the fetched manifest advertising this mask.
    Manifest(u8),
}

#[derive(Debug, Clone)]
enum Step {
    Policy {
        mask: u8,
        answer: Answer,
    },
    /// A hook round during which the grant changes (accepted): the hook's answer arrives
    /// before the receipt (`answer_first`) or after it, and is judged by the grant current
    /// where it is read (§5.4).
    HookAcrossPolicy {
        positions: Vec<u8>,
        mask: u8,
        answer_first: bool,
    },
    Msg(Msg),
}

fn msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        Just(Msg::Push),
        (0u8..3).prop_map(Msg::Register),
        (0u8..3).prop_map(Msg::Incoming),
        prop::collection::vec(0u8..4, 0..5).prop_map(Msg::Hook),
        any::<u8>().prop_map(Msg::Manifest),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![
        3 => Just(Answer::Accept),
        1 => Just(Answer::Error),
        1 => any::<bool>().prop_map(|late| Answer::Silent { late }),
        2 => prop::collection::vec(msg(), 1..4).prop_map(Answer::AcceptAfter),
    ];
    prop_oneof![
        3 => (any::<u8>(), answer).prop_map(|(mask, answer)| Step::Policy { mask, answer }),
        1 => (prop::collection::vec(0u8..4, 0..5), any::<u8>(), any::<bool>()).prop_map(
            |(positions, mask, answer_first)| Step::HookAcrossPolicy {
                positions,
                mask,
                answer_first
            }
        ),
        6 => msg().prop_map(Step::Msg),
    ]
}

/// The model's state.
struct Model {
    advertised: CapabilitySet,
    grant: CapabilitySet,
    /// What the policy Request in flight told (`effectiveCapabilities`), capped by every
    /// reduction told after it: an accepting receipt activates at most this, within what
    /// is advertised when it arrives.
    pending: Option<CapabilitySet>,
    /// What the last policy Request the host wrote told: the server's view of the grant.
    told: CapabilitySet,
    registered: BTreeSet<String>,
    next_event: u64,
}

/// A host request the scripted server read: its id and params.
struct Read {
    id: Value,
    params: Value,
}

struct Harness {
    host: HostState,
    now: Instant,
    /// Frames the host wrote that the scripted server has not read yet (as JSON).
    to_server: VecDeque<Value>,
    /// Everything else the host produced and no step has accounted for yet.
    events: Vec<HostEvent>,
    hooks: Vec<(u64, HookVerdict)>,
    changes: Vec<PolicyChange>,
    connected: Vec<bool>,
    diagnostics: Vec<HostDiagnostic>,
    next_id: i64,
    model: Model,
}

impl Harness {
    /// Handshake and initial policy exchange (§5.2, §5.3), with `early` server traffic
    /// while the initial policy Request is outstanding (judged not ready: nothing admitted).
    fn connect(advertised: CapabilitySet, policy: CapabilitySet, early: &[Msg]) -> Harness {
        let now = Instant::now();
        let rules = HostRules {
            policy_timeout: POLICY_TIMEOUT,
            hook_timeout: Duration::from_secs(5),
            manifest_fetch_burst: 1000,
            manifest_fetch_per_sec: 1000.0,
            ..HostRules::new(patterns(policy))
        };
        let host = HostState::new(rules, now, SystemTime::UNIX_EPOCH).expect("policy parses");
        let mut h = Harness {
            host,
            now,
            to_server: VecDeque::new(),
            events: Vec::new(),
            hooks: Vec::new(),
            changes: Vec::new(),
            connected: Vec::new(),
            diagnostics: Vec::new(),
            next_id: 0,
            model: Model {
                advertised,
                grant: CapabilitySet::EMPTY,
                pending: None,
                told: CapabilitySet::EMPTY,
                registered: BTreeSet::new(),
                next_event: 0,
            },
        };
        h.host.start(now);
        h.pump();
        let init = h.next_request("initialize");
        h.respond(
            &init,
            json!({
                "protocolVersion": "2024-11-05",
                "capabilities": { "experimental": { "mcpl": manifest(advertised) } },
                "serverInfo": { "name": "scripted", "version": "1" }
            }),
        );
        let initialized = h.to_server.pop_front().expect("initialized");
        assert_eq!(initialized["method"], "notifications/initialized");
        let upd = h.next_request("featureSets/update");
        let told = policy.intersection(advertised);
        assert_eq!(effective_of(&upd.params), told);
        h.model.pending = Some(told);
        h.model.told = told;
        // §5.3: until the receipt, nothing is granted.
        assert!(!h.host.is_ready());
        assert_eq!(h.host.grant().capabilities(), CapabilitySet::EMPTY);
        for m in early {
            h.run_msg(m);
            assert!(!h.host.is_ready(), "ready before the receipt");
            h.check_grant("before the initial receipt");
        }
        h.respond(&upd, json!({"accepted": true}));
        // A revocation fetched during the exchange stays applied (§17.5), and the server,
        // told more, is told the reduction before the session is up (§6.7).
        h.model.grant = told.intersection(h.model.advertised);
        h.model.pending = None;
        assert!(h.host.is_ready());
        h.check_grant("after the initial receipt");
        if h.model.grant != told {
            assert!(h.connected.is_empty(), "up before the reduction was told");
            let r = h.next_request("featureSets/update");
            assert_eq!(effective_of(&r.params), h.model.grant);
            h.model.told = h.model.grant;
            h.respond(&r, json!({"accepted": true}));
        }
        assert_eq!(std::mem::take(&mut h.connected), [true], "connected once");
        h.no_strays();
        h
    }

    /// Moves every output of the host to where it goes: frames onto the wire to the
    /// scripted server, everything else into the outputs a step must account for.
    fn pump(&mut self) {
        while let Some(o) = self.host.poll_output() {
            match o {
                HostOutput::Transmit(_) => {
                    let text = o.frame().expect("a frame");
                    let frame = serde_json::from_str(&text).expect("the host writes JSON");
                    self.to_server.push_back(frame);
                }
                HostOutput::Event(e) => self.events.push(e),
                HostOutput::Hook { id, verdict } => self.hooks.push((id, verdict)),
                HostOutput::PolicyChanged(c) => self.changes.push(c),
                HostOutput::Connected(r) => self.connected.push(r.is_ok()),
                HostOutput::Diagnostic(d) => self.diagnostics.push(d),
                other => panic!("an output no step asked for: {other:?}"),
            }
        }
    }

    /// The scripted server writes `frame`; the host reads it through `Message::parse`.
    fn server_writes(&mut self, frame: Value) {
        let msg = Message::parse(&frame.to_string()).expect("the script writes JSON-RPC");
        self.host.handle_message(self.now, msg);
        self.pump();
    }

    /// The next frame the host wrote must be a `method` Request.
    fn next_request(&mut self, method: &str) -> Read {
        let f = self
            .to_server
            .pop_front()
            .unwrap_or_else(|| panic!("expected a {method} Request, the host wrote nothing"));
        assert_eq!(f["method"], method, "expected a {method} Request: {f}");
        assert!(f.get("id").is_some(), "{method} must be a Request: {f}");
        Read {
            id: f["id"].clone(),
            params: f.get("params").cloned().unwrap_or(Value::Null),
        }
    }

    fn respond(&mut self, r: &Read, result: Value) {
        self.server_writes(json!({"jsonrpc": "2.0", "id": r.id, "result": result}));
    }

    /// A server Request; its answer must be the next frame the host wrote. `Err` carries the
    /// error code.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, i64> {
        self.next_id += 1;
        let id = self.next_id;
        self.server_writes(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let f = self.to_server.pop_front().expect("the host answered");
        assert_eq!(f["id"], json!(id), "the answer to {method}: {f}");
        assert!(f.get("method").is_none(), "{f}");
        match f.get("error") {
            Some(e) => Err(e["code"].as_i64().expect("an error code")),
            None => Ok(f["result"].clone()),
        }
    }

    fn check_grant(&self, at: &str) {
        let grant = self.host.grant().capabilities();
        assert_eq!(grant, self.model.grant, "grant {at}");
        // §6.7: never wider than the server was last told.
        assert!(
            grant.is_subset(self.model.told),
            "grant {grant:?} {at}, wider than the last Request told: {:?}",
            self.model.told
        );
    }

    fn allows(&self, c: Capability) -> bool {
        self.model.grant.contains(c)
    }

    /// Takes the one event `want` matches, if any ([`host_model::take_event`]).
    fn take_event(&mut self, want: impl Fn(&HostEvent) -> bool) -> bool {
        host_model::take_event(std::mem::take(&mut self.events), want)
    }

    /// Nothing is left that the step did not account for: no frame unread, no event but
    /// manifest change receipts, no hook verdict, policy outcome or connection outcome.
    fn no_strays(&mut self) {
        assert!(
            self.to_server.is_empty(),
            "frames nobody read: {:?}",
            self.to_server
        );
        self.take_event(|_| false);
        assert!(
            self.hooks.is_empty(),
            "stray hook verdicts {:?}",
            self.hooks
        );
        assert!(self.changes.is_empty(), "stray policy outcomes");
        assert!(self.connected.is_empty(), "stray connection outcomes");
        self.diagnostics.clear();
    }

    fn run_msg(&mut self, m: &Msg) {
        match m {
            Msg::Push => {
                self.model.next_event += 1;
                let id = format!("e{}", self.model.next_event);
                let r = self.call("push/event", push_params(&id));
                let delivered = self.take_event(|e| is_push(e, &id));
                check_push(self.model.grant, &r, delivered);
            }
            Msg::Register(n) => {
                let id = format!("ch{n}");
                let r = self.call("channels/register", register_params(&id));
                if check_register(self.model.grant, &r) {
                    self.model.registered.insert(id);
                }
            }
            Msg::Incoming(n) => {
                let id = format!("ch{n}");
                self.model.next_event += 1;
                let mid = format!("m{}", self.model.next_event);
                let r = self.call("channels/incoming", incoming_params(&id, &mid));
                let delivered = self.take_event(|e| is_channel_message(e, &mid));
                let registered = self.model.registered.contains(&id);
                check_incoming(self.model.grant, registered, &r, delivered);
            }
            Msg::Hook(positions) => self.run_hook(positions, None),
            Msg::Manifest(mask) => self.run_manifest(*mask),
        }
        self.no_strays();
    }

    /// One `context/beforeInference` round; with `across = (mask, answer_first)`, a policy
    /// change to `mask` (accepted) is in flight while the hook is outstanding, and the hook's
    /// answer is read before its receipt or after it.
    fn run_hook(&mut self, positions: &[u8], across: Option<(u8, bool)>) {
        // §10.1: sent only with observe or an inject leaf, judged by the grant at sending.
        let applies = HOOK_CAPS.iter().any(|c| self.allows(*c));
        let hook = self.host.before_inference(self.now, hook_params());
        self.pump();
        assert_eq!(hook.is_some(), applies, "hook under {:?}", self.model.grant);
        let Some(hook) = hook else {
            assert!(
                self.to_server.is_empty(),
                "a hook that does not apply was sent"
            );
            if let Some((mask, _)) = across {
                self.run_policy(mask, &Answer::Accept);
            }
            return;
        };
        let req = self.next_request("context/beforeInference");
        let um = &req.params["userMessage"];
        // §10.1: the user message only with observe.
        assert_eq!(um.is_null(), !self.allows(Capability::Observe), "{um}");
        let answer = hook_answer(positions);
        // The grant current where the answer is read (§5.4, §17.5).
        let judged = match across {
            None => {
                let judged = self.model.grant;
                self.respond(&req, answer);
                judged
            }
            Some((mask, true)) => {
                let upd = self.begin_policy(mask);
                let judged = self.model.grant;
                self.respond(&req, answer);
                self.finish_policy(&upd, &Answer::Accept);
                judged
            }
            Some((mask, false)) => {
                self.run_policy(mask, &Answer::Accept);
                let judged = self.model.grant;
                self.respond(&req, answer);
                judged
            }
        };
        let [(id, verdict)] =
            <[_; 1]>::try_from(std::mem::take(&mut self.hooks)).expect("exactly one hook verdict");
        assert_eq!(id, hook);
        assert_eq!(verdict.failure, None);
        // Judged by the grant current when the answer arrived, and by the claimed set's
        // declaration: only the claimed set's position can be carried.
        let want = accepted_injections(judged, positions);
        for ((_, cap), want) in INJECT.iter().zip(want) {
            let got = verdict.accepted.iter().filter(|(c, _)| c == cap).count();
            assert_eq!(got, want, "{cap:?} under {judged:?}: {verdict:?}");
        }
        assert_eq!(
            verdict.rejected.len(),
            positions.len() - verdict.accepted.len(),
            "{verdict:?}"
        );
    }

    /// Starts a policy change to `mask`: the narrowing must be in force when the Request is
    /// read, and the Request must tell exactly P' ∩ A (§6.7).
    fn begin_policy(&mut self, mask: u8) -> Read {
        let new_policy = set_of(mask);
        self.host
            .set_policy(self.now, patterns(new_policy))
            .expect("set_policy");
        self.pump();
        let upd = self.next_request("featureSets/update");
        let narrowed = self
            .model
            .grant
            .intersection(new_policy)
            .intersection(self.model.advertised);
        // §6.7: the narrowing took effect before the Request went out.
        self.model.grant = narrowed;
        self.check_grant("when the policy Request is read");
        let told = new_policy.intersection(self.model.advertised);
        assert_eq!(effective_of(&upd.params), told);
        self.model.pending = Some(told);
        self.model.told = told;
        upd
    }

    /// Answers the policy Request `upd` for a change to `mask` as `answer` says and checks
    /// the outcome.
    fn finish_policy(&mut self, upd: &Read, answer: &Answer) {
        let accepted = match answer {
            Answer::Accept => {
                self.respond(upd, json!({"accepted": true}));
                true
            }
            Answer::Error => {
                self.server_writes(json!({"jsonrpc": "2.0", "id": upd.id,
                                          "error": {"code": -32603, "message": "no"}}));
                false
            }
            Answer::Silent { late } => {
                let at = self
                    .host
                    .poll_timeout()
                    .expect("the policy Request has a deadline");
                assert_eq!(at, self.now + POLICY_TIMEOUT);
                // Not a moment before its deadline.
                self.host.handle_timeout(at - Duration::from_millis(1));
                self.pump();
                assert!(self.changes.is_empty(), "expired before its deadline");
                self.now = at;
                self.host.handle_timeout(self.now);
                self.pump();
                if *late {
                    let [change] = <[_; 1]>::try_from(std::mem::take(&mut self.changes))
                        .expect("one policy outcome at the deadline");
                    assert!(change.activated.is_empty(), "{change:?}");
                    // The receipt the host stopped waiting for widens nothing.
                    self.respond(upd, json!({"accepted": true}));
                    assert!(
                        self.diagnostics
                            .iter()
                            .any(|d| matches!(d, HostDiagnostic::UnexpectedResponse { .. })),
                        "a late receipt is reported: {:?}",
                        self.diagnostics
                    );
                    self.changes.push(change);
                }
                false
            }
            Answer::AcceptAfter(msgs) => {
                // Server traffic while the expansion is pending: judged by the narrowed grant.
                for m in msgs {
                    self.run_msg(m);
                    self.check_grant("while an expansion is pending");
                }
                self.respond(upd, json!({"accepted": true}));
                true
            }
        };
        let told = self
            .model
            .pending
            .take()
            .expect("a policy Request in flight");
        if accepted {
            self.model.grant = told.intersection(self.model.advertised);
        }
        let [change] = <[_; 1]>::try_from(std::mem::take(&mut self.changes))
            .expect("exactly one policy outcome");
        assert_eq!(change.grant.capabilities(), self.model.grant);
        if !accepted {
            // An unanswered expansion never activated.
            assert!(change.activated.is_empty(), "{change:?}");
        }
        self.check_grant("after the policy exchange");
    }

    fn run_policy(&mut self, mask: u8, answer: &Answer) {
        let upd = self.begin_policy(mask);
        self.finish_policy(&upd, answer);
    }

    /// `mcpl/manifestChanged`, then the fetched manifest advertising `mask` (§17.3–§17.5).
    fn run_manifest(&mut self, mask: u8) {
        let advertised = set_of(mask);
        self.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged",
                                  "params": {}}));
        let fetch = self.next_request("mcpl/manifest");
        self.respond(&fetch, manifest(advertised));
        let revoked = self.model.grant.intersection(advertised);
        let narrowed = revoked != self.model.grant;
        self.model.advertised = advertised;
        self.model.grant = revoked;
        // §17.5 step 3: revoked host-side at once, before the Request telling it is read.
        self.check_grant("when the fetched manifest is read");
        if narrowed {
            // §6.7: a reduction is told by Request (the scripted server answers it at once,
            // also while it holds an earlier policy Request); a re-advertisement tells
            // nothing.
            let upd = self.next_request("featureSets/update");
            assert_eq!(effective_of(&upd.params), revoked);
            // The server applies this after any Request it read earlier: a widening still
            // in flight may activate no more than this told.
            if let Some(p) = &mut self.model.pending {
                *p = p.intersection(revoked);
            }
            self.model.told = revoked;
            self.respond(&upd, json!({"accepted": true}));
        }
        self.check_grant("after a manifest change");
    }
}

proptest! {
    // 256 cases × up to 24 steps: 1–1.5 s in a debug build.
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn s5_4_s6_7_host_state_grant_holds_under_interleaved_changes_and_traffic(
        advertised in any::<u8>(),
        policy in any::<u8>(),
        early in prop::collection::vec(msg(), 0..3),
        steps in prop::collection::vec(step(), 1..24),
    ) {
        let mut h = Harness::connect(set_of(advertised), set_of(policy), &early);
        for s in &steps {
            match s {
                Step::Policy { mask, answer } => h.run_policy(*mask, answer),
                Step::HookAcrossPolicy { positions, mask, answer_first } => {
                    h.run_hook(positions, Some((*mask, *answer_first)));
                    h.check_grant("after a hook across a policy change");
                }
                Step::Msg(m) => {
                    h.run_msg(m);
                    h.check_grant("after a server message");
                }
            }
            h.no_strays();
        }
    }
}
