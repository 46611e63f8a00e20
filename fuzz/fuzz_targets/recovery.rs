#![no_main]
//! See `ringwal_fuzz::recovery` for the input layout and the oracles.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ringwal_fuzz::recovery::check(data);
});
