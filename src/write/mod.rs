//! The write path: the reservation every append goes through, the staging
//! buffers it packs into, the ring thread that writes and syncs them, and
//! what hands durability back to producers (acks, tickets, transactions).

mod acks;
pub(crate) mod admission;
mod claim;
pub(crate) mod doorbell;
mod ledger;
pub(crate) mod log_files;
mod placement;
pub(crate) mod reserve;
pub(crate) mod retention;
pub(crate) mod ring;
pub(crate) mod shared;
pub(crate) mod staging;
mod sync_budget;
pub(crate) mod ticket;
pub(crate) mod transaction;
