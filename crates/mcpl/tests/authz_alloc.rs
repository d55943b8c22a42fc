//! §5.4 authorization is a hot path: checking a method or an injection against the grant
//! must not allocate. A counting global allocator (counting this thread only) proves it.
//! This is an allocation count, not a timing.
#![cfg(feature = "runtime")]

use std::hint::black_box;

use mcpl::capability::Grant;
use mcpl::policy::{authorize_injection, method_requirement};
use serde_json::json;

#[path = "support/alloc_count.rs"]
mod alloc_count;
use alloc_count::allocs;

#[test]
fn s5_4_grant_checks_do_not_allocate() {
    let grant = Grant::from_patterns([
        "tools",
        "pushEvents",
        "channels.publish",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.system",
        "inferenceRequest",
    ])
    .unwrap();
    let stream = json!({"stream": true});
    let methods = [
        "tools/call",
        "push/event",
        "channels/publish",
        "channels/typing",
        "context/beforeInference",
        "inference/request",
        "ping",
        "unknown/method",
    ];
    let injections: Vec<_> = ["system", "beforeUser", "afterUser"]
        .iter()
        .map(|p| json!({"position": p, "content": "x"}))
        .collect();
    let mut granted = 0u32;
    let mut authorized = 0u32;
    let before = allocs();
    for _ in 0..1000 {
        for m in methods {
            let params = (m == "inference/request").then_some(&stream);
            if method_requirement(black_box(m), params).is_some_and(|r| grant.satisfies(r)) {
                granted += 1;
            }
            // The denial path (the -32002 capability) must not allocate either.
            if let Some(r) = method_requirement(m, params) {
                let _ = black_box(grant.check(r));
            }
        }
        for inj in &injections {
            if authorize_injection(black_box(&grant), black_box(inj)).is_ok() {
                authorized += 1;
            }
        }
    }
    assert_eq!(allocs() - before, 0, "authorization allocated");
    // The checks did decide something: not everything granted, not everything denied.
    // tools, push, publish, beforeInference (observe), ping per round; streaming and typing denied.
    assert_eq!(granted, 5 * 1000);
    assert_eq!(authorized, 1000);
}

/// §6.4 derives every declared set's status against every `enabled`/`disabled` entry the
/// host sent, on each send the server gates and each policy it applies. Matching walked
/// both names whole (two allocations per entry and set, and a scan of the host's entry, up to
/// a message long): 1,024 entries of 16 KiB against 16 sets made one derivation take 1.2 s
/// (release build). The walk now stops at the first segment that differs and allocates
/// nothing: deriving with 128 entries of 3.6 KB allocates what deriving with none does.
#[test]
fn s6_4_deriving_against_the_hosts_entries_allocates_nothing_per_entry() {
    use mcpl::policy::{FeatureSets, Form, ServerPolicyState};
    let sets: serde_json::Map<String, serde_json::Value> = (0..16)
        .map(|i| {
            (
                format!("s{i}.x"),
                json!({"description": "d", "uses": ["pushEvents"]}),
            )
        })
        .collect();
    let (declared, _) = FeatureSets::parse(&json!(sets));
    // As many long entries as `policy::MAX_POLICY_LIST_BYTES` (256 KiB a list) takes.
    let long = "s1.".repeat(1200);
    let entries: Vec<String> = (0..64).map(|i| format!("{long}{i}")).collect();
    let mut plain = ServerPolicyState::new(declared.clone(), mcpl::capability::CapabilitySet::ALL);
    plain
        .apply(
            Form::Request,
            &json!({"effectiveCapabilities": ["pushEvents"]}),
        )
        .unwrap();
    let mut selecting = ServerPolicyState::new(declared, mcpl::capability::CapabilitySet::ALL);
    selecting
        .apply(
            Form::Request,
            &json!({"effectiveCapabilities": ["pushEvents"],
                    "enabled": entries, "disabled": entries}),
        )
        .unwrap();
    let count = |s: &ServerPolicyState| {
        let before = allocs();
        let statuses = black_box(s.statuses());
        let n = allocs() - before;
        drop(statuses);
        n
    };
    assert_eq!(count(&selecting), count(&plain));
}
