//! Model-based security test of the host session (§5.3, §5.4, §6.7, §10, §14, §17.5): a
//! randomized script drives a real `HostSession` against a scripted server over the in-memory
//! transport, interleaving grant changes (narrowing and widening; accepted, refused with an
//! error, unanswered, or accepted only after more server traffic), manifest changes
//! (revocations and re-advertisements) and server messages (push events, channel
//! registrations, incoming channel messages, hook responses with mixed positions).
//!
//! The model is plain set algebra, independent of the library:
//! - initial: G = P ∩ A (after the accepting receipt);
//! - policy change to P': before the Request goes out G = G ∩ P' ∩ A (narrowing first);
//!   after an accepting receipt G = P' ∩ A; otherwise it stays G ∩ P' ∩ A (an unanswered
//!   expansion never activates);
//! - manifest change to A': G = G ∩ A' (a revocation applies at once; a re-advertisement
//!   widens nothing until the next accepted policy exchange).
//!
//! After every step: the session's grant equals the model's; nothing was admitted or
//! delivered whose capability was not in G at that moment; what G allows was admitted.
//!
//! `model_host_state.rs` drives the same model through the sans-I/O `HostState`
//! deterministically (no tokio, time passed in), with more placements than this driver can
//! pin down: traffic before the initial receipt, late receipts, manifest changes while a
//! policy Request is in flight.
#![cfg(feature = "runtime")]

use std::collections::BTreeSet;
use std::time::Duration;

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::host::{before_inference, HostConfig, HostEvent, HostSession, HostStreams};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig};
use proptest::prelude::*;
use serde_json::{json, Value};

#[path = "support/host_model.rs"]
mod host_model;
use host_model::{
    accepted_injections, check_incoming, check_push, check_register, effective_of, hook_answer,
    hook_params, incoming_params, is_channel_message, is_push, manifest, patterns, push_params,
    register_params, set_of, HOOK_CAPS,
};

/// How the scripted server answers a policy Request.
#[derive(Debug, Clone)]
enum Answer {
    Accept,
    Error,
    Silent,
    /// Server traffic while the Request is outstanding, then an accepting receipt.
    AcceptAfter(Vec<Msg>),
}

/// A server message.
#[derive(Debug, Clone)]
enum Msg {
    Push,
    Register(u8),
    Incoming(u8),
    /// A `context/beforeInference` round whose response injects at these positions
    /// (indices into `host_model::INJECT`, 3 = an unknown position).
    Hook(Vec<u8>),
}

#[derive(Debug, Clone)]
enum Step {
    Policy {
        mask: u8,
        answer: Answer,
    },
    /// A hook round during which the grant changes (accepted) before the response arrives:
    /// injections are judged by the grant at response receipt (§5.4).
    HookAcrossPolicy {
        positions: Vec<u8>,
        mask: u8,
    },
    Manifest {
        mask: u8,
    },
    Msg(Msg),
}

fn msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        Just(Msg::Push),
        (0u8..3).prop_map(Msg::Register),
        (0u8..3).prop_map(Msg::Incoming),
        prop::collection::vec(0u8..4, 0..5).prop_map(Msg::Hook),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![
        3 => Just(Answer::Accept),
        1 => Just(Answer::Error),
        1 => Just(Answer::Silent),
        2 => prop::collection::vec(msg(), 1..4).prop_map(Answer::AcceptAfter),
    ];
    prop_oneof![
        3 => (any::<u8>(), answer).prop_map(|(mask, answer)| Step::Policy { mask, answer }),
        1 => any::<u8>().prop_map(|mask| Step::Manifest { mask }),
        1 => (prop::collection::vec(0u8..4, 0..5), any::<u8>())
            .prop_map(|(positions, mask)| Step::HookAcrossPolicy { positions, mask }),
        6 => msg().prop_map(Step::Msg),
    ]
}

/// The model's state.
struct Model {
    advertised: CapabilitySet,
    policy: CapabilitySet,
    grant: CapabilitySet,
    registered: BTreeSet<String>,
    next_event: u64,
}

struct Harness {
    session: HostSession,
    streams: HostStreams,
    server: Peer,
    incoming: Incoming,
    model: Model,
    /// Requests the server never answers (kept so their guards do not answer -32601).
    silent: Vec<IncomingRequest>,
}

async fn next_request(incoming: &mut Incoming, method: &str) -> IncomingRequest {
    loop {
        match incoming.recv().await.expect("connection ended") {
            IncomingMessage::Request(r) if r.method() == method => return r,
            IncomingMessage::Request(r) => panic!("expected {method}, got {}", r.method()),
            // A policy Request the host stopped waiting for is cancelled (MCP).
            IncomingMessage::Notification(n) if n.method == "notifications/cancelled" => {}
            IncomingMessage::Notification(n) => panic!("unexpected notification {}", n.method),
        }
    }
}

