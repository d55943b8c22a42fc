//! Model-based test of the pure policy core (§5.3, §5.4, §6.7, §10, §14.1) that the host
//! session drives: random advertisements, policy changes (answered or not) and server
//! messages, checked against an oracle that is plain set algebra.
//!
//! The host-side ordering (narrow, send, widen only on an accepting receipt) is played here by
//! a small stand-in built only from core functions (`HostGrant::compute`, `Grant::intersect`,
//! `parse_receipt`); the server side is the real `ServerPolicyState`. The same model drives
//! the real `HostSession` in `model_host.rs`, and the real sans-I/O `HostState` against the
//! real `ServerState` in `crates/mcpl/src/session/tests/model.rs`.

use mcpl::capability::{Capability, CapabilitySet, Grant};
use mcpl::policy::{
    self, authorize_injection, before_inference_applies, method_requirement, parse_receipt,
    FeatureSets, Form, HostGrant, Receipt, ServerPolicyState,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Every MCPL path (all but `tools`, which is outside MCPL's advertisement).
fn mcpl_paths() -> Vec<Capability> {
    Capability::ALL
        .into_iter()
        .filter(|c| *c != Capability::Tools)
        .collect()
}

fn set_of(mask: u32) -> CapabilitySet {
    mcpl_paths()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c)
        .collect()
}

/// The oracle's view of what each server → host message needs, written out independently of
/// `policy::method_requirement`: `all` must all be granted, and at least one of `any`.
fn oracle_needs(method: &str, params: &Value) -> (Vec<Capability>, Vec<Capability>) {
    use Capability as C;
    match method {
        "push/event" => (vec![C::PushEvents], vec![]),
        "inference/request" if params.get("stream") == Some(&json!(true)) => (
            vec![C::InferenceRequest, C::InferenceRequestStreaming],
            vec![],
        ),
        "inference/request" => (vec![C::InferenceRequest], vec![]),
        "model/info" => (vec![C::ModelInfo], vec![]),
        "channels/register" | "channels/changed" => (vec![C::ChannelsRegister], vec![]),
        "channels/incoming" => (vec![C::ChannelsIncoming], vec![]),
        "context/beforeInference" => (
            vec![],
            vec![
                C::Observe,
                C::InjectSystem,
                C::InjectBeforeUser,
                C::InjectAfterUser,
            ],
        ),
        other => panic!("no oracle entry for {other}"),
    }
}

const MESSAGES: [(&str, &str); 8] = [
    ("push/event", "{}"),
    ("inference/request", "{}"),
    ("inference/request", r#"{"stream":true}"#),
    ("inference/request", r#"{"stream":false}"#),
    ("model/info", "{}"),
    ("channels/register", "{}"),
    ("channels/incoming", "{}"),
    ("channels/changed", "{}"),
];

fn oracle_admits(grant: CapabilitySet, method: &str, params: &Value) -> bool {
    let (all, any) = oracle_needs(method, params);
    all.iter().all(|c| grant.contains(*c))
        && (any.is_empty() || any.iter().any(|c| grant.contains(*c)))
}

fn patterns(p: CapabilitySet) -> Vec<String> {
    p.sorted_paths().into_iter().map(str::to_owned).collect()
}

#[derive(Debug, Clone)]
enum Step {
    /// A policy change to the paths in `mask`, answered (`true`) or not.
    Policy { mask: u32, answered: bool },
    /// The server's advertisement changes to `mask` (a manifest change).
    Advertise { mask: u32 },
    /// A server message; index into [`MESSAGES`].
    Message(usize),
    /// A hook response injecting at these positions (3 = an unknown position).
    Hook(Vec<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<u32>(), prop::bool::weighted(0.7))
            .prop_map(|(mask, answered)| Step::Policy { mask, answered }),
        1 => any::<u32>().prop_map(|mask| Step::Advertise { mask }),
        4 => (0..MESSAGES.len()).prop_map(Step::Message),
        2 => prop::collection::vec(0u8..4, 0..6).prop_map(Step::Hook),
    ]
}

/// The host stand-in: only core functions decide; the test sequences them as §6.7 orders.
struct Host {
    advertised: CapabilitySet,
    grant: Grant,
}

impl Host {
    /// Narrows at once, returns the Request params to send and the computed target grant.
    fn begin_change(&mut self, policy: &[String]) -> (Value, Grant) {
        let hg = HostGrant::compute(self.advertised, policy.iter().map(String::as_str)).unwrap();
        self.grant = self.grant.intersect(hg.effective.capabilities());
        (hg.update_params(None, &[]), hg.effective)
    }

    /// Applies the answer: widens only on an accepting receipt.
    fn finish_change(&mut self, target: Grant, answer: Option<&Value>) {
        let accepted = answer
            .and_then(|v| parse_receipt(v).receipt)
            .is_some_and(|r| matches!(r, Receipt::Accepted { .. }));
        if accepted {
            self.grant = target.intersect(self.advertised);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn s5_4_s6_7_core_grant_model_holds_under_random_interleavings(
        advertised in any::<u32>(),
        initial in any::<u32>(),
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let mut a = set_of(advertised);
        let declarations = FeatureSets::parse(&json!({})).0;
        let mut server = ServerPolicyState::new(declarations, CapabilitySet::ALL);
        prop_assert!(!server.is_ready());
        prop_assert!(server.grant().capabilities().is_empty(), "§5.3: nothing before the first Request");

        // Initial exchange, accepted.
        let mut host = Host { advertised: a, grant: Grant::none() };
        let p0 = set_of(initial);
        let (params, target) = host.begin_change(&patterns(p0));
        prop_assert_eq!(target.capabilities(), p0.intersection(a));
        let out = server.apply(Form::Request, &params).unwrap();
        let receipt = out.receipt.unwrap().to_value();
        host.finish_change(target, Some(&receipt));
        let mut g = p0.intersection(a);
        prop_assert_eq!(host.grant.capabilities(), g);
        // The server holds exactly what the host sent, never more.
        prop_assert_eq!(server.grant().capabilities(), g);

        for s in &steps {
            match s {
                Step::Policy { mask, answered } => {
                    let p = set_of(*mask);
                    let (params, target) = host.begin_change(&patterns(p));
                    // Narrowing before the Request is sent.
                    let narrowed = g.intersection(p).intersection(a);
                    prop_assert_eq!(host.grant.capabilities(), narrowed);
                    prop_assert!(host.grant.capabilities().is_subset(g));
                    g = narrowed;
                    if *answered {
                        let out = server.apply(Form::Request, &params).unwrap();
                        prop_assert_eq!(server.grant().capabilities(), p.intersection(a));
                        let receipt = out.receipt.unwrap().to_value();
                        host.finish_change(target, Some(&receipt));
                        g = p.intersection(a);
                    } else {
                        host.finish_change(target, None);
                    }
                    prop_assert_eq!(host.grant.capabilities(), g, "an unanswered expansion activated");
                }
                Step::Advertise { mask } => {
                    a = set_of(*mask);
                    host.advertised = a;
                    host.grant = host.grant.intersect(a);
                    g = g.intersection(a);
                    prop_assert_eq!(host.grant.capabilities(), g);
                }
                Step::Message(i) => {
                    let (method, params) = MESSAGES[*i];
                    let params: Value = serde_json::from_str(params).unwrap();
                    let req = method_requirement(method, Some(&params)).unwrap();
                    prop_assert_eq!(
                        host.grant.satisfies(req),
                        oracle_admits(g, method, &params),
                        "{} {} under {:?}", method, params, g
                    );
                    // The direction table agrees that the host receives it.
                    prop_assert!(matches!(
                        policy::method_direction(method),
                        Some(policy::Direction::ServerToHost) | Some(policy::Direction::Either)
                    ));
                }
                Step::Hook(positions) => {
                    let applies = before_inference_applies(&host.grant);
                    prop_assert_eq!(applies, oracle_admits(g, "context/beforeInference", &json!({})));
                    for p in positions {
                        let (name, cap) = match p {
                            0 => ("system", Some(Capability::InjectSystem)),
                            1 => ("beforeUser", Some(Capability::InjectBeforeUser)),
                            2 => ("afterUser", Some(Capability::InjectAfterUser)),
                            _ => ("sideways", None),
                        };
                        // featureSet and namespace are testimony: they never authorize.
                        let inj = json!({"position": name, "featureSet": "anything", "namespace": "x"});
                        let ok = authorize_injection(&host.grant, &inj).is_ok();
                        prop_assert_eq!(ok, cap.is_some_and(|c| g.contains(c)), "{} under {:?}", name, g);
                    }
                    let mut params = json!({"userMessage": {"content": "secret"}});
                    policy::redact_before_inference(&host.grant, &mut params);
                    prop_assert_eq!(params["userMessage"].is_null(), !g.contains(Capability::Observe));
                }
            }
        }
    }
}
