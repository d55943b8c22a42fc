#![no_main]
//! Fuzz target `framing`: the body is [`mcpl_fuzz::framing`], also run on stable by
//! `crates/mcpl/tests/reliability_fuzz_bodies.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpl_fuzz::framing(data));
