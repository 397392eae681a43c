#![no_main]
//! `kindred::fuzzing::text` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::text(data));
