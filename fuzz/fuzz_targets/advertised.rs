#![no_main]
//! Fuzz target `advertised`: the body is [`mcpl_fuzz::advertised`], also run on stable by
//! `crates/mcpl/tests/reliability_fuzz_bodies.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpl_fuzz::advertised(data));