impl Harness {
    async fn connect(advertised: CapabilitySet, policy: CapabilitySet) -> Harness {
        let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
        let cfg = HostConfig {
            policy: patterns(policy),
            policy_timeout: Duration::from_secs(5),
            hook_timeout: Duration::from_secs(5),
            manifest_fetch_burst: 1000,
            manifest_fetch_per_sec: 1000.0,
            ..HostConfig::default()
        };
        let task = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
        let init = next_request(&mut incoming, "initialize").await;
        init.respond(json!({
            "protocolVersion": "2024-11-05",
            "capabilities": { "experimental": { "mcpl": manifest(advertised) } },
            "serverInfo": { "name": "scripted", "version": "1" }
        }))
        .await
        .unwrap();
        match incoming.recv().await.unwrap() {
            IncomingMessage::Notification(n) => assert_eq!(n.method, "notifications/initialized"),
            IncomingMessage::Request(r) => panic!("unexpected {}", r.method()),
        }
        let upd = next_request(&mut incoming, "featureSets/update").await;
        // §5.3: until the receipt, nothing is granted.
        let grant = policy.intersection(advertised);
        assert_eq!(effective_of(upd.request().params.as_ref().unwrap()), grant);
        upd.respond(json!({"accepted": true})).await.unwrap();
        let (session, streams) = task.await.unwrap().unwrap();
        let h = Harness {
            session,
            streams,
            server,
            incoming,
            model: Model {
                advertised,
                policy,
                grant,
                registered: BTreeSet::new(),
                next_event: 0,
            },
            silent: Vec::new(),
        };
        h.check_grant("after the initial receipt");
        h
    }

    fn check_grant(&self, at: &str) {
        assert_eq!(
            self.session.grant().capabilities(),
            self.model.grant,
            "grant {at}"
        );
    }

    fn allows(&self, c: Capability) -> bool {
        self.model.grant.contains(c)
    }

