//! `cargo fuzz run raw_http`: see `hookinbox_fuzz::raw_http` for what is sent and checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookinbox_fuzz::raw_http::run(data));
