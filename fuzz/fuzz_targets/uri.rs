#![no_main]
//! Fuzz target `uri`: the body is [`mcpl_fuzz::uri`], also run on stable by
//! `crates/mcpl/tests/reliability_fuzz_bodies.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpl_fuzz::uri(data));
