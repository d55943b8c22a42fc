//! Model-based test of the real [`HostState`] against the real [`ServerState`]: random
//! policy changes (accepted, answered with an error, or never answered) and server
//! messages, checked after every step against plain set algebra:
//! initial G = P ∩ A; a change to P' narrows first (G ∩ P' ∩ A) and widens to P' ∩ A only
//! on an accepting receipt; a message needing c is admitted iff c ∈ G where it is read.

use super::*;
use crate::capability::CapabilitySet;
use proptest::prelude::*;

const UNIVERSE: [Capability; 3] = [
    Capability::PushEvents,
    Capability::ChannelsRegister,
    Capability::ChannelsIncoming,
];

fn set_of(mask: u8) -> CapabilitySet {
    UNIVERSE
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| *c)
        .collect()
}

fn paths(set: CapabilitySet) -> Vec<String> {
    set.sorted_paths().into_iter().map(str::to_owned).collect()
}

#[derive(Debug, Clone)]
enum Answer {
    Accept,
    Error,
    Silent,
}

#[derive(Debug, Clone)]
enum Step {
    Policy(u8, Answer),
    Send(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            0u8..8,
            prop_oneof![
                Just(Answer::Accept),
                Just(Answer::Error),
                Just(Answer::Silent)
            ]
        )
            .prop_map(|(m, a)| Step::Policy(m, a)),
        (0usize..3).prop_map(Step::Send),
    ]
}

fn advertised_rules(adv: u8) -> ServerRules {
    let mut m = json!({ "version": "0.5", "featureSets": { "news": { "uses": ["pushEvents"] } } });
    let set = set_of(adv);
    if set.contains(Capability::PushEvents) {
        m["pushEvents"] = json!({});
    }
    let mut channels = Map::new();
    if set.contains(Capability::ChannelsRegister) {
        channels.insert("register".into(), json!({}));
    }
    if set.contains(Capability::ChannelsIncoming) {
        channels.insert("incoming".into(), json!({}));
    }
    if !channels.is_empty() {
        m["channels"] = Value::Object(channels);
    }
    let mut rules = server_rules();
    rules.manifest = m;
    rules
}

fn message(i: usize, n: i64) -> Value {
    match i {
        0 => push(n, &format!("e{n}")),
        1 => json!({"jsonrpc": "2.0", "id": n, "method": "channels/register",
                    "params": {"channels": []}}),
        _ => json!({"jsonrpc": "2.0", "id": n, "method": "channels/incoming",
                    "params": {"messages": []}}),
    }
}

fn admitted(p: &Pair, n: i64) -> bool {
    let answered = p.host_answer(n);
    match answered {
        // Answered by the host: push/event.
        Some(v) => v.get("result").is_some(),
        // Handed to the driver: admitted.
        None => p.host_out.iter().any(|o| {
            matches!(
                o,
                HostOutput::Request { id, .. } if *id == RequestId::from(n)
            )
        }),
    }
}

proptest! {
    #[test]
    fn host_state_grant_follows_the_set_algebra(
        adv in 0u8..8,
        initial in 0u8..8,
        steps in proptest::collection::vec(step(), 1..24),
    ) {
        let a = set_of(adv);
        let mut p = Pair::new(&[], advertised_rules(adv));
        p.host = HostState::new(
            HostRules::new(paths(set_of(initial))),
            p.now,
            SystemTime::UNIX_EPOCH,
        ).unwrap();
        p.host.start(p.now);
        p.drive();
        let mut g = set_of(initial).intersection(a);
        prop_assert_eq!(p.host.grant().capabilities(), g);
        let mut n = 1000;
        for s in steps {
            match s {
                Step::Policy(mask, answer) => {
                    let new = set_of(mask);
                    p.host.set_policy(p.now, paths(new)).unwrap();
                    g = g.intersection(new).intersection(a);
                    prop_assert_eq!(p.host.grant().capabilities(), g, "narrowed first");
                    match answer {
                        Answer::Accept => {
                            p.drive();
                            g = new.intersection(a);
                        }
                        Answer::Error => {
                            p.collect();
                            let req = p.to_server.pop_back().unwrap();
                            let id: Value = serde_json::from_str::<Value>(&req).unwrap()["id"].clone();
                            p.server_writes(json!({"jsonrpc": "2.0", "id": id,
                                "error": {"code": -32603, "message": "no"}}));
                            p.drive();
                        }
                        Answer::Silent => {
                            p.collect();
                            p.to_server.pop_back();
                            let at = p.host.poll_timeout().unwrap();
                            p.host.handle_timeout(at);
                            p.collect();
                        }
                    }
                    prop_assert_eq!(p.host.grant().capabilities(), g);
                }
                Step::Send(i) => {
                    n += 1;
                    p.server_writes(message(i, n));
                    p.drive();
                    let need = UNIVERSE[i];
                    prop_assert_eq!(admitted(&p, n), g.contains(need), "{:?} under {:?}", need, g);
                }
            }
        }
    }
}
