//! Byte searches for the framing and scanning code, without a run-time CPU probe.
//!
//! `memchr`'s top-level functions pick their x86-64 kernel (SSE2 or AVX2) on first use by
//! asking the CPU through `std`'s feature detection: about ten `cpuid` instructions, which
//! a virtual machine traps, ≈ 33 µs measured on the benchmark VM (BENCHMARKS.md, setup over
//! stdio), paid once by every process, so by every short-lived stdio server on its first
//! line. SSE2 is part of the x86-64 baseline, so its kernel needs no probe; newline and
//! quote searches in JSON text are short runs where AVX2's wider steps gain little. Other
//! targets use `memchr`'s portable entry points, which probe nothing at run time there.

/// Index of the first `needle` in `haystack`.
#[inline]
pub(crate) fn find(needle: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(needle) {
        return one.find(haystack);
    }
    memchr::memchr(needle, haystack)
}

/// Index of the first `a` or `b` in `haystack`.
#[inline]
pub(crate) fn find2(a: u8, b: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(two) = memchr::arch::x86_64::sse2::memchr::Two::new(a, b) {
        return two.find(haystack);
    }
    memchr::memchr2(a, b, haystack)
}

/// Index of the `n`th (from 0) `needle` in `haystack`.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))] // the WebSocket transport's
pub(crate) fn nth(needle: u8, haystack: &[u8], n: usize) -> Option<usize> {
    let mut start = 0;
    for _ in 0..n {
        start += find(needle, haystack.get(start..)?)? + 1;
    }
    Some(start + find(needle, haystack.get(start..)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_as_memchr_does() {
        let cases: [&[u8]; 5] = [b"", b"\n", b"abc", b"a\"b\\c\nd", &[b'x'; 100]];
        for hay in cases {
            assert_eq!(find(b'\n', hay), memchr::memchr(b'\n', hay));
            assert_eq!(find2(b'"', b'\\', hay), memchr::memchr2(b'"', b'\\', hay));
        }
        let long: Vec<u8> = (0..300u32)
            .map(|i| if i % 70 == 69 { b'\n' } else { b'a' })
            .collect();
        assert_eq!(find(b'\n', &long), Some(69));
        assert_eq!(nth(b'\n', &long, 0), Some(69));
        assert_eq!(nth(b'\n', &long, 2), Some(209));
        assert_eq!(nth(b'\n', &long, 4), None);
        assert_eq!(nth(b'\n', b"", 0), None);
    }
}
