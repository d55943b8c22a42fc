//! Issue "Performance" item 3: authorization checks against a `HashSet<&str>` lookup
//! baseline, measured back to back, plus an allocation count (zero per check).
//!
//! Run: `cargo bench -p mcpl --bench authz`.

mod common;

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use common::{record, report, Ratio};
use mcpl::capability::{Capability, Grant};
use mcpl::policy::{authorize_injection, method_requirement};
use serde_json::{json, Value};

/// Counts allocations made by the current thread.
#[path = "../tests/support/alloc_count.rs"]
mod alloc_count;
use alloc_count::allocs;

/// Methods checked in turn: granted, denied, parameter-dependent and unknown ones.
const METHODS: [&str; 8] = [
    "tools/call",
    "push/event",
    "channels/publish",
    "context/beforeInference",
    "inference/request",
    "channels/typing",
    "ping",
    "unknown/method",
];

fn grant() -> Grant {
    Grant::from_patterns([
        "tools",
        "pushEvents",
        "channels.publish",
        "channels.incoming",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.system",
        "inferenceRequest",
    ])
    .unwrap_or_default()
}

fn main() {
    let mut c = common::criterion();
    let grant = grant();
    let params = json!({"stream": true, "messages": []});
    // The baseline: the granted method names (and positions) in a hash set.
    let granted: HashSet<&str> = METHODS
        .iter()
        .copied()
        .filter(|m| method_requirement(m, None).is_some_and(|r| grant.satisfies(r)))
        .collect();
    let injections: Vec<Value> = ["system", "beforeUser", "afterUser"]
        .iter()
        .map(|p| json!({"position": p, "featureSet": "demo", "content": "hello"}))
        .collect();
    let positions: HashSet<&str> = ["system"].into_iter().collect();

    let check_methods = |grant: &Grant| {
        let mut n = 0u32;
        for m in METHODS {
            let p = (m == "inference/request").then_some(&params);
            if method_requirement(black_box(m), p).is_some_and(|r| grant.satisfies(r)) {
                n += 1;
            }
        }
        n
    };
    let check_injections = |grant: &Grant| {
        let mut n = 0u32;
        for inj in &injections {
            if authorize_injection(grant, black_box(inj)).is_ok() {
                n += 1;
            }
        }
        n
    };

    // Zero allocations per check (an allocation count, not a timing).
    let before = allocs();
    for _ in 0..10_000 {
        black_box(check_methods(black_box(&grant)));
        black_box(check_injections(black_box(&grant)));
    }
    let made = allocs() - before;
    println!("allocations across 10,000 rounds of 8 method + 3 injection checks: {made}");
    assert_eq!(made, 0, "authorization checks must not allocate");

    let mut g = c.benchmark_group("authz");
    g.bench_function("baseline_hashset_8_methods", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut n = 0u32;
                for m in METHODS {
                    if granted.contains(black_box(m)) {
                        n += 1;
                    }
                }
                black_box(n);
            }
            record("authz/methods/base", iters, t.elapsed())
        })
    });
    g.bench_function("method_requirement_satisfies_8_methods", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(check_methods(black_box(&grant)));
            }
            record("authz/methods/sub", iters, t.elapsed())
        })
    });
    g.bench_function("baseline_hashset_3_positions", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut n = 0u32;
                for inj in &injections {
                    let pos = black_box(inj).get("position").and_then(Value::as_str);
                    if pos.is_some_and(|p| positions.contains(p)) {
                        n += 1;
                    }
                }
                black_box(n);
            }
            record("authz/inject/base", iters, t.elapsed())
        })
    });
    g.bench_function("authorize_injection_3_positions", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(check_injections(black_box(&grant)));
            }
            record("authz/inject/sub", iters, t.elapsed())
        })
    });
    g.bench_function("grant_allows_one_leaf", |b| {
        b.iter(|| black_box(&grant).allows(black_box(Capability::InjectSystem)))
    });
    g.finish();
    c.final_summary();
    report(
        "authz",
        &[
            Ratio {
                name: "method_requirement+satisfies / HashSet<&str> (8 methods)",
                subject: "authz/methods/sub",
                baseline: "authz/methods/base",
                target: Some(3.0),
            },
            Ratio {
                name: "authorize_injection / HashSet<&str> (3 injections)",
                subject: "authz/inject/sub",
                baseline: "authz/inject/base",
                target: Some(3.0),
            },
        ],
    );
}
