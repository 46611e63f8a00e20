//! Records in and out of a log on real files: appends and their tickets,
//! atomic batches and transactions, the hard size limit, encrypted and
//! compressed payloads, records serialized in place (claims), point
//! reads and tailing readers.

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod claims;
mod encryption;
mod follow;
mod limits;
mod point_read;
mod smoke;
mod tickets;
mod write_time;
