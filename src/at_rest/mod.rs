//! What a record is at rest: the on-disk format, the payload transforms
//! (compression, then encryption) and the keys.

pub(crate) mod codec;
pub mod crypt;
pub mod format;
pub(crate) mod payload;
