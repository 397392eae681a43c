#![no_main]
//! `kindred::fuzzing::request_body` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::request_body(data));
