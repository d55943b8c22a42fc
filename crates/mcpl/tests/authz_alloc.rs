//! §5.4 authorization is a hot path: checking a method or an injection against the grant
//! must not allocate. A counting global allocator (counting this thread only) proves it.
//! This is an allocation count, not a timing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use mcpl::capability::Grant;
use mcpl::policy::{authorize_injection, method_requirement};
use serde_json::json;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

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
