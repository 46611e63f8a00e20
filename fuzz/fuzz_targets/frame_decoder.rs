#![no_main]
//! See `ringwal_fuzz::frame` for the input layout and the oracles.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ringwal_fuzz::frame::check(data);
});
