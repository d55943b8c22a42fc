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
