#![no_main]
//! `kindred::fuzzing::names` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::names(data));
