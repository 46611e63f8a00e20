//! What a record is at rest: the on-disk format, the payload transforms
//! (compression, then encryption) and the keys.

pub(crate) mod codec;
// `crypt` and `format` are public with the `internals` feature only
// (src/lib.rs); without it, what only their outside users call (encoders
// the fuzzers and tests use, name parsers the CLI uses) is unused here.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub mod crypt;
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub mod format;
pub(crate) mod packing;
pub(crate) mod payload;
