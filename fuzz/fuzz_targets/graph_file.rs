#![no_main]
//! `kindred::fuzzing::graph_file` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kindred::fuzzing::graph_file(data));
