//! `cargo fuzz run gitlab`: see `hookinbox_fuzz::schemes` for what is built and checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookinbox_fuzz::schemes::gitlab(data));
