//! The write path: the reservation every append goes through, the staging
//! buffers it packs into, the ring thread that writes and syncs them, and
//! what hands durability back to producers (acks, tickets, transactions).

mod acks;
mod claim;
mod ledger;
pub(crate) mod reserve;
pub(crate) mod retention;
pub(crate) mod ring;
mod sync_budget;
pub(crate) mod ticket;
pub(crate) mod transaction;
