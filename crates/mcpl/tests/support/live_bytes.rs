//! A global allocator that counts the heap bytes the whole process holds, for the tests that
//! bound what a connection keeps (`reliability_memory.rs`, `host_*_memory.rs`). A byte count
//! is not a timing, so it may be asserted in a test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static TOTAL: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let size = layout.size() as isize;
            let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
            PEAK.fetch_max(now, Ordering::Relaxed);
            TOTAL.fetch_add(size, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Heap bytes held now.
#[allow(dead_code)]
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The most heap bytes held since the last [`reset_peak`].
#[allow(dead_code)]
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak from `bytes`.
#[allow(dead_code)]
pub fn reset_peak(bytes: isize) {
    PEAK.store(bytes, Ordering::Relaxed);
}

/// Heap bytes ever allocated.
#[allow(dead_code)]
pub fn total() -> isize {
    TOTAL.load(Ordering::Relaxed)
}
