#![no_main]
//! `kindred::fuzzing::record` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::record(data));