    /// Nothing may be waiting on the event stream: every event is accounted for by a step.
    fn no_stray_events(&mut self) {
        self.take_event(|_| false);
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, i64> {
        self.server
            .request_raw(method, Some(params))
            .await
            .map_err(|e| e.remote().map(|e| e.code).unwrap_or(0))
    }

    async fn run_msg(&mut self, m: &Msg) {
        match m {
            Msg::Push => {
                self.model.next_event += 1;
                let id = format!("e{}", self.model.next_event);
                let r = self.call("push/event", push_params(&id)).await;
                let delivered = self.take_event(|e| is_push(e, &id));
                check_push(self.model.grant, &r, delivered);
            }
            Msg::Register(n) => {
                let id = format!("ch{n}");
                let r = self.call("channels/register", register_params(&id)).await;
                if check_register(self.model.grant, &r) {
                    self.model.registered.insert(id);
                }
            }
            Msg::Incoming(n) => {
                let id = format!("ch{n}");
                self.model.next_event += 1;
                let mid = format!("m{}", self.model.next_event);
                let r = self
                    .call("channels/incoming", incoming_params(&id, &mid))
                    .await;
                let delivered = self.take_event(|e| is_channel_message(e, &mid));
                let registered = self.model.registered.contains(&id);
                check_incoming(self.model.grant, registered, &r, delivered);
            }
            Msg::Hook(positions) => Box::pin(self.run_hook(positions, None)).await,
        }
        self.no_stray_events();
    }

    /// One `context/beforeInference` round; with `across`, a policy change (accepted) runs
    /// while the hook is outstanding.
    async fn run_hook(&mut self, positions: &[u8], across: Option<u8>) {
        // §10.1: sent only with observe or an inject leaf, judged by the grant at sending.
        let applies = HOOK_CAPS.iter().any(|c| self.allows(*c));
        let session = self.session.clone();
        let fanout =
            tokio::spawn(async move { before_inference(&[&session], &hook_params()).await });
        if applies {
            let req = next_request(&mut self.incoming, "context/beforeInference").await;
            let um = &req.request().params.as_ref().unwrap()["userMessage"];
            // §10.1: the user message only with observe.
            assert_eq!(um.is_null(), !self.allows(Capability::Observe), "{um}");
            if let Some(mask) = across {
                Box::pin(self.run_policy(mask, &Answer::Accept)).await;
            }
            req.respond(hook_answer(positions)).await.unwrap();
        }
        let out = fanout.await.unwrap();
        if !applies {
            if let Some(mask) = across {
                Box::pin(self.run_policy(mask, &Answer::Accept)).await;
            }
        }
        // Judged by the grant current when the response arrived, and by the claimed set's
        // declaration: only the claimed set's position can be carried.
        let want = if applies {
            accepted_injections(self.model.grant, positions)
        } else {
            [0; 3]
        };
        let got = [
            out.system.len(),
            out.before_user.len(),
            out.after_user.len(),
        ];
        assert_eq!(got, want, "under {:?}", self.model.grant);
        let accepted = out.system.len() + out.before_user.len() + out.after_user.len();
        let sent = if applies { positions.len() } else { 0 };
        assert_eq!(out.rejected.len(), sent - accepted);
        assert_eq!(out.consulted.len(), usize::from(applies));
    }

    /// Takes the one event `want` matches, if any ([`host_model::take_event`]).
    fn take_event(&mut self, want: impl Fn(&HostEvent) -> bool) -> bool {
        let events = std::iter::from_fn(|| self.streams.events.try_recv().ok());
        host_model::take_event(events, want)
    }

    async fn run_policy(&mut self, mask: u8, answer: &Answer) {
        let new_policy = set_of(mask);
        let new_effective = new_policy.intersection(self.model.advertised);
        let narrowed = self.model.grant.intersection(new_effective);
        let session = self.session.clone();
        let patterns = patterns(new_policy);
        let change = tokio::spawn(async move { session.set_policy(patterns).await });
        let req = next_request(&mut self.incoming, "featureSets/update").await;
        // §6.7: the narrowing took effect before the Request went out.
        assert!(
            self.session.grant().capabilities().is_subset(narrowed),
            "grant {:?} when the Request arrived; must be within {:?}",
            self.session.grant().capabilities(),
            narrowed
        );
        assert_eq!(
            effective_of(req.request().params.as_ref().unwrap()),
            new_effective
        );
        self.model.grant = narrowed;
        self.check_grant("while the policy Request is outstanding");
        let accepted = match answer {
            Answer::Accept => {
                req.respond(json!({"accepted": true})).await.unwrap();
                true
            }
            Answer::Error => {
                req.respond_error(mcpl::jsonrpc::ErrorObject::internal("no"))
                    .await
                    .unwrap();
                false
            }
            Answer::Silent => {
                self.silent.push(req);
                false
            }
            Answer::AcceptAfter(msgs) => {
                // Server traffic while the expansion is pending: judged by the narrowed grant.
                for m in msgs {
                    self.run_msg(m).await;
                    self.check_grant("while an expansion is pending");
                }
                req.respond(json!({"accepted": true})).await.unwrap();
                true
            }
        };
        let change = change.await.unwrap().expect("set_policy");
        self.model.policy = new_policy;
        if accepted {
            self.model.grant = new_effective;
        }
        assert_eq!(change.grant.capabilities(), self.model.grant);
        if !accepted {
            // An unanswered expansion never activated.
            assert!(change.activated.is_empty());
        }
        self.check_grant("after the policy exchange");
    }

    async fn run_manifest(&mut self, mask: u8) {
        let advertised = set_of(mask);
        let session = self.session.clone();
        let refresh = tokio::spawn(async move { session.refresh_manifest().await });
        let req = next_request(&mut self.incoming, "mcpl/manifest").await;
        req.respond(manifest(advertised)).await.unwrap();
        let revoked = self.model.grant.intersection(advertised);
        if revoked != self.model.grant {
            // A revocation: narrowed host-side first, then announced with a Request (§6.7).
            let upd = next_request(&mut self.incoming, "featureSets/update").await;
            assert!(self.session.grant().capabilities().is_subset(revoked));
            assert_eq!(
                effective_of(upd.request().params.as_ref().unwrap()),
                revoked
            );
            upd.respond(json!({"accepted": true})).await.unwrap();
        }
        refresh.await.unwrap().expect("refresh_manifest");
        self.model.advertised = advertised;
        self.model.grant = revoked;
        self.check_grant("after a manifest change");
        self.no_stray_events();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn s5_4_s6_7_grant_holds_under_interleaved_changes_and_traffic(
        advertised in any::<u8>(),
        policy in any::<u8>(),
        steps in prop::collection::vec(step(), 1..24),
    ) {
        runtime().block_on(async move {
            let mut h = Harness::connect(set_of(advertised), set_of(policy)).await;
            for s in &steps {
                match s {
                    Step::Policy { mask, answer } => h.run_policy(*mask, answer).await,
                    Step::Manifest { mask } => h.run_manifest(*mask).await,
                    Step::HookAcrossPolicy { positions, mask } => {
                        h.run_hook(positions, Some(*mask)).await;
                        h.check_grant("after a hook across a policy change");
                    }
                    Step::Msg(m) => {
                        h.run_msg(m).await;
                        h.check_grant("after a server message");
                    }
                }
            }
        });
    }
}
