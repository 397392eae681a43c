#![no_main]
//! `kindred::fuzzing::ingest` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::ingest(data));
