//! [`OwnKeys`]: an unkeyed hasher for the maps only this side inserts into (issue #24:
//! SipHash was a few percent of a lifecycle turn and of a round trip).
//!
//! HashDoS: a map whose keys the peer chooses keeps the standard library's keyed SipHash,
//! so that no peer can make its entries collide. This one is only for keys this crate or
//! the application choose (the peer's request ids we number ourselves, the application's
//! inference ids); a peer may at most look one up, which costs it a probe among ours.
//! Every hasher still starts from a seed drawn once per process, so that even an
//! application passing on ids someone else chose cannot be made to fill one bucket: with a
//! known start, two keys that collide are a two-line computation (the state after the
//! first word is known, so the second word can cancel it).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// Word at a time: xor the word in, multiply by an odd constant to 128 bits and fold the
/// halves together, so every bit of the key reaches every bit of the hash (the low ones
/// are the table's index): a few instructions per eight bytes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OwnKeyHasher(u64);

/// The multiplier: odd, with its bits spread (2^64 / the golden ratio, rounded to odd).
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

impl OwnKeyHasher {
    fn add(&mut self, word: u64) {
        let m = u128::from(self.0 ^ word) * u128::from(SPREAD);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for OwnKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            self.add(u64::from_le_bytes(w));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length too, so "a" and "a\0" differ.
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The `BuildHasher` of a map only this side inserts into (module docs): every hasher
/// starts from the process's seed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnKeys {
    seed: u64,
}

impl Default for OwnKeys {
    fn default() -> Self {
        OwnKeys { seed: seed() }
    }
}

impl BuildHasher for OwnKeys {
    type Hasher = OwnKeyHasher;

    fn build_hasher(&self) -> OwnKeyHasher {
        OwnKeyHasher(self.seed)
    }
}

/// The process's seed, drawn once from the standard library's random keys (the ones its
/// keyed SipHash uses), so no new dependency and no clock.
fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x6d63_706cu64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    /// The keys this crate makes (sequential request numbers, the ids an application
    /// numbers its inferences with) hash apart, and alike for equal keys.
    #[test]
    fn own_keys_spread_sequential_ids() {
        let b = OwnKeys::default();
        let n: HashSet<u64> = (0..100_000u64).map(|i| b.hash_one(i)).collect();
        assert_eq!(n.len(), 100_000);
        let s: HashSet<u64> = (0..100_000u64)
            .map(|i| b.hash_one(format!("a-{i:07}")))
            .collect();
        assert_eq!(s.len(), 100_000);
        // The low bits (the table's index) spread too: no 1,024-bucket table gets more than
        // a handful of ids per bucket.
        let mut buckets = [0u32; 1024];
        for i in 0..8192u64 {
            buckets[(b.hash_one(format!("i-{i}")) & 1023) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&c| c <= 32),
            "{:?}",
            buckets.iter().max()
        );
        assert_eq!(b.hash_one("x"), b.hash_one(String::from("x")));
        assert_ne!(b.hash_one(&b"a"[..]), b.hash_one(&b"a\0"[..]));
    }

    /// The two-word collision an unseeded start makes trivial: with the state after the
    /// first word known, a second word that cancels it makes another key of the same hash.
    /// From the process's seed that computation misses (module docs); every map of the
    /// process still agrees on each key.
    #[test]
    fn a_known_start_does_not_give_collisions() {
        let keys = OwnKeys::default();
        assert_eq!(keys.hash_one("x"), OwnKeys::default().hash_one("x"));
        let forged = |start: u64| {
            let after = |first: u64| {
                let mut h = OwnKeyHasher(start);
                h.add(first);
                h.0
            };
            let (a, c, b) = (0x6161_6161_6161_6161u64, 0x6363_6363_6363_6363u64, 7u64);
            let d = b ^ after(a) ^ after(c);
            let word_pair = |x: u64, y: u64| {
                let mut v = x.to_le_bytes().to_vec();
                v.extend_from_slice(&y.to_le_bytes());
                v
            };
            (word_pair(a, b), word_pair(c, d))
        };
        // Forged for a start of zero, the keys collide there …
        let (k1, k2) = forged(0);
        let hash = |b: &dyn BuildHasher<Hasher = OwnKeyHasher>, k: &[u8]| {
            let mut h = b.build_hasher();
            h.write(k);
            h.finish()
        };
        let zero = OwnKeys { seed: 0 };
        assert_eq!(
            hash(&zero, &k1),
            hash(&zero, &k2),
            "the forgery works on a known start"
        );
        // … and not in the process's maps.
        assert_ne!(keys.seed, 0);
        assert_ne!(hash(&keys, &k1), hash(&keys, &k2));
    }
}
