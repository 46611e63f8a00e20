//! Crate-wide concurrency tools every folder may use: the executable
//! lock order (every lock of the engine, ranked, checked in debug
//! builds) and the set of task wakers parked on a condition. They import
//! nothing from the engine but its error type, so that no folder needs
//! another to take a lock.

pub(crate) mod lock_order;
pub(crate) mod wake;
pub(crate) mod wakers;
