//! What recovery finds and what it does about it: torn tails, damage and
//! gaps on real files, hand-built hostile directories, power loss at
//! scale on the simulated disk, recycled segments, large records in
//! preallocated segments, and the checkpoint markers recovery reports.

#[path = "../common/mod.rs"]
mod common;

mod adversarial;
mod checkpoint_marker;
mod given_up;
mod large_writes;
mod recovery;
mod recycle;
mod salvage;
mod sim;
