#![no_main]
//! See `ringwal_fuzz::header` for the input layout and the oracles.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ringwal_fuzz::header::check(data);
});
