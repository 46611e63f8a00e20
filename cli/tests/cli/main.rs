//! The `ringwal` command, run as a user would, and the library under it
//! checked against a model: the command-line contract (`commands`), the
//! exit-status contract against every kind of trouble (`contract`),
//! `ringwal append` under SIGKILL (`crash`), reading past LSNs a repair
//! gave up (`given_up`), the model-based contract test (`model`), object
//! storage against a real S3 server (`s3`) and the archive's faults
//! (`archive`), and `bench --busy-neighbour`'s spinning process
//! (`neighbour`).
//! One binary, so that the dependencies are linked once.
//!
//! Every test here that spawns a process or opens a log shares one lock
//! (`common::spawn`, `common::library::{spawning_processes,
//! opening_logs}`): see `common::spawn` for why.

#[path = "../common/mod.rs"]
mod common;

mod archive;
mod commands;
mod contract;
mod crash;
mod given_up;
mod model;
mod neighbour;
mod s3;
